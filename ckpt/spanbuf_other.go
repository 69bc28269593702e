//go:build !unix

package ckpt

// spanBuf allocates n bytes on the Go heap (no anonymous mmap here; direct
// I/O, which needs page alignment, is never used on these systems).
func spanBuf(n int) ([]byte, error) { return make([]byte, n), nil }

// freeSpanBuf leaves a buffer from spanBuf to the garbage collector.
func freeSpanBuf(b []byte) error { return nil }

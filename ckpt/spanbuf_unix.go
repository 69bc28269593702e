//go:build unix

package ckpt

import "golang.org/x/sys/unix"

// spanBuf maps n bytes (a multiple of directAlign) of anonymous memory:
// page-aligned as O_DIRECT needs, and outside the Go heap, so the span
// buffers do not raise the garbage collector's heap goal.
func spanBuf(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
}

// freeSpanBuf unmaps a buffer from spanBuf.
func freeSpanBuf(b []byte) error { return unix.Munmap(b) }

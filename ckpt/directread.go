package ckpt

import (
	"errors"
	"io"
	"os"
	"sync"
)

// DirectReader reads a local file with O_DIRECT where it can: the bytes go
// from the device into the caller's memory without a second copy in the
// page cache, so a node that keeps a model in its own memory (ferry-serve's
// sealed shared memory) does not also hold it in the page cache. It is for
// large aligned reads into page-aligned memory (mmap): a read whose
// offset, length or buffer address is not aligned to 4096 bytes, a file
// that is not local, and a file system that does not report its direct-I/O
// alignment (tmpfs, many FUSE and network file systems) or refuses a read
// are all read through File.ReadAt, with the same bytes as the result.
//
// ReadAt is safe for concurrent use, as File's.
type DirectReader struct {
	f File
	d *os.File // the O_DIRECT descriptor; nil: buffered only

	mu     sync.Mutex
	direct int64 // bytes read with O_DIRECT
	failed bool  // the file system refused a direct read: buffered from then on
}

// NewDirectReader returns a DirectReader for f; Close closes its own
// descriptor, not f.
func NewDirectReader(f File) *DirectReader {
	return &DirectReader{f: f, d: openDirectRead(f)}
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt.
func (r *DirectReader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	d := r.d
	if r.failed {
		d = nil
	}
	r.mu.Unlock()
	if d == nil || off%directAlign != 0 || len(p)%directAlign != 0 || len(p) == 0 {
		return r.f.ReadAt(p, off)
	}
	n, err := d.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) && n == 0 {
		// EINVAL for a buffer that is not aligned, or a file system that
		// accepted O_DIRECT at open but refuses the read: buffered, for
		// this read and the next ones (a caller reads into mmap'd memory)
		r.mu.Lock()
		r.failed = true
		r.mu.Unlock()
		return r.f.ReadAt(p, off)
	}
	if n > 0 {
		r.mu.Lock()
		r.direct += int64(n)
		r.mu.Unlock()
	}
	return n, err
}

// DirectBytes is how many bytes were read with O_DIRECT so far.
func (r *DirectReader) DirectBytes() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.direct
}

// Close closes the O_DIRECT descriptor.
func (r *DirectReader) Close() error {
	if r.d == nil {
		return nil
	}
	return r.d.Close()
}

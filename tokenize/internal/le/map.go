package le

import (
	"fmt"
	"io"
	"os"
)

// ReadFile returns the bytes of the regular file at path, of at most max
// bytes: mapped read-only where the system has mmap (mapped is then true),
// else read into the heap. Mapped bytes stay valid until Unmap; writing to
// them faults. Another process that writes the file in place changes them,
// and one that truncates it makes reading past the new end fault: files
// that are mapped must be replaced by rename, never rewritten.
func ReadFile(path string, max int64) (b []byte, mapped bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	size := st.Size()
	if size > max || !st.Mode().IsRegular() {
		return nil, false, fmt.Errorf("%s: not a regular file of at most %d bytes", path, max)
	}
	if size > 0 && size == int64(int(size)) {
		if b, err := mapFile(f, int(size)); err == nil {
			register(b)
			return b, true, nil
		}
	}
	b = make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, false, err
	}
	return b, false, nil
}

// Unmap unmaps bytes ReadFile mapped. Nothing may use them afterwards.
func Unmap(b []byte) error {
	unregister(b)
	return unmap(b)
}

//go:build !unix

package mmap

import (
	"io"
	"os"
)

// mapFile reads the whole file: no mmap here.
func mapFile(f *os.File, size int) ([]byte, error) {
	b := make([]byte, size)
	n, err := f.ReadAt(b, 0)
	if n == size {
		return b, nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return nil, err
}

func unmap(b []byte) error { return nil }

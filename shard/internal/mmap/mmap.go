// Package mmap maps whole files read-only into memory. It is the only place
// in shard/ that makes system calls. On systems without mmap (Windows) Map
// reads the file into the Go heap instead, with the same contract.
package mmap

import (
	"fmt"
	"os"
)

// Map maps f read-only and returns its bytes and a function that unmaps
// them. An empty file gives an empty slice and a no-op unmap.
func Map(f *os.File) ([]byte, func() error, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	size := st.Size()
	if size == 0 {
		return []byte{}, func() error { return nil }, nil
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("mmap %s: file of %d bytes is not addressable", f.Name(), size)
	}
	b, err := mapFile(f, int(size))
	if err != nil {
		return nil, nil, fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	done := false
	return b, func() error {
		if done {
			return nil
		}
		done = true
		return unmap(b)
	}, nil
}

// Package mmap maps whole files read-only into memory: ferry's one file
// mapper (package shard reads every shard through it; serve maps shards
// through shard). On systems without mmap (Windows) Map reads the file into
// the Go heap instead, with the same contract.
//
// The shared read-write mapping of a serve ring (a memfd, not a file of the
// file system) is internal/shm's, with the rest of that transport.
//
// Map is safe for concurrent use. The returned bytes are valid until the
// returned unmap function is called (it may be called more than once);
// writing to them faults.
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

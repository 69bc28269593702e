//go:build !unix

package le

import (
	"errors"
	"os"
)

var errNoMmap = errors.New("no mmap on this system")

func mapFile(f *os.File, size int) ([]byte, error) { return nil, errNoMmap }

func unmap(b []byte) error { return errNoMmap }

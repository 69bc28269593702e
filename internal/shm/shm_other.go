//go:build !linux

package shm

import (
	"fmt"
	"os"
	"runtime"
)

// Seals is the seal set Memfd applies on Linux (F_SEAL_SHRINK |
// F_SEAL_GROW | F_SEAL_SEAL, the same values on every Linux
// architecture); kept here so that code comparing seals builds.
const Seals = 0x0002 | 0x0004 | 0x0001

func unsupported(op string) error {
	return fmt.Errorf("%s on %s: %w", op, runtime.GOOS, ErrUnsupported)
}

// Memfd returns an error wrapping ErrUnsupported: memfd_create is Linux's.
func Memfd(name string, size int64) (*os.File, error) {
	return nil, unsupported(fmt.Sprintf("memfd %q", name))
}

// GetSeals returns an error wrapping ErrUnsupported: file seals are Linux's.
func GetSeals(f *os.File) (int, error) { return 0, unsupported("F_GET_SEALS") }

// Eventfd returns an error wrapping ErrUnsupported: eventfd is Linux's.
func Eventfd() (*os.File, error) { return nil, unsupported("eventfd") }

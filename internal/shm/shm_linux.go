package shm

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Seals applied by Memfd: the size can neither shrink nor grow, and the seal
// set itself is frozen. A peer that maps the file can therefore never take a
// SIGBUS from a truncation. Writes stay allowed (the daemon fills slots).
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// Memfd creates an anonymous memory file of size bytes named name (the name
// only shows in /proc/PID/fd as "memfd:NAME"), sized and sealed with Seals.
// The returned file is close-on-exec.
func Memfd(name string, size int64) (*os.File, error) {
	if size <= 0 {
		return nil, fmt.Errorf("shm: memfd %q: size %d must be positive", name, size)
	}
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shm: memfd_create %q: %w", name, err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: memfd %q: ftruncate %d: %w", name, size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shm: memfd %q: add seals: %w", name, err)
	}
	return os.NewFile(uintptr(fd), "memfd:"+name), nil
}

// GetSeals returns the seals of a memfd (F_GET_SEALS).
func GetSeals(f *os.File) (int, error) {
	return unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
}

// Eventfd creates a non-blocking, close-on-exec eventfd counter starting at
// zero. Because it is non-blocking, Go's runtime poller serves reads of the
// returned file: Read blocks the goroutine, not a thread, and Close or a
// deadline wakes it.
func Eventfd() (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("shm: eventfd: %w", err)
	}
	return os.NewFile(uintptr(fd), "eventfd"), nil
}

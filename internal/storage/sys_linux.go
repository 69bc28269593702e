package storage

import (
	"errors"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
)

// renameNoReplace renames oldpath to newpath, failing with an error
// wrapping fs.ErrExist when newpath exists. It uses renameat2(2) with
// RENAME_NOREPLACE, which is atomic; on file systems that do not support
// the flag (some FUSE mounts) it falls back to a check and a rename.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EEXIST):
		return fs.ErrExist
	case errors.Is(err, unix.EINVAL), errors.Is(err, unix.ENOSYS), errors.Is(err, unix.ENOTSUP):
		if _, serr := os.Lstat(newpath); serr == nil {
			return fs.ErrExist
		}
		return os.Rename(oldpath, newpath)
	default:
		return &os.LinkError{Op: "rename", Old: oldpath, New: newpath, Err: err}
	}
}

// adviseSequential tells the kernel that f will be read once, front to
// back, so that it reads ahead aggressively. Advice only: errors are ignored.
func adviseSequential(f *os.File) {
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
}

//go:build !linux

package storage

import (
	"io/fs"
	"os"
)

// renameNoReplace renames oldpath to newpath unless newpath exists. Without
// renameat2 the check and the rename are two steps.
func renameNoReplace(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return fs.ErrExist
	}
	return os.Rename(oldpath, newpath)
}

func adviseSequential(*os.File) {}

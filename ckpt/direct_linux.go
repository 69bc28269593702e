package ckpt

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// kernelCopySupported: os.File.ReadFrom between two regular files is
// copy_file_range(2) on Linux.
const kernelCopySupported = true

// openDirect opens path for O_DIRECT writes, or returns nil when the file
// system does not support direct I/O with alignments dividing directAlign.
func openDirect(path string) *os.File {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	var st unix.Statx_t
	err = unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	if err != nil || st.Mask&unix.STATX_DIOALIGN == 0 || !divides(st.Dio_mem_align, directAlign) || !divides(st.Dio_offset_align, directAlign) {
		f.Close()
		return nil
	}
	return f
}

func divides(a uint32, n int) bool { return a > 0 && n%int(a) == 0 }

// onFUSE reports whether path is on a FUSE mount (fuse or fuseblk: statfs
// reports FUSE_SUPER_MAGIC for both, as /proc/self/mountinfo reports
// fstype fuse.NAME or fuseblk).
func onFUSE(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.FUSE_SUPER_MAGIC
}

// openDirectRead opens a second descriptor of f's file for O_DIRECT reads
// (through /proc/self/fd, so it is the same file, whatever happened to its
// path), or returns nil when f is not a local file or its file system does
// not support direct reads with alignments dividing directAlign.
func openDirectRead(f File) *os.File {
	of, ok := f.(*osFile)
	if !ok {
		return nil
	}
	d, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", of.Fd()), os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil
	}
	var st unix.Statx_t
	err = unix.Statx(int(d.Fd()), "", unix.AT_EMPTY_PATH, unix.STATX_DIOALIGN, &st)
	if err != nil || st.Mask&unix.STATX_DIOALIGN == 0 || !divides(st.Dio_mem_align, directAlign) || !divides(st.Dio_offset_align, directAlign) {
		d.Close()
		return nil
	}
	return d
}

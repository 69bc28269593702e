//go:build !linux

package ckpt

import "os"

// kernelCopySupported: without copy_file_range(2), os.File.ReadFrom is a
// user-space copy, so the merge takes the buffered path and says so.
const kernelCopySupported = false

// openDirect reports that direct I/O is unsupported (there is no statx
// STATX_DIOALIGN to learn the alignment from): local files are written
// buffered.
func openDirect(path string) *os.File { return nil }

// onFUSE reports false: FUSE mounts are detected on Linux only, and
// elsewhere the user asks for WriteSequential.
func onFUSE(path string) bool { return false }

// openDirectRead reports that direct reads are unsupported: files are read
// through the page cache.
func openDirectRead(f File) *os.File { return nil }

//go:build linux

// Package smallfs mounts small, real file systems for tests that need a
// disk to fill up: a tmpfs, or an ext4 image on a loop device (ext4 has
// what tmpfs lacks, such as direct I/O). Mounting needs root (or
// CAP_SYS_ADMIN); without it the test is skipped, or fails when
// FERRY_REQUIRE_TOOLS=1 (as in `make test`).
package smallfs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Tmpfs mounts a tmpfs of the given size ("1m", "64k", ...) on a fresh
// directory, unmounted when the test ends.
func Tmpfs(t testing.TB, size string) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		unavailable(t, fmt.Sprintf("cannot mount a tmpfs (needs root or CAP_SYS_ADMIN): %v", err))
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// Ext4 makes an ext4 file system of size bytes (at least 4 MiB) in an image
// file and mounts it through a loop device on a fresh directory, unmounted
// when the test ends.
func Ext4(t testing.TB, size int64) string {
	t.Helper()
	work := t.TempDir()
	img := filepath.Join(work, "fs.img")
	dir := filepath.Join(work, "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, max(size, 4<<20)); err != nil {
		t.Fatal(err)
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		unavailable(t, "no mkfs.ext4 (Debian: e2fsprogs)")
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-b", "4096", "-E", "nodiscard", img).CombinedOutput(); err != nil {
		unavailable(t, fmt.Sprintf("mkfs.ext4: %v\n%s", err, out))
	}
	if out, err := exec.Command("mount", "-o", "loop", img, dir).CombinedOutput(); err != nil {
		unavailable(t, fmt.Sprintf("cannot loop-mount an ext4 image (needs root and a loop device): %v\n%s", err, out))
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	return dir
}

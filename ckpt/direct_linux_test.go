package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/smallfs"
	"github.com/ferryml/ferry/internal/testutil/synthckpt"
)

// injectDirectErr makes the direct write number n (counting from 0) and,
// with sticky, every later one fail with err.
func injectDirectErr(t *testing.T, n int64, sticky bool, err error) {
	t.Helper()
	orig := directWriteAt
	var calls atomic.Int64
	directWriteAt = func(f *os.File, p []byte, off int64) (int, error) {
		c := calls.Add(1) - 1
		if c == n || (sticky && c > n) {
			return 0, &os.PathError{Op: "write", Path: f.Name(), Err: err}
		}
		return orig(f, p, off)
	}
	t.Cleanup(func() { directWriteAt = orig })
}

// A file system that refuses a direct write (EINVAL: an alignment it did
// not report) gets the rest of the file through buffered writes, with the
// same bytes.
func TestDirectFallsBackToBuffered(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4")
	want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	if !directSupported(t, t.TempDir()) {
		t.Fatalf("the test directory %s does not take direct I/O; this test needs one that does", os.TempDir())
	}
	for _, at := range []int64{0, 2} {
		t.Run(fmt.Sprint("from write ", at), func(t *testing.T) {
			injectDirectErr(t, at, true, syscall.EINVAL)
			out, res := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, MergeOptions{Parallelism: 3, BufferSize: 4096, Verify: true})
			got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("output differs from expected.safetensors")
			}
			if res.Files[0].IO != IOFallback {
				t.Fatalf("wrote %s, want %s", res.Files[0].IO, IOFallback)
			}
		})
	}
}

// Any other write error fails the merge and leaves nothing behind, also
// files of a sharded output committed before the failure.
func TestDirectWriteErrorLeavesNothing(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4")
	if !directSupported(t, t.TempDir()) {
		t.Fatalf("the test directory %s does not take direct I/O; this test needs one that does", os.TempDir())
	}
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, at := range []int64{0, 3, 9} {
		t.Run(fmt.Sprint("write ", at), func(t *testing.T) {
			injectDirectErr(t, at, false, syscall.EIO)
			out := t.TempDir()
			_, err := Merge(context.Background(), ck, planFor(t, ck, PlanOptions{MaxShardSize: 12000}), DirSink(out), MergeOptions{Parallelism: 2, BufferSize: 4096})
			if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), "write at byte") {
				t.Fatalf("err = %v, want EIO naming the offset", err)
			}
			if left := listDir(t, out); len(left) != 0 {
				t.Fatalf("a failed merge left %v", left)
			}
		})
	}
}

// On a real ext4 file system that fills up, a direct-I/O merge fails with
// ENOSPC and leaves nothing (the space is given back); one that fits
// takes the direct path.
func TestDirectDiskFull(t *testing.T) {
	mnt := smallfs.Ext4(t, 8<<20)
	src := t.TempDir()
	synthckpt.HFShards(t, src, 4, 512, 2048, 2) // 16 MiB of tensors
	ck, err := OpenDir(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	free := func() uint64 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		return st.Bfree * uint64(st.Bsize)
	}
	before := free()
	out := filepath.Join(mnt, "out")
	_, err = Merge(context.Background(), ck, planFor(t, ck, PlanOptions{MaxShardSize: 3 << 20}), DirSink(out), MergeOptions{Parallelism: 3, BufferSize: 1 << 20})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ENOSPC", err)
	}
	if left := listDir(t, out); len(left) != 0 {
		t.Fatalf("a failed merge left %v", left)
	}
	if after := free(); after+64<<10 < before {
		t.Fatalf("free space %d bytes after the failed merge, %d before", after, before)
	}

	small := t.TempDir()
	synthckpt.HFShards(t, small, 2, 256, 1024, 2) // 2 MiB
	ck2, err := OpenDir(context.Background(), small)
	if err != nil {
		t.Fatal(err)
	}
	defer ck2.Close()
	res, err := Merge(context.Background(), ck2, planFor(t, ck2, PlanOptions{}), DirSink(filepath.Join(mnt, "ok")), MergeOptions{Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files[0].IO != IODirect {
		t.Fatalf("merge into ext4 wrote %s, want %s", res.Files[0].IO, IODirect)
	}
}

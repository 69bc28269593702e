package ckpt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/smallfs"
	"github.com/ferryml/ferry/internal/testutil/synthckpt"
)

// fuseCases: casts, shard splits (an index written last), several
// fixtures and a 16 MiB synthetic model cut into many copy buffers.
func fuseCases(t *testing.T) []struct {
	name, dir string
	po        PlanOptions
	mo        MergeOptions
} {
	synth := t.TempDir()
	synthckpt.HFShards(t, synth, 4, 512, 2048, 4)
	return []struct {
		name, dir string
		po        PlanOptions
		mo        MergeOptions
	}{
		{"mixed-bf16-sharded", filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4"), PlanOptions{DType: BF16, MaxShardSize: 12000}, MergeOptions{BufferSize: 4096}},
		{"tp-f16", filepath.Join(fixtureRoot, "torch-1.13", "tp-ws2"), PlanOptions{DType: F16}, MergeOptions{}},
		{"torch2", filepath.Join(fixtureRoot, "torch2-ws4"), PlanOptions{MaxShardSize: 5000}, MergeOptions{BufferSize: 100}},
		{"synth-16MiB", synth, PlanOptions{MaxShardSize: 6 << 20}, MergeOptions{BufferSize: 64 << 10}},
	}
}

func mergeInto(t testing.TB, dir, out string, po PlanOptions, mo MergeOptions) (*Result, error) {
	t.Helper()
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	sel, skip, err := SelectTensors(ck.Meta, KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(sel, skip, po)
	if err != nil {
		t.Fatal(err)
	}
	return Merge(context.Background(), ck, p, DirSink(out), mo)
}

// On a FUSE mount that refuses every write not at the end of the file,
// the default write mode takes the sequential path by itself, and the
// files (and the index) are byte-identical to a merge onto local disk.
func TestFUSESequential(t *testing.T) {
	mnt := smallfs.AppendFUSE(t, true)
	if !onFUSE(mnt.Dir) {
		t.Fatalf("%s is not detected as a FUSE mount", mnt.Dir)
	}
	if onFUSE(t.TempDir()) {
		t.Fatalf("the test's temporary directory is detected as a FUSE mount")
	}
	for _, c := range fuseCases(t) {
		t.Run(c.name, func(t *testing.T) {
			local := t.TempDir()
			if _, err := mergeInto(t, c.dir, local, c.po, c.mo); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(mnt.Dir, c.name)
			mo := c.mo
			mo.Verify = true
			res, err := mergeInto(t, c.dir, out, c.po, mo)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range res.Files {
				if f.IO != IOSequential {
					t.Fatalf("%s written %s on a FUSE mount, want %s", f.Name, f.IO, IOSequential)
				}
			}
			if err := sameOutput(readOutput(t, out), readOutput(t, local)); err != nil {
				t.Fatalf("FUSE output vs local: %v", err)
			}
			// forced sequential on local disk: the same bytes again
			seq := t.TempDir()
			mo = c.mo
			mo.WriteMode = WriteSequential
			res, err = mergeInto(t, c.dir, seq, c.po, mo)
			if err != nil {
				t.Fatal(err)
			}
			if res.Files[0].IO != IOSequential {
				t.Fatalf("WriteSequential wrote %s", res.Files[0].IO)
			}
			if err := sameOutput(readOutput(t, seq), readOutput(t, local)); err != nil {
				t.Fatalf("sequential local output vs parallel: %v", err)
			}
		})
	}
	if n := mnt.Refused(); n != 0 {
		t.Fatalf("the file system refused %d writes of the sequential path", n)
	}
}

// Forcing positioned writes there fails with an error that names the
// cause and the way out, and leaves nothing in the output directory.
func TestFUSEForcedParallelFails(t *testing.T) {
	mnt := smallfs.AppendFUSE(t, true)
	c := fuseCases(t)[3] // 16 MiB in 64 KiB buffers: 4 workers cannot all land in order
	for _, mo := range []MergeOptions{
		{WriteMode: WriteParallel, Parallelism: 4, BufferSize: 64 << 10},
		{WriteMode: WriteParallel, Parallelism: 4, BufferSize: 64 << 10, NoKernelCopy: true},
	} {
		t.Run(fmt.Sprintf("kernel-copy=%v", !mo.NoKernelCopy), func(t *testing.T) {
			before := mnt.Refused()
			out := filepath.Join(mnt.Dir, "parallel")
			_, err := mergeInto(t, c.dir, out, c.po, mo)
			if err == nil {
				t.Fatal("a parallel merge onto the append-only FUSE mount succeeded")
			}
			if !errors.Is(err, syscall.EOPNOTSUPP) || !strings.Contains(err.Error(), "FUSE mount") ||
				!strings.Contains(err.Error(), "write mode parallel") || !strings.Contains(err.Error(), "model-0000") {
				t.Fatalf("err = %v, want EOPNOTSUPP naming the file, the FUSE mount and the write mode", err)
			}
			t.Logf("error: %v", err)
			if mnt.Refused() == before {
				t.Fatal("the file system refused no write")
			}
			if left := listDir(t, out); len(left) != 0 {
				t.Fatalf("a failed merge left %v", left)
			}
		})
	}
}

func TestParseWriteMode(t *testing.T) {
	for _, m := range []WriteMode{WriteAuto, WriteSequential, WriteParallel} {
		if got, err := ParseWriteMode(m.String()); err != nil || got != m {
			t.Fatalf("ParseWriteMode(%q) = %v, %v", m, got, err)
		}
	}
	if _, err := ParseWriteMode("random"); !errors.Is(err, ErrConfig) {
		t.Fatalf("err = %v, want ErrConfig", err)
	}
}

// BenchmarkFUSEWritePaths: the sequential and parallel paths against cp of
// the same model file, onto local disk, the strict FUSE mount (parallel
// is refused there) and the same file system without the refusal.
//
//	go test -run XXX -bench FUSEWritePaths -benchtime 3x ./ckpt
func BenchmarkFUSEWritePaths(b *testing.B) {
	src := b.TempDir()
	size := synthckpt.HFShards(b, src, 8, 1024, 4096, 4) // 128 MiB
	ref := b.TempDir()
	if _, err := mergeInto(b, src, ref, PlanOptions{}, MergeOptions{}); err != nil {
		b.Fatal(err)
	}
	model := filepath.Join(ref, "model.safetensors")
	strict := smallfs.AppendFUSE(b, true)
	loose := smallfs.AppendFUSE(b, false)
	for _, dst := range []struct{ name, dir string }{{"local", b.TempDir()}, {"fuse-strict", strict.Dir}, {"fuse", loose.Dir}} {
		for _, path := range []string{"sequential", "parallel", "cp"} {
			if dst.name == "fuse-strict" && path == "parallel" {
				continue // refused: TestFUSEForcedParallelFails
			}
			b.Run("dst="+dst.name+"/path="+path, func(b *testing.B) {
				b.SetBytes(size)
				for i := 0; i < b.N; i++ {
					out := filepath.Join(dst.dir, fmt.Sprint("out-", path, "-", i))
					switch path {
					case "cp":
						if err := os.Mkdir(out, 0o755); err != nil {
							b.Fatal(err)
						}
						if o, err := exec.Command("cp", model, out+"/").CombinedOutput(); err != nil {
							b.Fatalf("cp: %v: %s", err, o)
						}
						// cp does not fsync; sync(1) the file as Merge does
						if o, err := exec.Command("sync", filepath.Join(out, "model.safetensors")).CombinedOutput(); err != nil {
							b.Fatalf("sync: %v: %s", err, o)
						}
					default:
						mode := WriteSequential
						if path == "parallel" {
							mode = WriteParallel
						}
						res, err := mergeInto(b, src, out, PlanOptions{}, MergeOptions{WriteMode: mode})
						if err != nil {
							b.Fatal(err)
						}
						if i == 0 {
							b.Logf("%s: %s", dst.name, res.Files[0].IO)
						}
					}
					b.StopTimer()
					os.RemoveAll(out)
					b.StartTimer()
				}
			})
		}
	}
}

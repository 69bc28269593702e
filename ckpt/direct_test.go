package ckpt

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// directSupported reports whether the file system of dir takes direct I/O.
func directSupported(t *testing.T, dir string) bool {
	t.Helper()
	p := filepath.Join(dir, ".dio-probe")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(p)
	f := openDirect(p)
	if f != nil {
		f.Close()
	}
	return f != nil
}

// writePaths are the three ways a local output file is written.
var writePaths = []struct {
	name string
	mo   MergeOptions
}{
	{"direct", MergeOptions{}},
	{"kernel", MergeOptions{NoDirectIO: true}},
	{"buffered", MergeOptions{NoDirectIO: true, NoKernelCopy: true}},
}

// wantIO is the write path a merge into dir takes with options mo.
func wantIO(t *testing.T, dir string, mo MergeOptions) string {
	switch {
	case !mo.NoDirectIO && directSupported(t, dir):
		return IODirect
	case mo.kernelCopy():
		return IOKernel
	}
	return IOBuffered
}

// readOutput returns the contents of every file of a merged output.
func readOutput(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, n := range listDir(t, dir) {
		b, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		out[n] = b
	}
	return out
}

func sameOutput(a, b map[string][]byte) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d files vs %d", len(a), len(b))
	}
	for n, x := range a {
		if y, ok := b[n]; !ok || !bytes.Equal(x, y) {
			return fmt.Errorf("file %s differs (%d vs %d bytes)", n, len(x), len(y))
		}
	}
	return nil
}

// Every write path gives the ground-truth bytes for every fixture, with
// spans and copy units of many sizes (tensors straddling span edges, the
// last span partial, one worker or several).
func TestWritePathsByteIdentical(t *testing.T) {
	dirs := torch113Fixtures(t)
	for _, n := range []string{"torch2-ws4", "torch2-st-ws2", "hf-sharded-ws4"} {
		dirs = append(dirs, filepath.Join(fixtureRoot, n))
	}
	for _, dir := range dirs {
		want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		for _, wp := range writePaths {
			t.Run(filepath.Base(dir)+"/"+wp.name, func(t *testing.T) {
				for _, par := range []int{1, 3} {
					for _, buf := range []int{0, 64, 4096, 5000, 12345} {
						mo := wp.mo
						mo.Parallelism, mo.BufferSize = par, buf
						out, res := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, mo)
						got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("parallelism %d buffer %d: output (%d bytes) differs from expected.safetensors (%d bytes)", par, buf, len(got), len(want))
						}
						if w := wantIO(t, out, mo); res.Files[0].IO != w {
							t.Fatalf("parallelism %d buffer %d: wrote %s, want %s", par, buf, res.Files[0].IO, w)
						}
					}
				}
			})
		}
	}
}

// Casts, shard splits and a header longer than several spans give the same
// files on every write path.
func TestWritePathsAgree(t *testing.T) {
	long := [][2]string{{"format", "pt"}, {"note", strings.Repeat("a long header ", 900)}}
	cases := []struct {
		fixture string
		po      PlanOptions
	}{
		{"torch-1.13/mixed-ws4", PlanOptions{DType: F32}},
		{"torch-1.13/mixed-ws4", PlanOptions{DType: BF16, MaxShardSize: 12000}},
		{"torch-1.13/tp-ws2", PlanOptions{DType: F16}},
		{"torch2-ws4", PlanOptions{MaxShardSize: 5000}},
		{"torch2-ws4", PlanOptions{Metadata: long}},
	}
	for _, c := range cases {
		dir := filepath.Join(fixtureRoot, c.fixture)
		t.Run(fmt.Sprintf("%s/%s/%d/%d", c.fixture, c.po.DType, c.po.MaxShardSize, len(c.po.Metadata)), func(t *testing.T) {
			var ref map[string][]byte
			for _, wp := range writePaths {
				for _, buf := range []int{100, 4096, 9000} {
					mo := wp.mo
					mo.Parallelism, mo.BufferSize, mo.Verify = 3, buf, true
					out, res := mergeDir(t, dir, KeyOptions{}, c.po, mo)
					got := readOutput(t, out)
					if ref == nil {
						ref = got
					} else if err := sameOutput(got, ref); err != nil {
						t.Fatalf("%s, buffer %d: %v", wp.name, buf, err)
					}
					for _, f := range res.Files {
						if w := wantIO(t, out, mo); f.IO != w {
							t.Fatalf("%s: %s wrote %s, want %s", wp.name, f.Name, f.IO, w)
						}
					}
				}
			}
		})
	}
}

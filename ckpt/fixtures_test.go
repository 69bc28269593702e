package ckpt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
)

const fixtureRoot = "../testdata/dcp"

func torch113Fixtures(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(fixtureRoot, "torch-1.13", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	if len(out) != 5 {
		t.Fatalf("found %d torch-1.13 fixtures, want 5", len(out))
	}
	return out
}

// mergeDir merges a checkpoint directory with default options into a new
// temporary directory and returns it.
func mergeDir(t *testing.T, dir string, ko KeyOptions, po PlanOptions, mo MergeOptions) (string, *Result) {
	t.Helper()
	ctx := context.Background()
	ck, err := OpenDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	sel, skip, err := SelectTensors(ck.Meta, ko)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(sel, skip, po)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Merge(ctx, ck, p, DirSink(out), mo)
	if err != nil {
		t.Fatal(err)
	}
	return out, res
}

func TestTorch113FixturesByteIdentical(t *testing.T) {
	for _, dir := range torch113Fixtures(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, par := range []int{1, 3} {
				for _, buf := range []int{0, 64, 200} {
					out, _ := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, MergeOptions{Parallelism: par, BufferSize: buf, Verify: true})
					got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("parallelism %d buffer %d: output (%d bytes) differs from expected.safetensors (%d bytes)", par, buf, len(got), len(want))
					}
				}
			}
		})
	}
}

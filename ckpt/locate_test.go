package ckpt

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestLocate: each checkpoint layout is found inside the directory a user
// names, and a directory without one is not a checkpoint.
func TestLocate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string
		want  string // relative to the root; "-" for ErrNotCheckpoint
	}{
		{"dcp", []string{".metadata", "__0_0.distcp"}, ""},
		{"safetensors", []string{"model-00001-of-00002.safetensors"}, ""},
		{"accelerate", []string{"pytorch_model_fsdp_0/.metadata", "optimizer_0/.metadata"}, "pytorch_model_fsdp_0"},
		{"hf writer", []string{"sharded/shard-00001-model-00001-of-00001.safetensors"}, "sharded"},
		{"torchtitan", []string{"checkpoint/step-10/.metadata", "checkpoint/step-200/.metadata", "checkpoint/step-30/.metadata"}, "checkpoint/step-200"},
		{"torchtitan flat", []string{"step-2/.metadata", "step-11/.metadata"}, "step-11"},
		{"nothing", []string{"README.md"}, "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			dir, _, err := Locate(context.Background(), root)
			if tc.want == "-" {
				if !errors.Is(err, ErrNotCheckpoint) {
					t.Fatalf("got %q, %v; want ErrNotCheckpoint", dir, err)
				}
				return
			}
			if err != nil || dir != filepath.Join(root, tc.want) {
				t.Fatalf("got %q, %v; want %s", dir, err, filepath.Join(root, tc.want))
			}
		})
	}
	if _, _, err := Locate(context.Background(), filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing directory: %v, want fs.ErrNotExist", err)
	}
}

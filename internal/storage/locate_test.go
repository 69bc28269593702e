package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLocationLayer runs the location layer over a local directory and an
// S3 prefix: the same names listed, the same atomic put, the same verified
// fetch and the same staging, whatever the scheme.
func TestLocationLayer(t *testing.T) {
	ctx := context.Background()
	data := randBytes(3<<20+17, 9)
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	for _, where := range []string{"local", "s3"} {
		t.Run(where, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			if where == "s3" {
				_, bucket := startS3(t)
				dir = bucket + "/out"
			} else if _, ok := LocalPath(dir); !ok {
				t.Fatalf("LocalPath(%s): not local", dir)
			}
			if err := MakeDir(dir); err != nil {
				t.Fatal(err)
			}
			if names, err := ListNames(ctx, dir); err != nil || len(names) != 0 {
				t.Fatalf("empty dir: %v, %v", names, err)
			}
			for _, name := range []string{"b.bin", "a.json", "sub/c.bin"} {
				if err := MakeDir(Join(dir, "sub")); err != nil {
					t.Fatal(err)
				}
				if err := WriteFile(ctx, Join(dir, name), data); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteFile(ctx, Join(dir, "a.json"), []byte("{}")); err != nil { // replaces
				t.Fatal(err)
			}
			names, err := ListNames(ctx, dir)
			if err != nil || !slices.Equal(names, []string{"a.json", "b.bin"}) {
				t.Fatalf("ListNames: %v, %v; want [a.json b.bin]", names, err)
			}
			local := filepath.Join(t.TempDir(), "copy.bin")
			if err := Fetch(ctx, Join(dir, "b.bin"), local, hexSum, int64(len(data))); err != nil {
				t.Fatal(err)
			}
			if got, _ := os.ReadFile(local); !slices.Equal(got, data) {
				t.Fatal("fetched bytes differ")
			}
			bad := filepath.Join(t.TempDir(), "bad.bin")
			if err := Fetch(ctx, Join(dir, "b.bin"), bad, hexSum[:63]+"0", -1); !errors.Is(err, ErrChecksum) {
				t.Fatalf("wrong sum: %v, want ErrChecksum", err)
			}
			if err := Fetch(ctx, Join(dir, "b.bin"), bad, "", 5); !errors.Is(err, ErrChecksum) {
				t.Fatalf("wrong size: %v, want ErrChecksum", err)
			}
			if _, err := os.Stat(bad); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed fetch left %s: %v", bad, err)
			}
			st, err := NewStage(dir, t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := os.WriteFile(filepath.Join(st.Dir(), "d.bin"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := st.Publish(ctx, "d.bin"); err != nil {
				t.Fatal(err)
			}
			if in, err := Stat(ctx, Join(dir, "d.bin")); err != nil || in.Size != int64(len(data)) {
				t.Fatalf("published: %+v, %v", in, err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

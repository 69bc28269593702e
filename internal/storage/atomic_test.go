package storage

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAtomicFile(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "out.bin")
	a, err := CreateAtomic(target, WithTempMarker(".test-tmp-"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(a.TempName()), ".out.bin.test-tmp-") {
		t.Fatalf("temp name %s", a.TempName())
	}
	if _, err := a.File().WriteAt([]byte("world"), 6); err != nil {
		t.Fatal(err)
	}
	if _, err := a.File().WriteAt([]byte("hello "), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("target visible before Commit: %v", err)
	}
	// the target appears meanwhile: no-replace Commit refuses it
	if err := os.WriteFile(target, []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(context.Background()); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Commit over a new file: %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(target); string(got) != "other" {
		t.Fatalf("target replaced: %q", got)
	}
	if _, err := os.Stat(a.TempName()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("failed Commit left the temporary file")
	}
	if _, err := CreateAtomic(target); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CreateAtomic over a file: %v, want fs.ErrExist", err)
	}

	a, err = CreateAtomic(target, WithOverwrite(true))
	if err != nil {
		t.Fatal(err)
	}
	a.File().Write([]byte("new"))
	if err := a.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(context.Background()); err != nil {
		t.Fatalf("second Commit: %v", err)
	}
	if err := a.Abort(); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(target); string(got) != "new" {
		t.Fatalf("target %q, want new", got)
	}

	// Abort, and a Commit after it
	a, err = CreateAtomic(filepath.Join(dir, "gone"))
	if err != nil {
		t.Fatal(err)
	}
	a.Abort()
	if err := a.Commit(context.Background()); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit after Abort: %v", err)
	}
	// a cancelled context stops Commit before the rename
	a, err = CreateAtomic(filepath.Join(dir, "cancelled"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Commit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Commit with a cancelled context: %v", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want only out.bin", len(ents))
	}
	if _, err := CreateAtomic(filepath.Join(dir, "x"), WithTempMarker("a/b")); !errors.Is(err, ErrBadOption) {
		t.Fatalf("marker with a slash: %v", err)
	}
	if _, err := CreateAtomic(dir, WithOverwrite(true)); err == nil {
		t.Fatal("CreateAtomic over a directory succeeded")
	}
}

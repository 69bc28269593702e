package mmap

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMap(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("ARROW1 data"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	b, unmap, err := Map(f)
	if err != nil || string(b) != "ARROW1 data" {
		t.Fatalf("%q %v", b, err)
	}
	if err := unmap(); err != nil {
		t.Fatal(err)
	}
	if err := unmap(); err != nil {
		t.Fatalf("second unmap: %v", err)
	}
	os.WriteFile(p+"0", nil, 0o644)
	f0, _ := os.Open(p + "0")
	defer f0.Close()
	if b, unmap, err := Map(f0); err != nil || len(b) != 0 || unmap() != nil {
		t.Fatalf("empty file: %d bytes, %v", len(b), err)
	}
}

package ckpt

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestDirectReader reads a file through DirectReader in aligned and
// unaligned pieces, into page-aligned (mmap) and ordinary buffers: every
// read gives the file's bytes, and where the file system takes O_DIRECT
// (openDirectRead says so) the aligned reads went through it.
func TestDirectReader(t *testing.T) {
	dir := t.TempDir()
	want := make([]byte, 5*directAlign+123)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "w.safetensors"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := DirSource(dir).Open(context.Background(), "w.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewDirectReader(f)
	defer r.Close()
	canDirect := r.d != nil
	if runtime.GOOS != "linux" && canDirect {
		t.Fatal("a direct descriptor off Linux")
	}
	aligned, err := spanBuf(4 * directAlign)
	if err != nil {
		t.Fatal(err)
	}
	defer freeSpanBuf(aligned)
	for _, c := range []struct {
		off, n  int
		aligned bool
	}{
		{0, 4 * directAlign, true},
		{directAlign, 2 * directAlign, true},
		{3, 100, true},                // unaligned offset and length
		{directAlign, 5000, true},     // unaligned length
		{0, 2 * directAlign, false},   // ordinary Go memory: maybe unaligned
		{4 * directAlign, 123, false}, // the tail
	} {
		buf := make([]byte, c.n)
		if c.aligned {
			buf = aligned[:c.n]
			clear(buf)
		}
		n, err := r.ReadAt(buf, int64(c.off))
		if n != c.n || (err != nil && n != c.n) {
			t.Fatalf("ReadAt(%d, %d): %d bytes, %v", c.off, c.n, n, err)
		}
		if !bytes.Equal(buf, want[c.off:c.off+c.n]) {
			t.Fatalf("ReadAt(%d, %d): wrong bytes", c.off, c.n)
		}
	}
	if canDirect && r.DirectBytes() < 6*directAlign {
		t.Errorf("the file system takes O_DIRECT but only %d bytes were read with it, want at least %d", r.DirectBytes(), 6*directAlign)
	}
	t.Logf("O_DIRECT supported here: %v; %d bytes read with it", canDirect, r.DirectBytes())
}

package le

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
)

func TestViews(t *testing.T) {
	buf := make([]byte, 64+1)
	for i := range buf {
		buf[i] = byte(i*37 + 1)
	}
	for _, off := range []int{0, 1, 4, 8} {
		b := buf[off : off+48]
		if got, want := Uint32s(b), CopyUint32s(b); !slices.Equal(got, want) || len(want) != 12 {
			t.Errorf("offset %d: Uint32s %x, want %x", off, got, want)
		}
		if got, want := Uint64s(b), CopyUint64s(b); !slices.Equal(got, want) || len(want) != 6 {
			t.Errorf("offset %d: Uint64s %x, want %x", off, got, want)
		}
		if got := String(b); got != string(b) {
			t.Errorf("offset %d: String %q", off, got)
		}
	}
	if want := uint32(0x04030201); CopyUint32s([]byte{1, 2, 3, 4})[0] != want {
		t.Errorf("not little-endian")
	}
	for _, b := range [][]byte{nil, {}} {
		if len(Uint32s(b)) != 0 || len(Uint64s(b)) != 0 || String(b) != "" {
			t.Errorf("empty input: non-empty output")
		}
	}
	// An aligned view shares memory where the build allows it.
	b := make([]byte, 1<<20) // on the heap: aligned
	v := Uint64s(b)
	b[0] = 7
	if got := v[0] == 7; got != shared {
		t.Errorf("shares memory: %v, want %v", got, shared)
	}
}

func TestSubstrings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := []byte("abcdefghij")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	b, mapped, err := ReadFile(path, 100)
	if err != nil || string(b) != string(data) {
		t.Fatalf("ReadFile: %q, %v", b, err)
	}
	ends := []uint32{0, 0, 3, 3, 7, 10}
	want := []string{"", "abc", "", "defg", "hij"}
	// The mapped bytes (no write barriers) and a heap copy give the same.
	for _, s := range []string{String(b), string(data)} {
		// A GC marking meanwhile must find nothing wrong.
		done := make(chan bool)
		go func() {
			runtime.GC()
			close(done)
		}()
		for range 100 {
			got := Substrings(s, ends, 8)
			if !slices.Equal(got, want) || cap(got) < 8 {
				t.Fatalf("Substrings: %q (cap %d), want %q", got, cap(got), want)
			}
		}
		<-done
	}
	if got := Substrings("", []uint32{0}, 0); len(got) != 0 {
		t.Errorf("no ends: %q", got)
	}
	if mapped && shared {
		if !inMapped(String(b)) || inMapped(string(data)) {
			t.Errorf("inMapped: mapped %v, heap %v", inMapped(String(b)), inMapped(string(data)))
		}
		if err := Unmap(b); err != nil {
			t.Fatal(err)
		}
		if inMapped(String(b)) {
			t.Errorf("still registered after Unmap")
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("ends past the string: no panic")
			}
		}()
		Substrings("abc", []uint32{0, 4}, 0)
	}()
}

func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, make([]byte, 11), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadFile(path, 10); err == nil {
		t.Errorf("a file over the limit read")
	}
	if _, _, err := ReadFile(dir, 10); err == nil {
		t.Errorf("a directory read")
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, mapped, err := ReadFile(empty, 10); err != nil || len(b) != 0 || mapped {
		t.Errorf("empty file: %d bytes, mapped %v, %v", len(b), mapped, err)
	}
}

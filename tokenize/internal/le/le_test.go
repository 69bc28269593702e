package le

import (
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

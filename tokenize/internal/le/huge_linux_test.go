//go:build linux && !purego && (amd64 || arm64)

package le

import (
	"bufio"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// mapping returns the /proc/self/smaps entry (its lines) of the mapping
// that holds address p, or nil.
func mapping(t *testing.T, p uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cur []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(strings.Fields(line)[0], "-") {
			if in {
				return cur
			}
			in = lo <= p && p < hi
			cur = nil
		}
		if in {
			cur = append(cur, line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if in {
		return cur
	}
	return nil
}

func TestHuge(t *testing.T) {
	small, m := Huge[uint64](1000)
	if len(small) != 1000 || m != nil || slices.ContainsFunc(small, func(v uint64) bool { return v != 0 }) {
		t.Fatalf("Huge(1000): len %d, mem %v: want make's zeroed memory", len(small), m)
	}
	n := 3 * hugePage / 16 // 1.5 huge pages
	s, m := Huge[uint64](n)
	if len(s) != n || slices.ContainsFunc(s, func(v uint64) bool { return v != 0 }) {
		t.Fatalf("Huge(%d): len %d or not zeroed", n, len(s))
	}
	for i := range s {
		s[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	if !thp() {
		// No transparent huge pages here: make's memory, as documented.
		if m != nil {
			t.Fatalf("THP is off, but Huge mapped memory")
		}
		return
	}
	if m == nil || p%hugePage != 0 {
		t.Fatalf("Huge(%d) with THP: mem %v, address %#x: want a mapping on a huge page", n, m, p)
	}
	entry := mapping(t, p)
	if entry == nil {
		t.Fatalf("no mapping holds %#x", p)
	}
	if !hugeFlag(entry) {
		t.Errorf("mapping %q: VmFlags lack hg (MADV_HUGEPAGE)", entry)
	}
	for i := range s {
		if s[i] != uint64(i)*0x9e3779b97f4a7c15 {
			t.Fatalf("word %d changed", i)
		}
	}
	// Once its Mem is unreachable, the mapping goes. The runtime's own
	// mmaps may take its addresses after that, so the mapping that holds
	// p must be gone or be another one: another range, or without
	// MADV_HUGEPAGE.
	runtime.KeepAlive(m)
	m, s = nil, nil
	ours := func() bool {
		e := mapping(t, p)
		return e != nil && e[0] == entry[0] && hugeFlag(e)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ours() {
		if time.Now().After(deadline) {
			t.Fatalf("the mapping at %#x is still there 5 s after its Mem became unreachable", p)
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// hugeFlag reports whether an smaps entry's VmFlags have hg (MADV_HUGEPAGE).
func hugeFlag(entry []string) bool {
	for _, l := range entry {
		if f, ok := strings.CutPrefix(l, "VmFlags:"); ok {
			return slices.Contains(strings.Fields(f), "hg")
		}
	}
	return false
}

func TestHugeCopy(t *testing.T) {
	small := []uint64{1, 2, 3}
	if d, m := HugeCopy(small); &d[0] != &small[0] || m != nil {
		t.Errorf("HugeCopy of 3 words copied them")
	}
	big := make([]uint64, hugePage/8)
	for i := range big {
		big[i] = uint64(i)
	}
	d, m := HugeCopy(big)
	if !slices.Equal(d, big) {
		t.Fatal("HugeCopy: not equal")
	}
	if thp() == (m == nil) || thp() == (&d[0] == &big[0]) {
		t.Errorf("THP %v: mem %v, copied %v", thp(), m, &d[0] != &big[0])
	}
	runtime.KeepAlive(m)
}

// TestHugeTypes: a struct of numbers goes to huge pages as words do, with
// its fields where Go puts them; a type that holds pointers gets make's
// memory, which the GC scans.
func TestHugeTypes(t *testing.T) {
	type slot struct {
		a, b uint64
		ids  [3]int32
		n, k uint8
	}
	n := hugePage / int(unsafe.Sizeof(slot{}))
	s, m := Huge[slot](n)
	if len(s) != n || (m != nil) != thp() {
		t.Fatalf("Huge[slot](%d): len %d, mem %v, THP %v", n, len(s), m, thp())
	}
	for i := range s {
		s[i] = slot{a: uint64(i), b: ^uint64(i), ids: [3]int32{int32(i), -1, 2}, n: uint8(i), k: 3}
	}
	for i := range s {
		if want := (slot{a: uint64(i), b: ^uint64(i), ids: [3]int32{int32(i), -1, 2}, n: uint8(i), k: 3}); s[i] != want {
			t.Fatalf("slot %d: %+v, want %+v", i, s[i], want)
		}
	}
	runtime.KeepAlive(m)

	type withPointer struct {
		A uint64
		P *int
	}
	for _, tc := range []struct {
		name string
		mem  *Mem
	}{
		// 2 MiB of each, enough for huge pages but for the pointers.
		{"struct with a pointer", func() *Mem { _, m := Huge[withPointer](hugePage / 16); return m }()},
		{"string", func() *Mem { _, m := Huge[string](hugePage / 16); return m }()},
		{"array of slices", func() *Mem { _, m := Huge[[2][]byte](hugePage/48 + 1); return m }()},
	} {
		if tc.mem != nil {
			t.Errorf("Huge of a %s mapped memory the GC does not scan", tc.name)
		}
	}
	for _, c := range []struct {
		typ  any
		want bool
	}{{uint64(0), true}, {[4]int32{}, true}, {slot{}, true}, {[0]*int{}, true}, {withPointer{}, false}, {"", false}, {[]int{}, false}, {map[int]int{}, false}, {(*int)(nil), false}, {func() {}, false}} {
		if got := pointerFree(reflect.TypeOf(c.typ)); got != c.want {
			t.Errorf("pointerFree(%T) = %v, want %v", c.typ, got, c.want)
		}
	}
}

// tinySink keeps TestHugeTinyNeighbour's small object alive.
var tinySink *uint64

// TestHugeTinyNeighbour: a Mem's mapping goes once the Mem is unreachable
// even while an object allocated right after it lives on. The runtime
// batches tiny pointer-free objects (under 16 bytes) in one allocation
// slot, and a cleanup of an object in such a slot waits for all of them
// (see runtime.AddCleanup): a Mem of one int was such an object.
func TestHugeTinyNeighbour(t *testing.T) {
	if !thp() {
		// No transparent huge pages here: make's memory, no Mem.
		if _, m := Huge[uint64](hugePage / 8); m != nil {
			t.Fatalf("THP is off, but Huge mapped memory")
		}
		return
	}
	for range 8 {
		s, m := Huge[uint64](hugePage / 8)
		tinySink = new(uint64) // tiny-allocated, maybe in m's slot
		*tinySink = 1
		p := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
		entry := mapping(t, p)
		if m == nil || entry == nil {
			t.Fatalf("Huge(%d): mem %v, mapping %q", hugePage/8, m, entry)
		}
		runtime.KeepAlive(m)
		m, s = nil, nil
		deadline := time.Now().Add(5 * time.Second)
		for {
			e := mapping(t, p)
			if e == nil || e[0] != entry[0] || !hugeFlag(e) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the mapping at %#x is still there 5 s after its Mem became unreachable (a live object beside it)", p)
			}
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
	}
}

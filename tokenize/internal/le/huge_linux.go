//go:build linux && !purego && (amd64 || arm64)

package le

import (
	"bytes"
	"os"
	"reflect"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugePage is the size of a transparent huge page with 4 KiB base pages
// (amd64, and arm64 as Linux distributions build it).
const hugePage = 2 << 20

// thp reports whether the kernel gives transparent huge pages to memory
// advised so (mode "always" or "madvise", not "never").
var thp = sync.OnceValue(func() bool {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	return err == nil && !bytes.Contains(b, []byte("[never]"))
})

// huge reports whether Huge asks for huge pages for size bytes.
func huge(size int) bool { return size >= hugePage && thp() }

// Mem owns memory that Huge mapped: the mapping is removed once its
// Mem is unreachable.
type Mem struct {
	size int // bytes mapped (and a Mem is not zero-sized: see runtime.AddCleanup)
	// base is the mapping's first byte. A Mem holds a pointer so that the
	// runtime never batches it with other small objects in one
	// allocation slot ("tiny" allocations, pointer-free and under 16
	// bytes): the cleanup of an object in such a slot waits until every
	// object in it is unreachable, so a Mem of one int could keep its
	// mapping (megabytes) for as long as some unrelated small object
	// lived (TestHugeTinyNeighbour).
	base *byte
}

// Huge returns a zeroed []T of length n, and the *Mem that owns its
// memory (nil for make's memory): the slice may be used only while its
// *Mem is reachable, so keep the two together. When the slice covers a
// huge page (2 MiB) and the kernel has transparent huge pages, it is a
// private anonymous mapping that starts on a huge page and is advised
// MADV_HUGEPAGE before anything touches it, so that the kernel backs it
// with huge pages:
//   - a table of megabytes read at random (the tokenizer's merges and
//     words, its pre-token cache) then needs a TLB entry per 2 MiB, not
//     per 4 KiB;
//   - its first touch is a fault per 2 MiB, where fresh memory of small
//     pages faults every 4 KiB (3-10 us each on this project's VMs: 8 MiB
//     took 6-20 ms to touch, against 1.5 ms in huge pages).
//
// The GC's heap cannot be asked for this: memory it reuses is already
// backed by small pages. T must hold no pointers (the GC does not scan the
// mapping): for a T that may, Huge returns make's memory.
func Huge[T any](n int) ([]T, *Mem) {
	size := n * int(unsafe.Sizeof(*new(T)))
	if !huge(size) || !pointerFree(reflect.TypeFor[T]()) {
		return make([]T, n), nil
	}
	size = (size + hugePage - 1) &^ (hugePage - 1)
	// One huge page more, so that a huge-page boundary is inside (virtual
	// memory only: the pages before it are never touched).
	b, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]T, n), nil
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%hugePage)) % hugePage
	_ = unix.Madvise(b[off:off+size], unix.MADV_HUGEPAGE) // a hint: without it, small pages
	m := &Mem{size: len(b), base: &b[0]}
	runtime.AddCleanup(m, func(b []byte) { _ = unix.Munmap(b) }, b)
	return unsafe.Slice((*T)(unsafe.Pointer(&b[off])), n), m
}

// pointerFree reports whether values of t hold no pointers.
func pointerFree(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return t.Len() == 0 || pointerFree(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if !pointerFree(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

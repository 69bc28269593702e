//go:build linux && !purego && (amd64 || arm64)

package le

import (
	"bytes"
	"os"
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

// huge reports whether HugeUint64s(n) asks for huge pages.
func huge(n int) bool { return n >= hugePage/8 && thp() }

// Mem owns memory that HugeUint64s mapped: the mapping is removed once its
// Mem is unreachable.
type Mem struct {
	size int // bytes mapped (and a Mem is not zero-sized: see runtime.AddCleanup)
}

// HugeUint64s returns a zeroed []uint64 of length n, and the *Mem that owns
// its memory (nil for make's memory): the slice may be used only while
// its *Mem is reachable, so keep the two together. When the slice covers a
// huge page (n*8 >= 2 MiB) and the kernel has transparent huge pages, it is
// a private anonymous mapping that starts on a huge page and is advised
// MADV_HUGEPAGE before anything touches it, so that the kernel backs it
// with huge pages: a table of megabytes read at random (the tokenizer's
// merges and words) then needs a TLB entry per 2 MiB, not per 4 KiB. The
// GC's heap cannot be asked for this: memory it reuses is already backed
// by small pages.
func HugeUint64s(n int) ([]uint64, *Mem) {
	if !huge(n) {
		return make([]uint64, n), nil
	}
	size := (n*8 + hugePage - 1) &^ (hugePage - 1)
	// One huge page more, so that a huge-page boundary is inside (virtual
	// memory only: the pages before it are never touched).
	b, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]uint64, n), nil
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%hugePage)) % hugePage
	_ = unix.Madvise(b[off:off+size], unix.MADV_HUGEPAGE) // a hint: without it, small pages
	m := &Mem{size: len(b)}
	runtime.AddCleanup(m, func(b []byte) { _ = unix.Munmap(b) }, b)
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[off])), n), m
}

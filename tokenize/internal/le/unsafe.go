//go:build !purego && (amd64 || arm64)

package le

import (
	"slices"
	"sync"
	"unsafe"
)

// Uint32s returns b (len(b) a multiple of 4) as []uint32: b's own memory
// when b is 4-byte aligned, else a copy.
func Uint32s(b []byte) []uint32 {
	if len(b) < 4 || uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		return CopyUint32s(b)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), len(b)/4)
}

// Uint64s returns b (len(b) a multiple of 8) as []uint64: b's own memory
// when b is 8-byte aligned, else a copy.
func Uint64s(b []byte) []uint64 {
	if len(b) < 8 || uintptr(unsafe.Pointer(&b[0]))%8 != 0 {
		return CopyUint64s(b)
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
}

// String returns b as a string sharing its memory.
func String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// shared reports whether Uint32s and Uint64s share memory when aligned.
const shared = true

// Substrings returns a new slice of len(ends)-1 strings, of capacity at
// least c, the i-th s[ends[i]:ends[i+1]]; the ends must ascend up to
// len(s), else it panics.
//
// When s lies in bytes ReadFile mapped, the string headers are written as
// plain words, without the GC's write barrier: the slice is new (its old
// values are empty) and the new ones point outside the Go heap, so the
// barrier would shade nothing. While a GC is marking, the barrier costs ten
// times the stores themselves (150,000 of them in a vocabulary).
func Substrings(s string, ends []uint32, c int) []string {
	n := max(len(ends)-1, 0)
	dst := make([]string, n, max(n, c))
	if !inMapped(s) {
		for i := range dst {
			dst[i] = s[ends[i]:ends[i+1]]
		}
		return dst
	}
	base := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	ends = ends[:n+1]
	for i := range dst {
		lo, hi := ends[i], ends[i+1]
		if lo > hi || int(hi) > len(s) {
			panic("le: Substrings: ends out of order")
		}
		if lo < hi {
			h := (*[2]uintptr)(unsafe.Pointer(&dst[i]))
			h[0], h[1] = base+uintptr(lo), uintptr(hi-lo)
		}
	}
	return dst
}

// mapped holds the address ranges of the live mappings of ReadFile.
var mapped struct {
	sync.Mutex
	spans [][2]uintptr
}

func register(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mapped.Lock()
	mapped.spans = append(mapped.spans, [2]uintptr{p, p + uintptr(len(b))})
	mapped.Unlock()
}

func unregister(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	mapped.Lock()
	mapped.spans = slices.DeleteFunc(mapped.spans, func(r [2]uintptr) bool { return r[0] == p })
	mapped.Unlock()
}

// inMapped reports whether s lies in a live mapping of ReadFile.
func inMapped(s string) bool {
	if len(s) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(s)))
	mapped.Lock()
	defer mapped.Unlock()
	for _, r := range mapped.spans {
		if r[0] <= p && p+uintptr(len(s)) <= r[1] {
			return true
		}
	}
	return false
}

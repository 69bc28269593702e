//go:build amd64 && !purego && !noasm

package classify

import (
	"unsafe"

	"golang.org/x/sys/cpu"
)

// avx2 computes the masks of the 64 bytes at p with AVX2 compares and
// VPMOVMSKB (classify_amd64.s).
//
//go:noescape
func avx2(p *byte, m *Masks)

// asciiBlocks is the ASCII prefix of the n >= 64 bytes at p as far as
// whole 64-byte blocks tell it (classify_amd64.s): n, or the start of the
// first block with a byte >= 0x80.
//
//go:noescape
func asciiBlocks(p *byte, n int) int

// ASCIILen returns the length of the ASCII prefix of s: 64 bytes at a time
// with AVX2 where SIMD, else (and in a block with a byte >= 0x80) goASCIILen.
func ASCIILen(s string) int {
	i := 0
	if SIMD && len(s) >= 64 {
		if i = asciiBlocks(unsafe.StringData(s), len(s)); i == len(s) {
			return i
		}
	}
	return i + goASCIILen(s[i:])
}

// SIMD reports whether FromString and FromArray use the SIMD classifier.
var SIMD = cpu.X86.HasAVX2

// FromString sets m to the masks of s[i:i+64] (len(s) >= i+64). The SIMD
// classifier writes m in place with one 64-bit store a mask, so that
// reading them back one by one is forwarded from the stores: a Masks
// returned by value was copied 16 bytes at a time, which store forwarding
// does not serve, and that copy's stall was the largest part of the block
// scanner's time in a profile of the bench's ids command.
func (m *Masks) FromString(s string, i int) {
	if SIMD {
		avx2(unsafe.StringData(s[i:i+64]), m)
		return
	}
	*m = goString(s, i)
}

// FromArray sets m to the masks of the 64 bytes at p, as FromString.
func (m *Masks) FromArray(p *[64]byte) {
	if SIMD {
		avx2(&p[0], m)
		return
	}
	*m = Go(p)
}

// SIMDArray is FromArray with the SIMD classifier, for tests (SIMD must be true).
func SIMDArray(p *[64]byte) (m Masks) {
	avx2(&p[0], &m)
	return m
}

// prefetch issues PREFETCHT0 for each 64-byte line of the n bytes at p
// (classify_amd64.s).
//
//go:noescape
func prefetch(p *byte, n int)

// Prefetch asks the CPU to start bringing the first PrefetchLen bytes of s
// into its caches, a line at a time, and returns at once.
func Prefetch(s string) {
	if len(s) > 0 {
		prefetch(unsafe.StringData(s), min(len(s), PrefetchLen))
	}
}

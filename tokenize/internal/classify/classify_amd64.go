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

// SIMD reports whether String and Array use the SIMD classifier.
var SIMD = cpu.X86.HasAVX2

// String computes the masks of s[i:i+64] (len(s) >= i+64).
func String(s string, i int) (m Masks) {
	if SIMD {
		avx2(unsafe.StringData(s[i:i+64]), &m)
		return m
	}
	return goString(s, i)
}

// Array computes the masks of the 64 bytes at p.
func Array(p *[64]byte) (m Masks) {
	if SIMD {
		avx2(&p[0], &m)
		return m
	}
	return Go(p)
}

// SIMDArray is Array with the SIMD classifier, for tests (SIMD must be true).
func SIMDArray(p *[64]byte) (m Masks) {
	avx2(&p[0], &m)
	return m
}

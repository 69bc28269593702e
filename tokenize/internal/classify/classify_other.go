//go:build !amd64 || purego || noasm

package classify

// SIMD reports whether String and Array use the SIMD classifier.
const SIMD = false

// String computes the masks of s[i:i+64] (len(s) >= i+64).
func String(s string, i int) Masks { return goString(s, i) }

// Array computes the masks of the 64 bytes at p.
func Array(p *[64]byte) Masks { return Go(p) }

// SIMDArray is Array with the SIMD classifier, for tests (SIMD must be true).
func SIMDArray(p *[64]byte) Masks { panic("classify: no SIMD classifier in this build") }

// ASCIILen returns the length of the ASCII prefix of s.
func ASCIILen(s string) int { return goASCIILen(s) }

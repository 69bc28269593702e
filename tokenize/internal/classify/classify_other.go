//go:build !amd64 || purego || noasm

package classify

// SIMD reports whether FromString and FromArray use the SIMD classifier.
const SIMD = false

// FromString sets m to the masks of s[i:i+64] (len(s) >= i+64).
func (m *Masks) FromString(s string, i int) { *m = goString(s, i) }

// FromArray sets m to the masks of the 64 bytes at p.
func (m *Masks) FromArray(p *[64]byte) { *m = Go(p) }

// SIMDArray is FromArray with the SIMD classifier, for tests (SIMD must be true).
func SIMDArray(p *[64]byte) Masks { panic("classify: no SIMD classifier in this build") }

// ASCIILen returns the length of the ASCII prefix of s.
func ASCIILen(s string) int { return goASCIILen(s) }

// Prefetch does nothing here: there is no prefetch instruction in Go.
func Prefetch(string) {}

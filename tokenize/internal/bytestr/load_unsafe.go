//go:build !purego && !noasm

package bytestr

import "unsafe"

// Load64 returns the 8 bytes of s at i as a little-endian uint64, without
// bounds checks: the caller makes sure that 0 <= i and i+8 <= len(s).
func Load64(s string, i int) uint64 {
	p := (*[8]byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(s)), i))
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}

// Triple returns s[i:i+3] as an array, without bounds checks: the caller
// makes sure that i+3 <= len(s).
func Triple(s []uint64, i uint64) *[3]uint64 {
	return (*[3]uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), i*8))
}

// Pair returns s[i:i+2] as an array, without bounds checks: the caller
// makes sure that i+2 <= len(s).
func Pair(s []uint64, i uint64) *[2]uint64 {
	return (*[2]uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(s)), i*8))
}

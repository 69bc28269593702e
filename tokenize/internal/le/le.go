// Package le reads arrays of little-endian integers out of a byte slice,
// for the tokenizer's compiled cache: on little-endian machines, when b is
// aligned, the returned slice shares b's memory (no copy, no decode);
// otherwise, and always with the purego tag, it is a decoded copy.
//
// A shared slice aliases b: the caller must not write to b afterwards.
// Both forms are always compiled (CopyUint32s, CopyUint64s) and tested
// against each other.
package le

import "encoding/binary"

// CopyUint32s decodes b (len(b) a multiple of 4) into a new []uint32.
func CopyUint32s(b []byte) []uint32 {
	out := make([]uint32, len(b)/4)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// CopyUint64s decodes b (len(b) a multiple of 8) into a new []uint64.
func CopyUint64s(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}

// Package le reads the tokenizer's compiled cache in place: it maps the
// file read-only (ReadFile), and views arrays of little-endian integers and
// strings in it. On little-endian machines, when b is aligned, the returned
// slice shares b's memory (no copy, no decode); otherwise, and always with
// the purego tag, it is a decoded copy.
//
// A shared slice aliases b: the caller must not write to b afterwards.
// Both forms are always compiled (CopyUint32s, CopyUint64s) and tested
// against each other. Substrings cuts an arena into strings, without the
// GC's write barrier where the arena is mapped.
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

// HugeCopy returns s, or a copy of it in Huge's memory, owned by m,
// when that is huge pages (a table of at least 2 MiB on Linux with
// transparent huge pages): for the tables of a mapped file, whose
// page-cache pages are 4 KiB.
func HugeCopy(s []uint64) (d []uint64, m *Mem) {
	if !huge(8 * len(s)) {
		return s, nil
	}
	d, m = Huge[uint64](len(s))
	copy(d, s)
	return d, m
}

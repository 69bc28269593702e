//go:build !purego && (amd64 || arm64)

package le

import "unsafe"

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

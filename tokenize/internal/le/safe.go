//go:build purego || !(amd64 || arm64)

package le

// Uint32s returns a decoded copy of b (len(b) a multiple of 4).
func Uint32s(b []byte) []uint32 { return CopyUint32s(b) }

// Uint64s returns a decoded copy of b (len(b) a multiple of 8).
func Uint64s(b []byte) []uint64 { return CopyUint64s(b) }

// String returns a copy of b as a string.
func String(b []byte) string { return string(b) }

const shared = false

//go:build !purego

package bytestr

import "unsafe"

// Copies reports whether String copies (and so allocates).
const Copies = false

// String returns b as a string sharing its memory (see the package doc).
func String(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Data returns a pointer to s's first byte, for assembly that reads s
// (tokenize's takewords_amd64.s); s must not be empty.
func Data(s string) *byte { return unsafe.StringData(s) }

// SamePage reports whether the n bytes past s's end are in the memory page
// (of pageSize bytes, a power of two) of its last byte: reading them cannot
// fault. False for an empty s.
func SamePage(s string, n, pageSize int) bool {
	if s == "" {
		return false
	}
	last := uintptr(unsafe.Pointer(unsafe.StringData(s))) + uintptr(len(s)-1)
	return int(last&uintptr(pageSize-1)) < pageSize-n
}

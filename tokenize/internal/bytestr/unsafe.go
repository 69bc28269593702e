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

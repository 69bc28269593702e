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

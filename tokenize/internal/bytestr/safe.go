//go:build purego

package bytestr

// String returns a copy of b as a string.
func String(b []byte) string { return string(b) }

// Copies reports whether String copies (and so allocates).
const Copies = true

// SamePage is false: this build does not look at addresses.
func SamePage(s string, n, pageSize int) bool { return false }

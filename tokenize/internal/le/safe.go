//go:build purego || !(amd64 || arm64)

package le

// Uint32s returns a decoded copy of b (len(b) a multiple of 4).
func Uint32s(b []byte) []uint32 { return CopyUint32s(b) }

// Uint64s returns a decoded copy of b (len(b) a multiple of 8).
func Uint64s(b []byte) []uint64 { return CopyUint64s(b) }

// String returns a copy of b as a string.
func String(b []byte) string { return string(b) }

const shared = false

// Substrings returns a new slice of len(ends)-1 strings, of capacity at
// least c, the i-th s[ends[i]:ends[i+1]]; the ends must ascend up to
// len(s), else it panics.
func Substrings(s string, ends []uint32, c int) []string {
	n := max(len(ends)-1, 0)
	dst := make([]string, n, max(n, c))
	for i := range dst {
		dst[i] = s[ends[i]:ends[i+1]]
	}
	return dst
}

func register(b []byte)      {}
func unregister(b []byte)    {}
func inMapped(s string) bool { return false }

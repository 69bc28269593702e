//go:build !linux || purego || !(amd64 || arm64)

package le

// Mem owns the memory of a HugeUint64s slice (see huge_linux.go); here it
// is always make's.
type Mem struct{ size int }

// HugeUint64s returns a zeroed []uint64 of length n and a nil *Mem: huge
// pages are asked for on Linux only (huge_linux.go).
func HugeUint64s(n int) ([]uint64, *Mem) { return make([]uint64, n), nil }

func huge(int) bool { return false }

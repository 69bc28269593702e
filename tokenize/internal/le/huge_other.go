//go:build !linux || purego || !(amd64 || arm64)

package le

// Mem owns the memory of a Huge slice (see huge_linux.go); here it is
// always make's.
type Mem struct{ size int }

// Huge returns a zeroed []T of length n and a nil *Mem: huge pages are
// asked for on Linux only (huge_linux.go).
func Huge[T any](n int) ([]T, *Mem) { return make([]T, n), nil }

func huge(int) bool { return false }

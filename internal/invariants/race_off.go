//go:build !race

package invariants

// Race reports whether the binary was built with -race.
const Race = false

//go:build invariants || race

package invariants

// Enabled reports whether the self-checks are compiled in (-race or
// -tags invariants).
const Enabled = true

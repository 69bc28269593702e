// Package invariants holds ferry's self-checks that cost time, compiled in
// only where they are wanted, as pebble's internal/invariants does: under
// the race detector (make test runs the concurrent packages with -race) or
// with -tags invariants. In a release build Enabled is a false constant and
// every check below compiles to nothing.
//
//	Race     the binary runs under the race detector (tests shrink their
//	         corpora with it: the detector is ~10x slower)
//	Enabled  the self-checks are on (Race or the invariants tag)
//	CloseOnce  a Close that runs its body once, also when called
//	         concurrently, and (Enabled) panics on a use after it
//	SetFinalizer  a leak check, installed only when Enabled
//
// All of it is safe for concurrent use.
package invariants

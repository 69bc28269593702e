package invariants

import (
	"runtime"
	"sync/atomic"
)

// CloseOnce guards the Close of a resource: Close returns true to exactly
// one caller, however many call it and from how many goroutines, so the
// resource is released once. The zero value is open.
type CloseOnce struct{ closed atomic.Bool }

// Close marks c closed and reports whether this call did it (the first).
func (c *CloseOnce) Close() bool { return c.closed.CompareAndSwap(false, true) }

// Closed reports whether Close has been called.
func (c *CloseOnce) Closed() bool { return c.closed.Load() }

// Use panics when the self-checks are Enabled and c is closed: a use after
// Close, which the caller's contract forbids (what was returned may alias
// memory that is gone). It costs nothing in a release build.
func (c *CloseOnce) Use(what string) {
	if Enabled && c.closed.Load() {
		panic("invariants: " + what + " used after Close")
	}
}

// SetFinalizer sets finalizer on obj (runtime.SetFinalizer) when the
// self-checks are Enabled, and does nothing otherwise: a leak check that
// release builds do not pay for.
func SetFinalizer(obj, finalizer any) {
	if Enabled {
		runtime.SetFinalizer(obj, finalizer)
	}
}

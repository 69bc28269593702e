package invariants

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestCloseOnce: of many concurrent Closes exactly one is the first, and a
// use after it panics exactly when the self-checks are on.
func TestCloseOnce(t *testing.T) {
	var c CloseOnce
	c.Use("x") // open: never panics
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c.Close() {
				firsts.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 || !c.Closed() {
		t.Fatalf("%d first Closes, closed %v; want 1, true", n, c.Closed())
	}
	panicked := func() (p bool) {
		defer func() { p = recover() != nil }()
		c.Use("x")
		return false
	}()
	if panicked != Enabled {
		t.Errorf("use after Close panicked: %v, want %v (Enabled)", panicked, Enabled)
	}
	if Race && !Enabled {
		t.Error("Race without Enabled")
	}
}

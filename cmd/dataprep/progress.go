package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferryml/ferry/internal/cli"
)

// progress is dataprep's status line: the current phase, its count and the
// elapsed time, printed by a cli.Progress (a line rewritten in place on a
// terminal, plain lines every --progress-every otherwise, nothing with
// --quiet). It is safe for concurrent use; stop ends it.
type progress struct {
	p      *cli.Progress
	start  time.Time
	prefix string // "dataprep", or "dataprep[part I/N]"

	mu    sync.Mutex
	name  string
	total int64
	done  atomic.Int64
}

func newProgress(w io.Writer, quiet bool, every time.Duration, prefix string) *progress {
	pr := &progress{start: time.Now(), prefix: prefix}
	pr.p = cli.NewProgress(w, quiet, every, pr.line)
	return pr
}

// Phase starts a phase (prep.Progress).
func (p *progress) Phase(name string, total int64) {
	p.mu.Lock()
	p.name, p.total = name, total
	p.done.Store(0)
	p.mu.Unlock()
}

// Add counts n more units of the phase (prep.Progress).
func (p *progress) Add(n int64) { p.done.Add(n) }

// line is the status line; "" before the first phase.
func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.name == "" {
		return ""
	}
	done := p.done.Load()
	el := time.Since(p.start).Seconds()
	if p.total > 0 {
		return fmt.Sprintf("%s: %-8s %d/%d (%.0f%%) %.1fs", p.prefix, p.name, done, p.total, 100*float64(done)/float64(p.total), el)
	}
	return fmt.Sprintf("%s: %-8s %.1fs", p.prefix, p.name, el)
}

// Logf prints a message line (not suppressed by a terminal line;
// prep.Progress).
func (p *progress) Logf(format string, a ...any) { p.p.Logf(p.prefix+": "+format, a...) }

func (p *progress) stop() { p.p.Stop() }

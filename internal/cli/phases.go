package cli

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// Phases is a status line of named phases: the current phase, its count
// and the elapsed time, printed by a Progress (a line rewritten in place
// on a terminal, plain lines every `every` otherwise, nothing when quiet):
//
//	PREFIX: NAME     DONE/TOTAL (P%) T.Ts      a phase with a known total
//	PREFIX: NAME     T.Ts                      one without
//
// Its Phase, Add and Logf are what a pipeline reports to (prep.Progress).
// It is safe for concurrent use; Stop ends it.
type Phases struct {
	p      *Progress
	start  time.Time
	prefix string

	mu    sync.Mutex
	name  string
	total int64
	done  atomic.Int64
}

// NewPhases starts a Phases on w; prefix begins every line ("dataprep",
// "dataprep[part 1/3]").
func NewPhases(w io.Writer, quiet bool, every time.Duration, prefix string) *Phases {
	ph := &Phases{start: time.Now(), prefix: prefix}
	ph.p = NewProgress(w, quiet, every, ph.line)
	return ph
}

// Phase starts phase name of total units (0: unknown).
func (p *Phases) Phase(name string, total int64) {
	p.mu.Lock()
	p.name, p.total = name, total
	p.done.Store(0)
	p.mu.Unlock()
}

// Add counts n more units of the phase done.
func (p *Phases) Add(n int64) { p.done.Add(n) }

// line is the status line; "" before the first phase.
func (p *Phases) line() string {
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

// Logf prints a message line, prefixed (not suppressed by a terminal line).
func (p *Phases) Logf(format string, a ...any) { p.p.Logf(p.prefix+": "+format, a...) }

// Stop ends the status line; a later Stop does nothing.
func (p *Phases) Stop() { p.p.Stop() }

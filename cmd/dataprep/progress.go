package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// progress reports the current phase on stderr: a line rewritten in place
// on a terminal, plain periodic lines otherwise, nothing with --quiet. It is
// safe for concurrent use; stop ends its goroutine.
type progress struct {
	w     io.Writer
	quiet bool
	tty   bool
	start time.Time

	mu         sync.Mutex
	name       string
	total      int64
	phaseStart time.Time
	dirty      bool // a terminal line is showing

	done atomic.Int64
	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

func newProgress(w io.Writer, quiet bool, every time.Duration) *progress {
	p := &progress{w: w, quiet: quiet, start: time.Now(), quit: make(chan struct{})}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
		every = 200 * time.Millisecond
	}
	if quiet || every <= 0 {
		return p
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.print()
			}
		}
	}()
	return p
}

func (p *progress) phase(name string, total int64) {
	p.mu.Lock()
	p.name, p.total, p.phaseStart = name, total, time.Now()
	p.done.Store(0)
	p.mu.Unlock()
}

func (p *progress) add(n int64) { p.done.Add(n) }

func (p *progress) line() string {
	done := p.done.Load()
	el := time.Since(p.start).Seconds()
	if p.total > 0 {
		return fmt.Sprintf("dataprep: %-8s %d/%d (%.0f%%) %.1fs", p.name, done, p.total, 100*float64(done)/float64(p.total), el)
	}
	return fmt.Sprintf("dataprep: %-8s %.1fs", p.name, el)
}

func (p *progress) print() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.name == "" {
		return
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", p.line())
		p.dirty = true
		return
	}
	fmt.Fprintln(p.w, p.line())
}

// logf prints a message line (not suppressed by a terminal line).
func (p *progress) logf(format string, a ...any) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
		p.dirty = false
	}
	fmt.Fprintf(p.w, "dataprep: "+format+"\n", a...)
}

func (p *progress) stop() {
	p.once.Do(func() {
		close(p.quit)
		p.wg.Wait()
		p.mu.Lock()
		if p.dirty {
			fmt.Fprint(p.w, "\r\033[K")
			p.dirty = false
		}
		p.mu.Unlock()
	})
}

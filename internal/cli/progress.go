package cli

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// ttyEvery is how often a terminal line is rewritten.
const ttyEvery = 200 * time.Millisecond

// Progress prints a command's status line on w (stderr) while it runs:
// rewritten in place every 200 ms when w is a terminal; off a terminal one
// plain line every `every`, or nothing when every <= 0; nothing at all
// when quiet. The line comes from the caller's line func, called on
// Progress's goroutine; "" prints nothing that tick. Progress is safe for
// concurrent use; Stop ends its goroutine and clears a terminal line.
type Progress struct {
	w      io.Writer
	quiet  bool
	tty    bool
	active bool
	line   func() string

	mu    sync.Mutex
	dirty bool // a terminal line is showing

	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// NewProgress starts a Progress (see the type).
func NewProgress(w io.Writer, quiet bool, every time.Duration, line func() string) *Progress {
	p := &Progress{w: w, quiet: quiet, tty: IsTerminal(w), line: line, quit: make(chan struct{})}
	if p.tty {
		every = ttyEvery
	}
	if quiet || every <= 0 {
		return p
	}
	p.active = true
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

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Active reports whether the Progress prints status lines at all.
func (p *Progress) Active() bool { return p.active }

func (p *Progress) print() {
	s := p.line()
	if s == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", s)
		p.dirty = true
		return
	}
	fmt.Fprintln(p.w, s)
}

// Logf prints a message line (format gets a newline), clearing a terminal
// status line first; nothing when quiet.
func (p *Progress) Logf(format string, a ...any) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clearLocked()
	fmt.Fprintf(p.w, format+"\n", a...)
}

func (p *Progress) clearLocked() {
	if p.dirty {
		fmt.Fprint(p.w, "\r\033[K")
		p.dirty = false
	}
}

// Stop ends the status lines and clears a terminal line. It is idempotent.
func (p *Progress) Stop() {
	p.once.Do(func() {
		close(p.quit)
		p.wg.Wait()
		p.mu.Lock()
		p.clearLocked()
		p.mu.Unlock()
	})
}

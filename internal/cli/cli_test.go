package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func TestReportCode(t *testing.T) {
	r := Report{
		Usage:     func(w io.Writer, err error) { fmt.Fprintf(w, "x: %v\n", err) },
		Interrupt: "x: interrupted",
		Error:     func(w io.Writer, err error) { fmt.Fprintf(w, "x: %v\n", err) },
	}
	sigCtx, cancel := context.WithCancelCause(context.Background())
	cancel(interruptedError{os.Interrupt})
	bg := context.Background()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		code int
		out  string
	}{
		{"ok", bg, nil, ExitOK, ""},
		{"help", bg, fmt.Errorf("parse: %w", flag.ErrHelp), ExitOK, ""},
		{"usage", bg, fmt.Errorf("%w: --n 0", ErrUsage), ExitUsage, "x: bad usage: --n 0\n"},
		{"own usage text", bg, fmt.Errorf("%w: want 2 args", Usage(errors.New("usage"))), ExitUsage, "x: usage: want 2 args\n"},
		{"error", bg, errors.New("disk full"), ExitError, "x: disk full\n"},
		{"interrupted", sigCtx, context.Canceled, ExitInterrupted, "x: interrupted\n"},
		{"interrupted after success", sigCtx, nil, ExitOK, ""},
		{"interrupted cause", bg, fmt.Errorf("write: %w", interruptedError{os.Interrupt}), ExitInterrupted, "x: interrupted\n"},
	} {
		var buf bytes.Buffer
		if got := r.Code(c.ctx, c.err, &buf); got != c.code || buf.String() != c.out {
			t.Errorf("%s: code %d, printed %q; want %d, %q", c.name, got, buf.String(), c.code, c.out)
		}
	}
}

func TestSignalContext(t *testing.T) {
	ctx, stop := SignalContext(context.Background())
	defer stop()
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Skip(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	if !Interrupted(ctx) || Signal(ctx) != syscall.SIGTERM {
		t.Fatalf("cause %v, signal %v", context.Cause(ctx), Signal(ctx))
	}
	if !strings.Contains(context.Cause(ctx).Error(), "interrupted by terminated") {
		t.Fatalf("cause %q", context.Cause(ctx))
	}
	ctx2, stop2 := SignalContext(context.Background())
	stop2()
	if Interrupted(ctx2) || Signal(ctx2) != nil {
		t.Fatal("stop counted as an interruption")
	}
}

func TestProgressOffTerminal(t *testing.T) {
	var buf syncBuffer
	var n atomic.Int64
	p := NewProgress(&buf, false, time.Millisecond, func() string {
		if n.Add(1) == 1 {
			return "" // nothing this tick
		}
		return "step"
	})
	if !p.Active() {
		t.Fatal("not active off a terminal with every > 0")
	}
	for !strings.Contains(buf.String(), "step\n") {
		time.Sleep(time.Millisecond)
	}
	p.Logf("note %d", 7)
	p.Stop()
	p.Stop()
	if !strings.Contains(buf.String(), "note 7\n") || strings.Contains(buf.String(), "\r") {
		t.Fatalf("output %q", buf.String())
	}
	var quiet syncBuffer
	q := NewProgress(&quiet, true, time.Millisecond, func() string { return "x" })
	q.Logf("hidden")
	time.Sleep(5 * time.Millisecond)
	q.Stop()
	if q.Active() || quiet.String() != "" {
		t.Fatalf("quiet progress printed %q", quiet.String())
	}
	if NewProgress(&quiet, false, 0, func() string { return "x" }).Active() {
		t.Fatal("active off a terminal with every = 0")
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// ErrInterrupted is the cancellation cause of a SignalContext that received
// SIGINT or SIGTERM.
var ErrInterrupted = errors.New("interrupted")

// SignalContext returns a context that is cancelled on the first SIGINT or
// SIGTERM, with a cause wrapping ErrInterrupted, so that a command's
// writers abort cleanly (nothing is left at their targets) and the command
// can exit with status 130. stop releases the signal handler; after it, or
// after the first signal, a second signal kills the process as usual.
//
//	ctx, stop := storage.SignalContext(context.Background())
//	defer stop()
//	err := run(ctx, cfg)
//	if storage.Interrupted(ctx) { os.Exit(130) }
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var once sync.Once
	release := func() { once.Do(func() { signal.Stop(ch) }) }
	go func() {
		select {
		case sig := <-ch:
			release() // restore default handling: a second ^C kills at once
			cancel(fmt.Errorf("%w by %v", ErrInterrupted, sig))
		case <-ctx.Done():
			release()
		}
	}()
	return ctx, func() { release(); cancel(context.Canceled) }
}

// Interrupted reports whether ctx (or a parent) was cancelled by a signal
// caught by SignalContext.
func Interrupted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), ErrInterrupted)
}

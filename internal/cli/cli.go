package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/ferryml/ferry/internal/procstat"
)

// Exit statuses.
const (
	ExitOK          = 0
	ExitError       = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// ErrUsage marks a command-line mistake: Main exits with ExitUsage.
// Wrap it with the detail: fmt.Errorf("%w: --seq-len %d ...", cli.ErrUsage, n).
var ErrUsage = errors.New("bad usage")

// Usage marks err as a usage error: the result matches ErrUsage and err
// (errors.Is) and reads as err, for messages that do not begin with
// ErrUsage's text (ckptmerge's sentinel reads "usage"; ferry-serve prints
// the flag package's message as it is).
func Usage(err error) error { return usageError{err} }

type usageError struct{ err error }

func (e usageError) Error() string   { return e.err.Error() }
func (e usageError) Unwrap() []error { return []error{e.err, ErrUsage} }

// ErrInterrupted is the cancellation cause of a SignalContext that
// received SIGINT or SIGTERM.
var ErrInterrupted = errors.New("interrupted")

// SignalContext returns a context that is cancelled on the first SIGINT or
// SIGTERM, with a cause wrapping ErrInterrupted, so that a command's
// writers abort cleanly (nothing is left at their targets) and the command
// can exit with status 130. stop releases the signal handler; after it, or
// after the first signal, a second signal kills the process as usual.
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
			cancel(interruptedError{sig})
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

// Signal returns the signal that cancelled a SignalContext (ctx or a
// parent), or nil.
func Signal(ctx context.Context) os.Signal {
	var ie interruptedError
	if errors.As(context.Cause(ctx), &ie) {
		return ie.sig
	}
	return nil
}

// interruptedError is the cause of a SignalContext's cancellation.
type interruptedError struct{ sig os.Signal }

func (e interruptedError) Error() string { return fmt.Sprintf("%v by %v", ErrInterrupted, e.sig) }
func (e interruptedError) Unwrap() error { return ErrInterrupted }

// Report maps the error of a command's run to its exit status and prints
// what the user needs on stderr. Each command states its own messages; the
// statuses are the same for all, decided in this order:
//
//	flag.ErrHelp                 ExitOK, nothing printed (the flag set printed the help)
//	wraps ErrUsage               ExitUsage, Usage(err) printed when set
//	stopped by a signal          ExitInterrupted, Interrupt printed when set
//	nil                          ExitOK
//	any other error              ExitError, Error(err) printed
type Report struct {
	// Usage prints a usage error; nil prints nothing (the command did).
	Usage func(w io.Writer, err error)
	// Interrupted reports whether the run was stopped by a signal; nil
	// means: it failed (err != nil) after ctx was cancelled by
	// SignalContext, or with an error wrapping ErrInterrupted.
	Interrupted func(ctx context.Context, err error) bool
	// Interrupt is the line printed on an interruption, if any.
	Interrupt string
	// Error prints any other error.
	Error func(w io.Writer, err error)
}

// Code returns the exit status for err and prints its message on stderr.
func (r Report) Code(ctx context.Context, err error, stderr io.Writer) int {
	interrupted := r.Interrupted
	if interrupted == nil {
		interrupted = func(ctx context.Context, err error) bool {
			return err != nil && (Interrupted(ctx) || errors.Is(err, ErrInterrupted))
		}
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ErrUsage):
		if r.Usage != nil {
			r.Usage(stderr, err)
		}
		return ExitUsage
	case interrupted(ctx, err):
		if r.Interrupt != "" {
			fmt.Fprintln(stderr, r.Interrupt)
		}
		return ExitInterrupted
	case err == nil:
		return ExitOK
	}
	r.Error(stderr, err)
	return ExitError
}

// RunFunc is a command's body: it parses args and does the work.
type RunFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error

// CodeFunc maps a RunFunc's error to an exit status, printing the message
// (Report.Code).
type CodeFunc func(ctx context.Context, err error, stderr io.Writer) int

// Run runs run under a SignalContext, releases the signal handler, and
// returns code's exit status for its error.
func Run(args []string, stdin io.Reader, stdout, stderr io.Writer, run RunFunc, code CodeFunc) int {
	ctx, stop := SignalContext(context.Background())
	err := run(ctx, args, stdin, stdout, stderr)
	stop()
	return code(ctx, err, stderr)
}

// Main is the one main of the ferry commands: Run with the process's
// arguments and standard streams, then exit with its status.
//
//	func main() { cli.Main(dispatch, report.Code) }
func Main(run RunFunc, code CodeFunc) {
	os.Exit(Run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr, run, code))
}

// PeakRSS is this process's peak resident set size in bytes, or 0 where
// it is not available (procstat.PeakRSS).
func PeakRSS() int64 { return procstat.PeakRSS() }

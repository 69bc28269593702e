package storage

import "github.com/ferryml/ferry/internal/cli"

// Signal handling is command plumbing and lives in internal/cli; these
// names remain for callers not yet moved (bench/storagebench).

// ErrInterrupted is cli.ErrInterrupted.
//
// Deprecated: use cli.ErrInterrupted.
var ErrInterrupted = cli.ErrInterrupted

// SignalContext is cli.SignalContext.
//
// Deprecated: use cli.SignalContext.
var SignalContext = cli.SignalContext

// Interrupted is cli.Interrupted.
//
// Deprecated: use cli.Interrupted.
var Interrupted = cli.Interrupted

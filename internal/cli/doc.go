// Package cli is the plumbing the ferry commands share, so that dataprep,
// ckptmerge and ferry-serve behave alike at their edges: one main shape
// (Main), the exit statuses of the Unix habit (ExitOK 0, ExitError 1,
// ExitUsage 2, ExitInterrupted 130), the usage-error sentinel ErrUsage, a
// context cancelled by SIGINT or SIGTERM (SignalContext), a progress line
// on stderr (Progress: rewritten in place on a terminal, plain periodic
// lines or nothing elsewhere) and the peak-memory report (PeakRSS, from
// internal/procstat).
//
// Concurrency: Progress is safe for concurrent use; the other functions
// are called from main.
package cli

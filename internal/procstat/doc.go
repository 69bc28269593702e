// Package procstat measures the running process for the benchmark tools
// under bench/ and the commands' peak-memory report: CPUSeconds is the process's
// user+system CPU time (getrusage(RUSAGE_SELF), every thread), PeakRSS its
// peak resident set size (VmHWM; the commands' peak-memory report), and
// Median is the statistic they report over repeated runs.
//
// Contract: CPUSeconds and PeakRSS never fail; they return 0 where
// getrusage or /proc/self/status do not answer (for CPUSeconds a
// difference of two readings is then 0, never negative). Median returns
// the lower middle value of an even-sized sample, so it is always one of
// the measured values, and leaves its argument unchanged.
package procstat

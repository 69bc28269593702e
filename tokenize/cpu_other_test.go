//go:build !unix

package tokenize

import "time"

var benchStart = time.Now()

// cpuSeconds is wall-clock seconds since the test binary started: the
// benchmarks' MB/cpu-s are MB/s here (no getrusage).
func cpuSeconds() float64 { return time.Since(benchStart).Seconds() }

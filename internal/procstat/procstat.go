package procstat

import (
	"slices"
	"syscall"
)

// CPUSeconds is the user+system CPU time of this process, all threads, in
// seconds; 0 when getrusage fails.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// Median is the middle value of xs, the lower of the two middle values
// when len(xs) is even; xs is not modified. It panics on an empty xs.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

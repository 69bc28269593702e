//go:build unix

package procstat

import "syscall"

// CPUSeconds is the user+system CPU time of this process, all threads, in
// seconds; 0 when getrusage fails.
func CPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

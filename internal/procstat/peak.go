package procstat

import (
	"os"
	"strconv"
	"strings"
)

// PeakRSS returns this process's peak resident set size in bytes (VmHWM
// of /proc/self/status), or 0 where it is not available (no /proc: not
// Linux). Unlike getrusage's ru_maxrss it does not include the parent's
// memory image from before exec.
func PeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseVmHWM(string(b))
}

// parseVmHWM returns the VmHWM line of a /proc/PID/status text in bytes,
// or 0 when it has none in kB.
func parseVmHWM(status string) int64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

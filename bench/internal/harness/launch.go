package harness

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Why a launcher: Go starts a child with clone(CLONE_VM|CLONE_VFORK), so
// until the child execs it shares the parent's address space, and Linux
// carries that address space's high-water RSS over into the child's
// ru_maxrss at exec. Every child of the harness would then report at least
// the harness's own peak RSS (tens of MB; more after a check has read big
// outputs), hiding how little memory a small tool uses. The harness
// therefore starts each measured command through a copy of itself in
// launcher mode: a fresh, small process that starts the command, waits for
// it, and reports the command's own rusage and wall time on fd 3. The
// command's floor is then the launcher's ~2 MB.

const launcherEnv = "FERRY_BENCH_LAUNCHER"

var launcherExe string // set by LaunchMain; "" = start commands directly

// LaunchMain must be called first thing in main (and in TestMain of tests
// that run commands). In a process started as a launcher it runs the
// command, reports, and exits with the command's status; it never returns
// then. Otherwise it makes Run start commands through the launcher.
func LaunchMain() {
	if os.Getenv(launcherEnv) != "1" {
		if exe, err := os.Executable(); err == nil {
			launcherExe = exe
		}
		return
	}
	os.Unsetenv(launcherEnv)
	report := os.NewFile(3, "launcher-report")
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "bench launcher: no command")
		os.Exit(127)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			fmt.Fprintf(os.Stderr, "bench launcher: %v\n", err)
			os.Exit(127)
		}
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	var maxrss int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		maxrss = int64(ru.Maxrss)
	}
	fmt.Fprintf(report, "%d %d %d\n", maxrss, wall.Nanoseconds(), code)
	report.Close()
	os.Exit(code)
}

// launched is what the launcher reported.
type launched struct {
	maxRSSKiB int64
	wall      time.Duration
	code      int
}

func parseLaunchReport(s string) (launched, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return launched{}, fmt.Errorf("launcher report %q: want 3 fields", s)
	}
	var v [3]int64
	for i := range f {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil || n < 0 {
			return launched{}, fmt.Errorf("launcher report %q: field %d", s, i+1)
		}
		v[i] = n
	}
	return launched{maxRSSKiB: v[0], wall: time.Duration(v[1]), code: int(v[2])}, nil
}

// readLaunchReport reads the launcher's one-line report from r.
func readLaunchReport(r *os.File) (launched, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return launched{}, fmt.Errorf("launcher report: %w", err)
	}
	return parseLaunchReport(line)
}

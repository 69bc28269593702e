package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Command is one side's subprocess.
type Command struct {
	Argv []string // program and arguments; Argv[0] is looked up in PATH
	Env  []string // extra KEY=VALUE entries, added to the harness's environment
	Dir  string   // working directory; "" = the harness's
	// Stdin is a file fed to standard input; "" = /dev/null.
	Stdin string
	// Stdout is the file standard output is written to (truncated first).
	// The process writes it directly, so the harness spends no CPU on it.
	// The bench line is read back from its tail. Required.
	Stdout string
	// Before runs, untimed, before every run (e.g. removing an output
	// directory the previous run left).
	Before func() error
}

// String renders the command as a shell-like line for reports.
func (c Command) String() string {
	var b strings.Builder
	for _, e := range c.Env {
		b.WriteString(shellQuote(e))
		b.WriteByte(' ')
	}
	for i, a := range c.Argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(shellQuote(a))
	}
	if c.Stdin != "" {
		b.WriteString(" < " + shellQuote(c.Stdin))
	}
	return b.String()
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == '=' || r == ':' || r == ',' || r == '+' ||
			r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Sample is what one run measured.
type Sample struct {
	WallS        float64            `json:"wall_s"`
	PeakRSSBytes int64              `json:"peak_rss_bytes"`
	Metrics      map[string]float64 `json:"metrics,omitempty"`
}

// Metric returns the named metric of the sample: "wall_s" and
// "peak_rss_mb" are the harness's own; anything else comes from the bench line.
func (s Sample) Metric(name string) (float64, bool) {
	switch name {
	case "wall_s":
		return s.WallS, true
	case "peak_rss_mb":
		return float64(s.PeakRSSBytes) / (1 << 20), true
	}
	v, ok := s.Metrics[name]
	return v, ok
}

// ErrRun marks a subprocess that could not start or exited unsuccessfully.
var ErrRun = errors.New("harness: run failed")

// tailBytes is how much of stdout and stderr is read back after a run.
const tailBytes = 64 << 10

// Run runs c once and measures it. A non-zero exit is an error wrapping
// ErrRun that quotes the end of the command's standard error.
func Run(ctx context.Context, c Command) (Sample, error) {
	if len(c.Argv) == 0 {
		return Sample{}, fmt.Errorf("%w: empty command", ErrRun)
	}
	if c.Stdout == "" {
		return Sample{}, fmt.Errorf("%w: %s: no stdout file", ErrRun, c.Argv[0])
	}
	if c.Before != nil {
		if err := c.Before(); err != nil {
			return Sample{}, fmt.Errorf("%w: %s: set-up: %v", ErrRun, c.Argv[0], err)
		}
	}
	stdout, err := os.Create(c.Stdout)
	if err != nil {
		return Sample{}, fmt.Errorf("%w: %v", ErrRun, err)
	}
	defer stdout.Close()
	stderrPath := c.Stdout + ".stderr"
	stderr, err := os.Create(stderrPath)
	if err != nil {
		return Sample{}, fmt.Errorf("%w: %v", ErrRun, err)
	}
	defer stderr.Close()
	var stdin *os.File
	if c.Stdin != "" {
		if stdin, err = os.Open(c.Stdin); err != nil {
			return Sample{}, fmt.Errorf("%w: %v", ErrRun, err)
		}
		defer stdin.Close()
	}

	argv := c.Argv
	env := append(os.Environ(), c.Env...)
	var report, reportW *os.File
	if launcherExe != "" {
		if report, reportW, err = os.Pipe(); err != nil {
			return Sample{}, fmt.Errorf("%w: %v", ErrRun, err)
		}
		defer report.Close()
		defer reportW.Close()
		argv = append([]string{launcherExe}, c.Argv...)
		env = append(env, launcherEnv+"=1")
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = c.Dir
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	if stdin != nil {
		cmd.Stdin = stdin
	}
	if reportW != nil {
		cmd.ExtraFiles = []*os.File{reportW}
	}
	// Own process group, so that a cancelled run takes its children along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }

	start := time.Now()
	err = cmd.Start()
	if err == nil {
		if reportW != nil {
			reportW.Close()
		}
		err = cmd.Wait()
	}
	wall := time.Since(start)
	if err != nil {
		tail, _ := readTail(stderrPath, 2000)
		return Sample{}, fmt.Errorf("%w: %s: %v\n%s", ErrRun, c.String(), err, indent(tail))
	}
	s := Sample{WallS: wall.Seconds(), PeakRSSBytes: maxRSS(cmd.ProcessState)}
	if report != nil {
		l, err := readLaunchReport(report)
		if err != nil {
			return Sample{}, fmt.Errorf("%w: %s: %v", ErrRun, c.String(), err)
		}
		s.WallS, s.PeakRSSBytes = l.wall.Seconds(), l.maxRSSKiB*1024
	}
	tail, err := readTail(c.Stdout, tailBytes)
	if err != nil {
		return Sample{}, fmt.Errorf("%w: %v", ErrRun, err)
	}
	if s.Metrics, err = ParseBenchLine(tail); err != nil {
		return Sample{}, fmt.Errorf("%s: stdout %s: %w", c.Argv[0], c.Stdout, err)
	}
	return s, nil
}

// maxRSS returns the peak RSS of a reaped process in bytes (Linux reports
// ru_maxrss in KiB).
func maxRSS(ps *os.ProcessState) int64 {
	if ps == nil {
		return 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return int64(ru.Maxrss) * 1024
	}
	return 0
}

// readTail returns up to the last n bytes of the file at path.
func readTail(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return nil, err
	}
	return buf, nil
}

func indent(b []byte) string {
	s := strings.TrimRight(string(b), "\n")
	if s == "" {
		return "    (no stderr)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// Command bench measures ferry against the tools people use today, side by
// side on this machine, and writes the results as JSON, a markdown report and
// an SVG chart of the speed-ups.
//
//	go run ./bench/cmd/bench -mode quick      # CI-sized inputs, < 5 minutes on 2 idle cores
//	go run ./bench/cmd/bench -mode full       # the full inputs (make bench)
//	go run ./bench/cmd/bench -mode full -alpaca /data/alpaca_data.json -only 'dataprep'
//
// Run it from the repository root (make does). Every job runs ferry and its
// anchor as subprocesses: one warm-up run each, then -pairs alternating runs;
// see package bench/internal/harness for the method. A job whose program
// does not exist yet, or whose anchor tool is missing, is reported as "not
// available" with the reason, never dropped.
//
// Exit status: 0 when every job that could run ran (jobs that are not
// available do not count), 1 when a job failed or results could not be
// written, 2 for bad usage, 130 when interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/ferryml/ferry/bench/internal/harness"
	"github.com/ferryml/ferry/internal/pyenv"
)

type config struct {
	mode        string
	alpaca      string // real Alpaca file; "" = the bundled sample, repeated
	pairs       int
	warmup      int
	only        *regexp.Regexp
	work        string
	results     string
	python      string
	anchors     string // scripts/setup-bench-deps' directory (MosaicML Streaming, LitData, Gigatoken)
	threads     int
	list        bool
	noCheck     bool
	storageSize string
	seedRecords int    // records for the seed path job (0 = all)
	ckptLayers  int    // layers of the generated checkpoint (0 = the mode's: quick 2, full 16)
	binDir      string // prebuilt ferry binaries; "" = build from the tree
	stdout      io.Writer
	stderr      io.Writer
}

var errUsage = errors.New("usage")

func main() {
	harness.LaunchMain() // in a launcher process: runs the command and exits
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
	case errors.Is(err, errUsage), errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case ctx.Err() != nil:
		fmt.Fprintln(os.Stderr, "bench: interrupted")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &config{stderr: stderr}
	var only string
	fs.StringVar(&c.mode, "mode", "", "quick (CI-sized inputs) or full (required)")
	fs.StringVar(&c.alpaca, "alpaca", "", "the real 52,002-record Stanford `alpaca_data.json` (JSON array or JSONL); default: the bundled sample, repeated")
	fs.IntVar(&c.pairs, "pairs", 0, "measured ferry/anchor pairs per job (default: 2 quick, 3 full)")
	fs.IntVar(&c.warmup, "warmup", 1, "warm-up runs of each side per job")
	fs.StringVar(&only, "only", "", "run only the jobs whose name matches this `regexp` (the others are listed as skipped)")
	fs.StringVar(&c.work, "work", "bench/work", "scratch `dir` for inputs and outputs (git-ignored)")
	fs.StringVar(&c.results, "results", "", "`dir` for the JSON, report.md and chart.svg (default: bench/results for full, bench/work/results-quick for quick)")
	fs.StringVar(&c.python, "python", pyenv.Path(), "`python` with tokenizers, transformers and torch for the anchors (default: $FERRY_PYTHON, else the venv scripts/setup-test-deps builds)")
	fs.StringVar(&c.anchors, "anchors", defaultAnchors(), "`dir` where scripts/setup-bench-deps installed MosaicML Streaming, LitData and Gigatoken (put on PYTHONPATH over -python's venv)")
	fs.IntVar(&c.threads, "threads", runtime.NumCPU(), "the \"all threads\" count")
	fs.StringVar(&c.binDir, "bin", "", "use the ferry binaries in this `dir` (e.g. bin after make build) instead of building them from the tree")
	fs.IntVar(&c.seedRecords, "seed-records", 0, "the seed path job uses the first `N` records only (default: quick 200, full all); 8 ranks of the seed tokenize every record each")
	fs.IntVar(&c.ckptLayers, "ckpt-layers", 0, "layers of the checkpoint the ckptmerge jobs generate (default: quick 2, full 16 = 1.7 GB; full 60 is about 5.5 GB, to show that ckptmerge's memory does not grow with the model)")
	fs.BoolVar(&c.list, "list", false, "list the jobs and whether they can run, then exit")
	fs.BoolVar(&c.noCheck, "no-check", false, "skip the output checks (identical token IDs, ...) that normally fail a job")
	fs.StringVar(&c.storageSize, "storage-size", "", "object size for the storage jobs (default: 64MiB quick, 512MiB full)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./bench/cmd/bench -mode quick|full [flags]\n\n"+
			"Measures ferry against HF tokenizers, PyTorch, cp and minio-go, side by side.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected argument %q\n", fs.Arg(0))
		return nil, errUsage
	}
	switch c.mode {
	case "quick", "full":
	default:
		fmt.Fprintf(stderr, "bench: -mode must be quick or full, not %q\n", c.mode)
		return nil, errUsage
	}
	if c.pairs == 0 {
		c.pairs = map[string]int{"quick": 2, "full": 3}[c.mode]
	}
	if c.pairs < 1 || c.warmup < 0 || c.threads < 1 || c.ckptLayers < 0 {
		fmt.Fprintln(stderr, "bench: -pairs and -threads must be at least 1, -warmup and -ckpt-layers at least 0")
		return nil, errUsage
	}
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			fmt.Fprintf(stderr, "bench: -only: %v\n", err)
			return nil, errUsage
		}
		c.only = re
	}
	if c.results == "" {
		c.results = map[string]string{"quick": filepath.Join(c.work, "results-quick"), "full": "bench/results"}[c.mode]
	}
	if c.storageSize == "" {
		c.storageSize = map[string]string{"quick": "64MiB", "full": "512MiB"}[c.mode]
	}
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	c.stdout = stdout
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the repository root (no go.mod here): %w", err)
	}
	for _, d := range []string{c.work, c.results} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	res := &harness.Results{Schema: harness.Schema, Mode: c.mode, Started: time.Now().UTC()}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "bench: "+format+"\n", a...) }

	env := newEnv(ctx, c, logf)
	res.Machine = env.machine()
	jobs, inputs := buildJobs(env)
	res.Inputs = inputs

	if c.list {
		width := 0
		for _, j := range jobs {
			width = max(width, utf8.RuneCountInString(j.Name))
		}
		for _, j := range jobs {
			state := "ready"
			if j.Unavailable != "" {
				state = "not available: " + j.Unavailable
			}
			fmt.Fprintf(stdout, "%-*s %s\n", width, j.Name, state)
		}
		return nil
	}

	failed := 0
	for i, j := range jobs {
		if c.only != nil && !c.only.MatchString(j.Name) {
			continue
		}
		logf("[%d/%d] %s", i+1, len(jobs), j.Name)
		if c.noCheck && j.Check != nil {
			j.Check = func() (string, error) { return "skipped (-no-check)", nil }
		}
		timeout := map[string]time.Duration{"quick": 5 * time.Minute, "full": 30 * time.Minute}[c.mode]
		r, err := harness.RunJob(ctx, j, harness.Options{Warmup: c.warmup, Pairs: c.pairs, Log: stderr, RunTimeout: timeout})
		if err != nil {
			return err
		}
		if r.Status == harness.StatusOK {
			logf("  %s: ferry %s, anchor %s, ferry advantage %s (%.0f s)", j.Name,
				harness.FormatValue(r.Ferry.Value.Median, j.Metric.Unit),
				harness.FormatValue(r.Anchor.Value.Median, j.Metric.Unit), harness.FormatRatio(r.Ratio), r.ElapsedS)
		} else if r.Status == harness.StatusFailed {
			failed++
		}
		res.Jobs = append(res.Jobs, r)
		// Write what is measured so far after every job: a long run that is
		// interrupted keeps its finished jobs.
		res.Finished = time.Now().UTC()
		res.Machine.LoadAvgEnd = loadAvg()
		if _, err := writeResults(c, res); err != nil {
			return err
		}
	}
	res.Finished = time.Now().UTC()
	res.Machine.LoadAvgEnd = loadAvg()

	fmt.Fprintln(stdout)
	if err := res.WriteTable(stdout); err != nil {
		return err
	}
	paths, err := writeResults(c, res)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nmachine: %s, %d × %s; %s\nwritten: %v\n", res.Machine.Host, res.Machine.CPUs,
		res.Machine.CPUModel, res.Finished.Sub(res.Started).Round(time.Second), paths)
	if failed > 0 {
		return fmt.Errorf("%d job(s) failed; see the table and %s", failed, paths[1])
	}
	return nil
}

// writeResults writes <date>-<host>.json, report.md and chart.svg into the
// results dir, each through a temp file and a rename.
func writeResults(c *config, r *harness.Results) ([]string, error) {
	name := fmt.Sprintf("%s-%s.json", r.Started.Format("2006-01-02"), sanitize(r.Machine.Host))
	if c.mode == "quick" {
		name = fmt.Sprintf("%s-%s-quick.json", r.Started.Format("2006-01-02"), sanitize(r.Machine.Host))
	}
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{name, r.WriteJSON},
		{"report.md", func(w io.Writer) error { return r.WriteMarkdown(w, "chart.svg") }},
		{"chart.svg", r.WriteSVG},
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(c.results, f.name)
		if err := writeFileAtomic(p, f.write); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func writeFileAtomic(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

func sanitize(s string) string {
	return regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(s, "_")
}

// defaultAnchors is $FERRY_CACHE/bench-anchors (default ~/.cache/ferry).
func defaultAnchors() string {
	return filepath.Join(envOr("FERRY_CACHE", filepath.Join(homeDir(), ".cache", "ferry")), "bench-anchors")
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func homeDir() string {
	h, err := os.UserHomeDir()
	if err != nil {
		return "/root"
	}
	return h
}

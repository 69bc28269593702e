package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// Metric names what a job compares and which way is better.
type Metric struct {
	Name           string `json:"name"` // "wall_s", "peak_rss_mb", or a bench-line key
	Unit           string `json:"unit"`
	HigherIsBetter bool   `json:"higher_is_better"`
}

// Side is one of a job's two contestants.
type Side struct {
	Label string  // e.g. "ferry dataprep", "HF tokenizers 0.23.2 (node)"
	Cmd   Command // the subprocess
	// Metric is the bench-line key this side reports the job's metric
	// under, when it differs from the job's Metric.Name (e.g. one script
	// that measures both sides in one process reports "ferry_us" and
	// "torch_us"). "" = the job's Metric.Name.
	Metric string
	// SameRun takes this side's value from the other side's run instead of
	// running a command of its own: for scripts that measure both
	// contestants in one process. Only the anchor side may set it.
	SameRun bool
}

// Job is one comparison.
type Job struct {
	Name   string // short, unique: "tokenize qwen2.5 alpaca 1T"
	Group  string // tokenizer, dataprep, feed, ckptmerge, storage
	Metric Metric
	// Extra metrics are summarized from the same runs when both sides
	// report them (e.g. the encode throughput each side measures inside
	// its process next to the job's wall time). They never fail a job.
	Extra  []ExtraMetric
	Ferry  Side
	Anchor Side
	// Unavailable, when set, says why the job cannot run (a program that
	// does not exist yet, a missing tool): it is reported, never dropped.
	Unavailable string
	// Check, when set, runs once after the warm-up (or the first pair when
	// there is none) and verifies the two sides' outputs (e.g. identical token IDs). Its message is recorded;
	// an error fails the job, since a fast wrong answer is no result.
	Check func() (string, error)
	// NoWarmup skips the warm-up (for scripts that warm up and repeat
	// inside); MaxPairs, when > 0, caps the pairs (for slow jobs).
	NoWarmup bool
	MaxPairs int
}

// ExtraMetric is a secondary metric; Ferry and Anchor name its bench-line
// key on each side when it differs from Metric.Name.
type ExtraMetric struct {
	Metric
	Ferry, Anchor string
}

// Status values of a JobResult.
const (
	StatusOK          = "ok"
	StatusUnavailable = "not available"
	StatusFailed      = "failed"
)

// SideResult is one side's samples and their summary.
type SideResult struct {
	Label        string   `json:"label"`
	Command      string   `json:"command"`
	Samples      []Sample `json:"samples,omitempty"`
	Value        Summary  `json:"value"`
	PeakRSSBytes int64    `json:"peak_rss_bytes"` // max over the measured runs; 0 = not measured
}

// JobResult is the outcome of one job.
type JobResult struct {
	Name     string     `json:"name"`
	Group    string     `json:"group"`
	Metric   Metric     `json:"metric"`
	Status   string     `json:"status"`
	Reason   string     `json:"reason,omitempty"`
	Warmup   int        `json:"warmup"`
	Pairs    int        `json:"pairs"`
	Ferry    SideResult `json:"ferry"`
	Anchor   SideResult `json:"anchor"`
	Ratio    Summary    `json:"ratio"`
	Ratios   []float64  `json:"ratios,omitempty"`
	Check    string     `json:"check,omitempty"`
	Extra    []Extra    `json:"extra,omitempty"`
	ElapsedS float64    `json:"elapsed_s"`
}

// Extra is a secondary metric of a job, from the same runs.
type Extra struct {
	Metric Metric  `json:"metric"`
	Ferry  Summary `json:"ferry"`
	Anchor Summary `json:"anchor"`
	Ratio  Summary `json:"ratio"`
}

// Options control how a job is run.
type Options struct {
	Warmup int       // warm-up runs of each side, discarded (default 0)
	Pairs  int       // measured A B pairs (at least 1)
	Log    io.Writer // progress lines; nil = none
	// Runner runs one command; nil = Run. Tests substitute a fake.
	Runner func(context.Context, Command) (Sample, error)
	// RunTimeout bounds one run (0 = none): a side that hangs fails its job
	// instead of stalling the whole benchmark.
	RunTimeout time.Duration
}

// RunJob runs a job: Warmup runs of each side, then Pairs alternating runs
// ferry, anchor, ferry, anchor, ... It never returns an error for a job
// that fails: the failure is the result's Status and Reason, so that one
// broken job does not hide the others. Only a cancelled ctx stops it early
// with ctx's error.
func RunJob(ctx context.Context, j Job, o Options) (res JobResult, err error) {
	if j.NoWarmup {
		o.Warmup = 0
	}
	if j.MaxPairs > 0 && o.Pairs > j.MaxPairs {
		o.Pairs = j.MaxPairs
	}
	r := JobResult{
		Name: j.Name, Group: j.Group, Metric: j.Metric, Warmup: o.Warmup, Pairs: o.Pairs,
		Ferry:  SideResult{Label: j.Ferry.Label, Command: cmdString(j.Ferry)},
		Anchor: SideResult{Label: j.Anchor.Label, Command: cmdString(j.Anchor)},
	}
	if j.Unavailable != "" {
		r.Status, r.Reason = StatusUnavailable, j.Unavailable
		return r, nil
	}
	if j.Ferry.SameRun {
		r.Status, r.Reason = StatusFailed, "job definition: only the anchor side may be SameRun"
		return r, nil
	}
	if o.Pairs < 1 {
		r.Status, r.Reason = StatusFailed, fmt.Sprintf("job definition: %d pairs, want at least 1", o.Pairs)
		return r, nil
	}
	runner := o.Runner
	if runner == nil {
		runner = Run
	}
	run := func(ctx context.Context, c Command) (Sample, error) {
		if o.RunTimeout <= 0 {
			return runner(ctx, c)
		}
		rctx, cancel := context.WithTimeout(ctx, o.RunTimeout)
		defer cancel()
		s, err := runner(rctx, c)
		if err != nil && ctx.Err() == nil && rctx.Err() != nil {
			return s, fmt.Errorf("%w: timed out after %v: %v", ErrRun, o.RunTimeout, err)
		}
		return s, err
	}
	logf := func(format string, a ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", a...)
		}
	}
	start := time.Now()
	defer func() { res.ElapsedS = time.Since(start).Seconds() }()

	// runPair runs ferry then (unless SameRun) the anchor.
	runPair := func() (f, a Sample, err error) {
		if f, err = run(ctx, j.Ferry.Cmd); err != nil {
			return f, a, fmt.Errorf("ferry side: %w", err)
		}
		if j.Anchor.SameRun {
			return f, f, nil
		}
		if a, err = run(ctx, j.Anchor.Cmd); err != nil {
			return f, a, fmt.Errorf("anchor side: %w", err)
		}
		return f, a, nil
	}
	fail := func(err error) (JobResult, error) {
		if ctx.Err() != nil {
			return r, ctx.Err()
		}
		r.Status, r.Reason = StatusFailed, err.Error()
		logf("  %s: FAILED: %v", j.Name, err)
		return r, nil
	}

	for i := 0; i < o.Warmup; i++ {
		logf("  %s: warm-up %d/%d", j.Name, i+1, o.Warmup)
		if _, _, err := runPair(); err != nil {
			return fail(fmt.Errorf("warm-up: %w", err))
		}
	}
	// The check looks at the outputs of the first runs: the warm-up's, or
	// the first pair's when there is no warm-up.
	check := func() error {
		if j.Check == nil {
			return nil
		}
		msg, err := j.Check()
		r.Check = msg
		if err != nil {
			return fmt.Errorf("output check: %w", err)
		}
		return nil
	}
	if o.Warmup > 0 {
		if err := check(); err != nil {
			return fail(err)
		}
	}
	var fv, av []float64
	for i := 0; i < o.Pairs; i++ {
		f, a, err := runPair()
		if err != nil {
			return fail(fmt.Errorf("pair %d: %w", i+1, err))
		}
		if i == 0 && o.Warmup == 0 {
			if err := check(); err != nil {
				return fail(err)
			}
		}
		fx, err := sideValue(j.Ferry, j.Metric, f)
		if err != nil {
			return fail(fmt.Errorf("pair %d: ferry side: %w", i+1, err))
		}
		ax, err := sideValue(j.Anchor, j.Metric, a)
		if err != nil {
			return fail(fmt.Errorf("pair %d: anchor side: %w", i+1, err))
		}
		r.Ferry.Samples = append(r.Ferry.Samples, f)
		r.Ferry.PeakRSSBytes = max(r.Ferry.PeakRSSBytes, f.PeakRSSBytes)
		if !j.Anchor.SameRun {
			r.Anchor.Samples = append(r.Anchor.Samples, a)
			r.Anchor.PeakRSSBytes = max(r.Anchor.PeakRSSBytes, a.PeakRSSBytes)
		}
		fv, av = append(fv, fx), append(av, ax)
		logf("  %s: pair %d/%d: ferry %s, anchor %s", j.Name, i+1, o.Pairs,
			FormatValue(fx, j.Metric.Unit), FormatValue(ax, j.Metric.Unit))
	}
	if r.Ferry.Value, err = Summarize(fv); err != nil {
		return fail(err)
	}
	if r.Anchor.Value, err = Summarize(av); err != nil {
		return fail(err)
	}
	if r.Ratios, err = PairRatios(fv, av, j.Metric.HigherIsBetter); err != nil {
		return fail(err)
	}
	if r.Ratio, err = Summarize(r.Ratios); err != nil {
		return fail(err)
	}
	r.Extra = extras(j, r.Ferry.Samples, r.Anchor.Samples)
	r.Status = StatusOK
	return r, nil
}

// extras summarizes the job's extra metrics that both sides reported in
// every measured run.
func extras(j Job, fs, as []Sample) []Extra {
	if j.Anchor.SameRun {
		as = fs
	}
	var out []Extra
	for _, m := range j.Extra {
		var fv, av []float64
		kf, ka := m.Ferry, m.Anchor
		if kf == "" {
			kf = m.Name
		}
		if ka == "" {
			ka = m.Name
		}
		for i := range fs {
			f, okF := fs[i].Metric(kf)
			a, okA := as[i].Metric(ka)
			if !okF || !okA {
				fv = nil
				break
			}
			fv, av = append(fv, f), append(av, a)
		}
		if fv == nil {
			continue
		}
		x := Extra{Metric: m.Metric}
		var err error
		if x.Ferry, err = Summarize(fv); err != nil {
			continue
		}
		if x.Anchor, err = Summarize(av); err != nil {
			continue
		}
		ratios, err := PairRatios(fv, av, m.HigherIsBetter)
		if err != nil {
			continue
		}
		if x.Ratio, err = Summarize(ratios); err != nil {
			continue
		}
		out = append(out, x)
	}
	return out
}

// ErrNoMetric is returned when a run did not report the job's metric.
var ErrNoMetric = errors.New("harness: metric not reported")

func sideValue(s Side, m Metric, smp Sample) (float64, error) {
	name := s.Metric
	if name == "" {
		name = m.Name
	}
	v, ok := smp.Metric(name)
	if !ok {
		return 0, fmt.Errorf("%w: %q (no such key in the bench line)", ErrNoMetric, name)
	}
	return v, nil
}

func cmdString(s Side) string {
	if s.SameRun {
		return "(measured in the ferry side's run)"
	}
	if len(s.Cmd.Argv) == 0 {
		return ""
	}
	return s.Cmd.String()
}

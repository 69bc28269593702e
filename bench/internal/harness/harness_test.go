package harness

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	LaunchMain()
	os.Exit(m.Run())
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name    string
		in      []float64
		want    Summary
		wantErr error
	}{
		{"one", []float64{3}, Summary{3, 3, 3, 1}, nil},
		{"odd", []float64{5, 1, 3}, Summary{3, 1, 5, 3}, nil},
		{"even", []float64{4, 1, 3, 2}, Summary{2.5, 1, 4, 4}, nil},
		{"dups", []float64{2, 2, 9, 2}, Summary{2, 2, 9, 4}, nil},
		{"empty", nil, Summary{}, ErrNoSamples},
		{"nan", []float64{1, math.NaN()}, Summary{}, ErrBadSample},
		{"inf", []float64{math.Inf(1)}, Summary{}, ErrBadSample},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append([]float64(nil), tt.in...)
			got, err := Summarize(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if tt.wantErr == nil && !reflect.DeepEqual(orig, tt.in) {
				t.Errorf("input modified: %v, was %v", tt.in, orig)
			}
		})
	}
}

func TestPairRatios(t *testing.T) {
	tests := []struct {
		name          string
		ferry, anchor []float64
		higher        bool
		want          []float64
		wantErr       error
	}{
		{"seconds", []float64{1, 2, 4}, []float64{10, 10, 10}, false, []float64{10, 5, 2.5}, nil},
		{"throughput", []float64{100, 50}, []float64{10, 25}, true, []float64{10, 2}, nil},
		{"slower", []float64{2}, []float64{1}, false, []float64{0.5}, nil},
		{"length mismatch", []float64{1, 2}, []float64{1}, false, nil, nil},
		{"empty", nil, nil, false, nil, ErrNoSamples},
		{"zero", []float64{0}, []float64{1}, false, nil, ErrBadSample},
		{"negative anchor", []float64{1}, []float64{-1}, true, nil, ErrBadSample},
		{"nan", []float64{math.NaN()}, []float64{1}, false, nil, ErrBadSample},
		{"inf", []float64{1}, []float64{math.Inf(1)}, false, nil, ErrBadSample},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PairRatios(tt.ferry, tt.anchor, tt.higher)
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.want == nil {
				if err == nil {
					t.Fatalf("got %v, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseBenchLine(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]float64
		wantErr error
	}{
		{"none", "", nil, nil},
		{"ids last", `{"bench":{"x":1}}` + "\n" + `{"ids":[1,2]}` + "\n", nil, nil},
		{"log line", "done in 3s\n", nil, nil},
		{"simple", `{"bench": {"mb_per_s": 12.5, "tokens": 3}}`, map[string]float64{"mb_per_s": 12.5, "tokens": 3}, nil},
		{"after output", "{\"ids\":[1]}\n{\"bench\":{\"s\":0.25}}\n\n  \n", map[string]float64{"s": 0.25}, nil},
		{"crlf", "x\r\n{\"bench\":{\"s\":1}}\r\n", map[string]float64{"s": 1}, nil},
		{"empty object", `{"bench":{}}`, map[string]float64{}, nil},
		{"negative and exp", `{"bench":{"a":-1e-3,"b":2E3}}`, map[string]float64{"a": -1e-3, "b": 2e3}, nil},
		{"bad json", `{"bench": {"x": }`, nil, ErrBenchLine},
		{"labels left out", `{"bench":{"x":"fast","y":null,"z":[1,2],"b":true,"n":2}}`, map[string]float64{"n": 2}, nil},
		{"nested", `{"bench":{"x":{"y":1,"z":{"w":-2}},"v":3}}`, map[string]float64{"x.y": 1, "x.z.w": -2, "v": 3}, nil},
		{"too deep", `{"bench":{"a":{"b":{"c":{"d":{"e":{"f":{"g":{"h":{"i":1}}}}}}}}}}`, nil, ErrBenchLine},
		{"not object", `{"bench":[1,2]}`, nil, ErrBenchLine},
		{"null bench", `{"bench":null}`, nil, ErrBenchLine},
		{"extra key", `{"bench":{"x":1},"other":2}`, nil, ErrBenchLine},
		{"overflow", `{"bench":{"x":1e999}}`, nil, ErrBenchLine},
		{"trailing garbage", `{"bench":{"x":1}} x`, nil, ErrBenchLine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseBenchLine([]byte(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzParseBenchLine(f *testing.F) {
	for _, s := range []string{
		"", "\n", `{"bench":{"x":1}}`, "{\"ids\":[1,2]}\n{\"bench\":{\"mb_per_s\":3.5,\"n\":7}}\n",
		`{"bench":{"x":"y"}}`, `{"bench":`, "a\nb\r\n\n", `{"bench":{"a":1e308,"b":-0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseBenchLine(b)
		if err != nil {
			if !errors.Is(err, ErrBenchLine) {
				t.Fatalf("error does not wrap ErrBenchLine: %v", err)
			}
			if m != nil {
				t.Fatalf("metrics %v returned with error %v", m, err)
			}
			return
		}
		if m == nil {
			return
		}
		// A parsed line holds finite numbers and survives a round trip.
		var parts []string
		for k, v := range m {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("%q = %v", k, v)
			}
			kb, _ := jsonString(k)
			parts = append(parts, fmt.Sprintf("%s:%v", kb, v))
		}
		line := `{"bench":{` + strings.Join(parts, ",") + "}}"
		m2, err := ParseBenchLine([]byte("prefix\n" + line + "\n"))
		if err != nil {
			t.Fatalf("round trip of %s: %v", line, err)
		}
		if !reflect.DeepEqual(m, m2) {
			t.Fatalf("round trip: %v != %v", m, m2)
		}
	})
}

func jsonString(s string) (string, error) {
	var b bytes.Buffer
	enc := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	b.WriteString(`"`)
	for _, c := range enc.Replace(s) {
		if c < 0x20 {
			fmt.Fprintf(&b, `\u%04x`, c)
			continue
		}
		b.WriteRune(c)
	}
	b.WriteString(`"`)
	return b.String(), nil
}

// fakeRunner records the order of runs and returns scripted samples.
type fakeRunner struct {
	calls []string
	wall  map[string][]float64 // per argv[0], consumed in order
	fail  string               // argv[0] that fails
}

func (f *fakeRunner) run(_ context.Context, c Command) (Sample, error) {
	name := c.Argv[0]
	f.calls = append(f.calls, name)
	if name == f.fail {
		return Sample{}, fmt.Errorf("%w: %s exited 1", ErrRun, name)
	}
	ws := f.wall[name]
	if len(ws) == 0 {
		return Sample{}, fmt.Errorf("fake: no more samples for %s", name)
	}
	w := ws[0]
	f.wall[name] = ws[1:]
	return Sample{WallS: w, PeakRSSBytes: int64(w * 1e6), Metrics: map[string]float64{"mbps": 100 / w, name + "_us": w * 1e6}}, nil
}

func testJob() Job {
	return Job{
		Name: "j", Group: "g", Metric: Metric{Name: "wall_s", Unit: "s"},
		Ferry:  Side{Label: "ferry", Cmd: Command{Argv: []string{"F"}}},
		Anchor: Side{Label: "anchor", Cmd: Command{Argv: []string{"A"}}},
	}
}

func TestRunJobPairing(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{
		"F": {9, 1, 2, 4},     // first is the warm-up
		"A": {99, 10, 10, 10}, // likewise
	}}
	var log bytes.Buffer
	checked := false
	j := testJob()
	j.Check = func() (string, error) { checked = true; return "outputs identical", nil }
	r, err := RunJob(context.Background(), j, Options{Warmup: 1, Pairs: 3, Runner: fr.run, Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"F", "A", "F", "A", "F", "A", "F", "A"}; !reflect.DeepEqual(fr.calls, want) {
		t.Errorf("run order %v, want %v", fr.calls, want)
	}
	if r.Status != StatusOK || !checked || r.Check != "outputs identical" {
		t.Fatalf("status %q reason %q check %q", r.Status, r.Reason, r.Check)
	}
	if want := []float64{10, 5, 2.5}; !reflect.DeepEqual(r.Ratios, want) {
		t.Errorf("ratios %v, want %v", r.Ratios, want)
	}
	if want := (Summary{5, 2.5, 10, 3}); r.Ratio != want {
		t.Errorf("ratio %+v, want %+v", r.Ratio, want)
	}
	if want := (Summary{2, 1, 4, 3}); r.Ferry.Value != want {
		t.Errorf("ferry %+v, want %+v", r.Ferry.Value, want)
	}
	if r.Ferry.PeakRSSBytes != 4e6 || r.Anchor.PeakRSSBytes != 10e6 {
		t.Errorf("peak RSS %d %d: the warm-up must not count", r.Ferry.PeakRSSBytes, r.Anchor.PeakRSSBytes)
	}
	if len(r.Ferry.Samples) != 3 || len(r.Anchor.Samples) != 3 {
		t.Errorf("samples %d %d, want 3 3", len(r.Ferry.Samples), len(r.Anchor.Samples))
	}
	if r.ElapsedS <= 0 {
		t.Errorf("elapsed %v, want > 0", r.ElapsedS)
	}
	if !strings.Contains(log.String(), "pair 3/3") {
		t.Errorf("log lacks progress: %q", log.String())
	}
}

func TestRunJobCheckWithoutWarmup(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{"F": {1, 1}, "A": {2, 2}}}
	j := testJob()
	var callsAtCheck int
	j.Check = func() (string, error) { callsAtCheck = len(fr.calls); return "ok", nil }
	r, err := RunJob(context.Background(), j, Options{Pairs: 2, Runner: fr.run})
	if err != nil || r.Status != StatusOK || r.Check != "ok" {
		t.Fatal(err, r.Status, r.Reason)
	}
	if callsAtCheck != 2 {
		t.Errorf("check ran after %d runs, want 2 (the first pair)", callsAtCheck)
	}
}

func TestRunJobExtra(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{"F": {1, 2}, "A": {4, 4}}}
	j := testJob()
	j.Extra = []ExtraMetric{{Metric: Metric{Name: "mbps", Unit: "MB/s", HigherIsBetter: true}},
		{Metric: Metric{Name: "F_us", Unit: "µs"}},
		{Metric: Metric{Name: "us", Unit: "µs"}, Ferry: "F_us", Anchor: "A_us"}}
	r, err := RunJob(context.Background(), j, Options{Pairs: 2, Runner: fr.run})
	if err != nil || r.Status != StatusOK {
		t.Fatal(err, r.Reason)
	}
	// mbps = 100/wall on both sides; F_us only on the ferry side, so it is
	// left out; us is F_us vs A_us.
	if len(r.Extra) != 2 || r.Extra[0].Metric.Name != "mbps" || r.Extra[1].Metric.Name != "us" {
		t.Fatalf("extra %+v", r.Extra)
	}
	if want := (Summary{3, 2, 4, 2}); r.Extra[1].Ratio != want {
		t.Errorf("per-side keys: ratio %+v, want %+v", r.Extra[1].Ratio, want)
	}
	if want := (Summary{3, 2, 4, 2}); r.Extra[0].Ratio != want {
		t.Errorf("extra ratio %+v, want %+v", r.Extra[0].Ratio, want)
	}
	var b bytes.Buffer
	res := &Results{Jobs: []JobResult{r}}
	res.WriteTable(&b)
	if !strings.Contains(b.String(), "└ mbps") {
		t.Errorf("table lacks the extra row:\n%s", b.String())
	}
}

func TestRunJobOverrides(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{"F": {1, 1, 1}, "A": {1, 1, 1}}}
	j := testJob()
	j.NoWarmup, j.MaxPairs = true, 2
	r, err := RunJob(context.Background(), j, Options{Warmup: 1, Pairs: 5, Runner: fr.run})
	if err != nil || r.Status != StatusOK {
		t.Fatal(err, r.Reason)
	}
	if len(fr.calls) != 4 || r.Warmup != 0 || r.Pairs != 2 {
		t.Errorf("%d runs, warm-up %d, pairs %d; want 4, 0, 2", len(fr.calls), r.Warmup, r.Pairs)
	}
}

func TestRunJobBenchMetric(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{"F": {1, 2}, "A": {4, 4}}}
	j := testJob()
	j.Metric = Metric{Name: "mbps", Unit: "MB/s", HigherIsBetter: true}
	r, err := RunJob(context.Background(), j, Options{Pairs: 2, Runner: fr.run})
	if err != nil || r.Status != StatusOK {
		t.Fatal(err, r.Reason)
	}
	if want := []float64{4, 2}; !reflect.DeepEqual(r.Ratios, want) {
		t.Errorf("ratios %v, want %v", r.Ratios, want)
	}
}

func TestRunJobSameRun(t *testing.T) {
	fr := &fakeRunner{wall: map[string][]float64{"F": {1, 2, 3}}}
	j := testJob()
	j.Metric = Metric{Name: "us", Unit: "µs"}
	j.Ferry.Metric = "F_us"
	j.Anchor = Side{Label: "torch", SameRun: true, Metric: "mbps"}
	r, err := RunJob(context.Background(), j, Options{Warmup: 1, Pairs: 2, Runner: fr.run})
	if err != nil || r.Status != StatusOK {
		t.Fatal(err, r.Reason)
	}
	if want := []string{"F", "F", "F"}; !reflect.DeepEqual(fr.calls, want) {
		t.Errorf("calls %v, want %v", fr.calls, want)
	}
	// ferry 2e6 µs vs anchor mbps=50 → 50/2e6; 3e6 vs 33.3.
	if r.Anchor.PeakRSSBytes != 0 || len(r.Anchor.Samples) != 0 {
		t.Errorf("a same-run anchor has no samples of its own: %+v", r.Anchor)
	}
	if want := 50 / 2e6; math.Abs(r.Ratios[0]-want) > 1e-15 {
		t.Errorf("ratio %v, want %v", r.Ratios[0], want)
	}
	if r.Anchor.Command != "(measured in the ferry side's run)" {
		t.Errorf("anchor command %q", r.Anchor.Command)
	}
}

func TestRunJobFailures(t *testing.T) {
	tests := []struct {
		name       string
		mod        func(*Job, *fakeRunner)
		pairs      int
		wantStatus string
		wantReason string
	}{
		{"unavailable", func(j *Job, _ *fakeRunner) { j.Unavailable = "bin/x missing" }, 1, StatusUnavailable, "bin/x missing"},
		{"anchor fails", func(_ *Job, f *fakeRunner) { f.fail = "A" }, 1, StatusFailed, "warm-up: anchor side"},
		{"ferry fails", func(_ *Job, f *fakeRunner) { f.fail = "F" }, 1, StatusFailed, "warm-up: ferry side"},
		{"check fails", func(j *Job, _ *fakeRunner) {
			j.Check = func() (string, error) { return "line 3 differs", errors.New("ids differ") }
		}, 1, StatusFailed, "output check: ids differ"},
		{"missing metric", func(j *Job, _ *fakeRunner) { j.Metric.Name = "nope" }, 1, StatusFailed, `"nope"`},
		{"no pairs", func(*Job, *fakeRunner) {}, 0, StatusFailed, "0 pairs"},
		{"ferry same run", func(j *Job, _ *fakeRunner) { j.Ferry.SameRun = true }, 1, StatusFailed, "SameRun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fr := &fakeRunner{wall: map[string][]float64{"F": {1, 1, 1}, "A": {1, 1, 1}}}
			j := testJob()
			tt.mod(&j, fr)
			r, err := RunJob(context.Background(), j, Options{Warmup: 1, Pairs: tt.pairs, Runner: fr.run})
			if err != nil {
				t.Fatal(err)
			}
			if r.Status != tt.wantStatus || !strings.Contains(r.Reason, tt.wantReason) {
				t.Errorf("status %q reason %q, want %q containing %q", r.Status, r.Reason, tt.wantStatus, tt.wantReason)
			}
		})
	}
}

func TestRunJobRunTimeout(t *testing.T) {
	runner := func(ctx context.Context, c Command) (Sample, error) {
		<-ctx.Done()
		return Sample{}, ctx.Err()
	}
	r, err := RunJob(context.Background(), testJob(), Options{Pairs: 1, Runner: runner, RunTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != StatusFailed || !strings.Contains(r.Reason, "timed out after 10ms") {
		t.Errorf("status %q reason %q", r.Status, r.Reason)
	}
}

func TestRunJobCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	runner := func(ctx context.Context, c Command) (Sample, error) { return Sample{}, ctx.Err() }
	_, err := RunJob(ctx, testJob(), Options{Pairs: 1, Runner: runner})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestRunSubprocess(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(in, []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := 0
	c := Command{
		Argv: []string{"sh", "-c", `cat; echo "$FERRY_X"; echo '{"bench": {"n": 42}}'; echo oops >&2`},
		Env:  []string{"FERRY_X=from env"}, Stdin: in, Stdout: filepath.Join(dir, "out"),
		Before: func() error { before++; return nil },
	}
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := os.ReadFile(c.Stdout)
	if string(out) != "hello\nfrom env\n{\"bench\": {\"n\": 42}}\n" {
		t.Errorf("stdout %q", out)
	}
	if before != 1 || s.Metrics["n"] != 42 || s.WallS <= 0 || s.PeakRSSBytes <= 0 {
		t.Errorf("before=%d sample %+v", before, s)
	}

	// A failing command's error quotes its stderr.
	c.Argv = []string{"sh", "-c", "echo 'something broke' >&2; exit 3"}
	_, err = Run(context.Background(), c)
	if !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "something broke") {
		t.Errorf("err = %v", err)
	}
	// A malformed bench line is an error.
	c.Argv = []string{"sh", "-c", `echo '{"bench": {"n": }'`}
	if _, err = Run(context.Background(), c); !errors.Is(err, ErrBenchLine) {
		t.Errorf("err = %v, want ErrBenchLine", err)
	}
	// Before failing stops the run.
	c.Before = func() error { return errors.New("no space") }
	if _, err = Run(context.Background(), c); !errors.Is(err, ErrRun) {
		t.Errorf("err = %v", err)
	}
}

// TestRunPeakRSS checks that the harness sees a child's memory: a process
// that touches 64 MiB has a peak RSS of at least that.
func TestRunPeakRSS(t *testing.T) {
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c := Command{Argv: []string{exe, "-test.run=^TestHelperAlloc$"}, Env: []string{"FERRY_HARNESS_HELPER=64"},
		Stdout: filepath.Join(dir, "out")}
	s, err := Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if s.PeakRSSBytes < 64<<20 {
		t.Errorf("peak RSS %d bytes, want at least 64 MiB", s.PeakRSSBytes)
	}
}

// TestRunSmallRSS checks that a small command is not charged the
// harness's own memory (see launch.go): with 128 MiB held here, `true`
// must still report a few MiB.
func TestRunSmallRSS(t *testing.T) {
	if launcherExe == "" {
		t.Fatal("LaunchMain did not set up the launcher")
	}
	hold := make([]byte, 128<<20)
	for i := range hold {
		hold[i] = 1
	}
	s, err := Run(context.Background(), Command{Argv: []string{"true"}, Stdout: filepath.Join(t.TempDir(), "out")})
	if err != nil {
		t.Fatal(err)
	}
	if s.PeakRSSBytes <= 0 || s.PeakRSSBytes > 32<<20 {
		t.Errorf("peak RSS of true = %d bytes: want a few MiB, not the harness's %d", s.PeakRSSBytes, len(hold))
	}
	sink = hold[:1]
}

func TestRunExitStatusThroughLauncher(t *testing.T) {
	c := Command{Argv: []string{"sh", "-c", "echo bad >&2; kill -9 $$"}, Stdout: filepath.Join(t.TempDir(), "out")}
	_, err := Run(context.Background(), c)
	if !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "exit status 137") {
		t.Errorf("err = %v, want exit status 137 (SIGKILL) through the launcher", err)
	}
}

func TestParseLaunchReport(t *testing.T) {
	l, err := parseLaunchReport("2048 1500000000 3\n")
	if err != nil || l.maxRSSKiB != 2048 || l.wall != 1500*time.Millisecond || l.code != 3 {
		t.Errorf("got %+v, %v", l, err)
	}
	for _, bad := range []string{"", "1 2", "1 2 3 4", "a 2 3", "-1 2 3"} {
		if _, err := parseLaunchReport(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

var sink []byte

func TestHelperAlloc(t *testing.T) {
	if os.Getenv("FERRY_HARNESS_HELPER") == "" {
		t.Skip("helper process for TestRunPeakRSS")
	}
	sink = make([]byte, 64<<20)
	for i := range sink {
		sink[i] = byte(i)
	}
}

func TestRunCancelKillsGroup(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	c := Command{Argv: []string{"sh", "-c", "sleep 30 & sleep 30; wait"}, Stdout: filepath.Join(t.TempDir(), "out")}
	start := time.Now()
	_, err := Run(ctx, c)
	if err == nil {
		t.Fatal("cancelled run succeeded")
	}
	if time.Since(start) > 20*time.Second {
		t.Fatal("cancel did not stop the process group")
	}
}

func sampleResults() *Results {
	ok := JobResult{
		Name: "tokenize qwen2.5 alpaca 1T", Group: "tokenizer", Metric: Metric{Name: "wall_s", Unit: "s"},
		Status: StatusOK, Warmup: 1, Pairs: 3,
		Ferry:  SideResult{Label: "ferry", Command: "bin/dataprep tokenize", Value: Summary{0.5, 0.4, 0.6, 3}, PeakRSSBytes: 50 << 20, Samples: []Sample{{WallS: 0.5}}},
		Anchor: SideResult{Label: "HF <tokenizers> & co", Command: "node x.js", Value: Summary{5, 4, 6, 3}, PeakRSSBytes: 300 << 20, Samples: []Sample{{WallS: 5}}},
		Ratio:  Summary{10, 8, 12, 3}, Ratios: []float64{8, 10, 12}, Check: "ids identical",
	}
	slow := ok
	slow.Name = "slower | job"
	slow.Ratio, slow.Ratios = Summary{0.5, 0.3, 0.9, 3}, []float64{0.3, 0.5, 0.9}
	na := JobResult{Name: "feed direct", Group: "feed", Status: StatusUnavailable, Reason: "python/bench_feed.py does not exist yet\nmore"}
	failed := JobResult{Name: "ckptmerge vs torch", Status: StatusFailed, Reason: "exit status 1: \x01<boom>"}
	multi := JobResult{Name: "feed daemon", Status: StatusFailed, Reason: "pair 1: ferry side: run failed: python3 x.py: exit status 1\n    Traceback\n    DaemonGone: closed\n"}
	return &Results{
		Schema: Schema, Mode: "quick", Started: time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC), Finished: time.Date(2026, 11, 30, 20, 2, 0, 0, time.UTC),
		Machine: Machine{Host: "h", OS: "linux", Arch: "amd64", CPUs: 2, CPUModel: "Xeon", Go: "go1.26", Tools: map[string]string{"node": "v20"}},
		Jobs:    []JobResult{ok, slow, na, failed, multi},
	}
}

func TestResultsJSONRoundTrip(t *testing.T) {
	r := sampleResults()
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResults(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, r)
	}
	if _, err := ReadResults(strings.NewReader(`{"schema":"other/9"}`)); err == nil {
		t.Error("wrong schema accepted")
	}
}

func TestTableAndMarkdown(t *testing.T) {
	r := sampleResults()
	var tb bytes.Buffer
	if err := r.WriteTable(&tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"tokenize qwen2.5 alpaca 1T", "10.0× [8.00–12.0]", "50.0 MiB", "300 MiB",
		"not available: python/bench_feed.py does not exist yet", "failed: exit status 1", "failed: pair 1: … DaemonGone: closed"} {
		if !strings.Contains(tb.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, tb.String())
		}
	}
	if n := strings.Count(tb.String(), "\n"); n != 6 {
		t.Errorf("table has %d lines, want header + 5 jobs", n)
	}
	var mdb bytes.Buffer
	if err := r.WriteMarkdown(&mdb, "chart.svg"); err != nil {
		t.Fatal(err)
	}
	s := mdb.String()
	for _, want := range []string{"| tokenize qwen2.5 alpaca 1T | 0.5 s | 5.00 s | 10.0× [8.00–12.0] | 50.0 MiB | 300 MiB |",
		`slower \| job`, "![ferry speed-up per job](chart.svg)", "check: ids identical", "per pair: 8.00, 10.0, 12.0", "node v20"} {
		if !strings.Contains(s, want) {
			t.Errorf("markdown lacks %q:\n%s", want, s)
		}
	}
}

func TestSVG(t *testing.T) {
	r := sampleResults()
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	// Well-formed XML, one bar per job that ran, text for those that did not.
	dec := xml.NewDecoder(&b)
	rects, texts := 0, []string{}
	inText := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name.Local == "rect" {
				rects++
			}
			inText = e.Name.Local == "text"
		case xml.CharData:
			if inText {
				texts = append(texts, string(e))
			}
		case xml.EndElement:
			inText = false
		}
	}
	if rects != 1+2 { // background + two bars
		t.Errorf("%d rects, want 3", rects)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"10.0× [8.00–12.0]", "0.50× [0.30–0.90]", "not available: python/bench_feed.py", "failed: exit status 1:  <boom>", "1×", "0.1×", "100×"} {
		if !strings.Contains(all, want) {
			t.Errorf("SVG text lacks %q:\n%s", want, all)
		}
	}
}

func TestSVGNoJobsRan(t *testing.T) {
	r := sampleResults()
	r.Jobs = r.Jobs[2:4]
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
}

func TestFormatValue(t *testing.T) {
	for _, tt := range []struct {
		v    float64
		unit string
		want string
	}{{0, "s", "0 s"}, {0.01234, "s", "0.0123 s"}, {1.234, "", "1.23"}, {12.34, "MB/s", "12.3 MB/s"}, {1234.5, "µs", "1234 µs"}} {
		if got := FormatValue(tt.v, tt.unit); got != tt.want {
			t.Errorf("FormatValue(%v, %q) = %q, want %q", tt.v, tt.unit, got, tt.want)
		}
	}
}

// Every ratio is charted: a job's extra metrics get their own bars.
func TestSVGExtraRows(t *testing.T) {
	r := sampleResults()
	r.Jobs = r.Jobs[:1]
	r.Jobs[0].Extra = []Extra{
		{Metric: Metric{Name: "resume_ms", Unit: "ms"}, Ratio: Summary{Median: 40, Min: 30, Max: 50}},
		{Metric: Metric{Name: "not_both_sides", Unit: "ms"}}, // no ratio: no bar
	}
	var b bytes.Buffer
	if err := r.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Fatalf("not XML: %v", err)
	}
	s := b.String()
	if n := strings.Count(s, "<rect"); n != 1+2 {
		t.Errorf("%d rects, want background + job + one extra", n)
	}
	for _, want := range []string{"└ resume_ms", "40.0× [30.0–50.0]"} {
		if !strings.Contains(s, want) {
			t.Errorf("SVG lacks %q", want)
		}
	}
	if strings.Contains(s, "not_both_sides") {
		t.Error("an extra without a ratio got a bar")
	}
}

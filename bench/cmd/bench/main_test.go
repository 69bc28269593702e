package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/bench/internal/harness"
	"github.com/ferryml/ferry/internal/testutil/pyenv"
)

func TestMain(m *testing.M) {
	harness.LaunchMain()
	os.Exit(m.Run())
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr error
		check   func(*config) string
	}{
		{"quick defaults", []string{"-mode", "quick"}, nil, func(c *config) string {
			if c.pairs != 2 || c.warmup != 1 || c.results != filepath.Join("bench/work", "results-quick") || c.storageSize != "64MiB" {
				return "wrong quick defaults"
			}
			return ""
		}},
		{"full defaults", []string{"-mode", "full"}, nil, func(c *config) string {
			if c.pairs != 3 || c.results != "bench/results" || c.storageSize != "512MiB" {
				return "wrong full defaults"
			}
			return ""
		}},
		{"overrides", []string{"-mode", "full", "-pairs", "2", "-only", "^tok", "-results", "x", "-alpaca", "a.json"}, nil, func(c *config) string {
			if c.pairs != 2 || c.results != "x" || c.alpaca != "a.json" || !c.only.MatchString("tokenize") || c.only.MatchString("dataprep") {
				return "overrides not applied"
			}
			return ""
		}},
		{"no mode", nil, errUsage, nil},
		{"bad mode", []string{"-mode", "fast"}, errUsage, nil},
		{"zero pairs", []string{"-mode", "quick", "-pairs", "-1"}, errUsage, nil},
		{"bad regexp", []string{"-mode", "quick", "-only", "("}, errUsage, nil},
		{"extra arg", []string{"-mode", "quick", "x"}, errUsage, nil},
		{"help", []string{"-h"}, flag.ErrHelp, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c, err := parseFlags(tt.args, &stderr)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v (stderr %q)", err, tt.wantErr, stderr.String())
			}
			if err == nil && tt.check != nil {
				if msg := tt.check(c); msg != "" {
					t.Errorf("%s: %+v", msg, c)
				}
			}
		})
	}
}

func TestDefaultPython(t *testing.T) {
	t.Setenv("FERRY_PYTHON", "/p/python3")
	c, err := parseFlags([]string{"-mode", "quick"}, io.Discard)
	if err != nil || c.python != "/p/python3" {
		t.Errorf("-python default = %q (%v), want $FERRY_PYTHON", c.python, err)
	}
}

func TestHasFlag(t *testing.T) {
	goHelp := "Usage of dataprep:\n  -eos string\n    \tEOS token\n  -workers int\n  -pad-id int\n  -quiet\n"
	gnuHelp := "  --seq-len=N   length\n  --out DIR, -o DIR\n  [--mode pad|pack]\n"
	for _, tt := range []struct {
		help, name string
		want       bool
	}{
		{goHelp, "eos", true}, {goHelp, "workers", true}, {goHelp, "quiet", true},
		{goHelp, "pad", false}, {goHelp, "pad-id", true}, {goHelp, "wor", false},
		{gnuHelp, "seq-len", true}, {gnuHelp, "out", true}, {gnuHelp, "mode", true}, {gnuHelp, "seq", false},
	} {
		if got := hasFlag(tt.help, tt.name); got != tt.want {
			t.Errorf("hasFlag(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
	if got := requireFlags(goHelp, "dataprep", "eos", "ranks", "out"); got != "dataprep has no --ranks, --out flag yet" {
		t.Errorf("requireFlags = %q", got)
	}
}

func TestParseAlpacaAndFormat(t *testing.T) {
	arr := `[{"instruction": "Add.", "input": "1 2", "output": "3"}, {"instruction": "Hi", "output": "Hello"}]`
	jsonl := "{\"instruction\": \"Add.\", \"input\": \"1 2\", \"output\": \"3\"}\n\n{\"instruction\": \"Hi\", \"input\": \"\", \"output\": \"Hello\"}\n"
	for name, in := range map[string]string{"array": arr, "jsonl": jsonl} {
		recs, err := parseAlpaca(name, []byte(in))
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 {
			t.Fatalf("%s: %d records", name, len(recs))
		}
		if got, want := recs[0].format("<|endoftext|>"), "### Instruction:\nAdd.\n\n### Input:\n1 2\n\n### Response:\n3<|endoftext|>"; got != want {
			t.Errorf("%s: format = %q, want %q", name, got, want)
		}
		if got, want := recs[1].format("</s>"), "### Instruction:\nHi\n\n### Response:\nHello</s>"; got != want {
			t.Errorf("%s: format without input = %q, want %q", name, got, want)
		}
	}
	for _, bad := range []string{"", "[]", "[{", "{\"instruction\": 1}\n", "{}\nnot json\n"} {
		if _, err := parseAlpaca("bad.json", []byte(bad)); err == nil {
			t.Errorf("parseAlpaca(%q) succeeded", bad)
		}
	}
}

func testEnv(t *testing.T) *env {
	t.Helper()
	c := &config{mode: "quick", work: t.TempDir(), threads: 2}
	return &env{c: c, logf: t.Logf, built: map[string]string{}, why: map[string]string{}, tools: map[string]string{}}
}

func TestWriteTextsCycles(t *testing.T) {
	e := testEnv(t)
	recs := []record{{Instruction: "a", Output: "b"}, {Instruction: "c", Input: "d", Output: "e"}}
	one := int64(len(recs[0].format("E")))
	path, n, size, err := e.writeTexts("t.jsonl", recs, "E", 10*one)
	if err != nil {
		t.Fatal(err)
	}
	if size < 10*one || n < 2 {
		t.Errorf("%d lines, %d bytes: want at least %d bytes", n, size, 10*one)
	}
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != n {
		t.Fatalf("%d lines in file, reported %d", len(lines), n)
	}
	var v struct{ Text string }
	if err := json.Unmarshal([]byte(lines[3]), &v); err != nil || v.Text != recs[1].format("E") {
		t.Errorf("line 4 = %q (%v), want record 2 again", v.Text, err)
	}
	// minBytes 0: every record exactly once.
	if _, n, _, err := e.writeTexts("u.jsonl", recs, "E", 0); err != nil || n != 2 {
		t.Errorf("n = %d, err = %v", n, err)
	}
}

func TestCorpusSubset(t *testing.T) {
	e := testEnv(t)
	t.Chdir("../../..")
	path, n, size, err := e.corpus(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 || size > 64<<10 {
		t.Errorf("%d lines, %d bytes, want <= 64 KiB", n, size)
	}
	b, _ := os.ReadFile(path)
	if got := bytes.Count(b, []byte("\n")); got != n {
		t.Errorf("%d lines written, reported %d", got, n)
	}
	_, nAll, sizeAll, err := e.corpus(0)
	if err != nil {
		t.Fatal(err)
	}
	if nAll != 7439 || sizeAll != 4655750 {
		t.Errorf("whole corpus: %d lines, %d bytes; testdata/tokenizers/README.txt says 7,439 and 4,655,750", nAll, sizeAll)
	}
}

func TestCompareIDs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a", "{\"ids\":[1,2,3]}\n{\"ids\":[]}\n{\"ids\":[4]}\n")
	b := write("b", "{\"ids\": [1, 2, 3]}\n{\"ids\": []}\n{\"ids\": [4]}\n{\"bench\": {\"x\": 1}}\n")
	msg, err := compareIDs(a, b, "HF tokenizers")
	if err != nil || !strings.Contains(msg, "identical to HF tokenizers on all 3 lines (4 tokens)") {
		t.Errorf("identical: %q, %v", msg, err)
	}
	c := write("c", "{\"ids\":[1,2,3]}\n{\"ids\":[]}\n{\"ids\":[5]}\n")
	if msg, err := compareIDs(a, c, "Gigatoken"); err == nil || !strings.Contains(msg, "line 3 differs at token 0: ferry [4], Gigatoken [5]") {
		t.Errorf("different: %q, %v", msg, err)
	}
	d := write("d", "{\"ids\":[1,2,3]}\n{\"ids\":[]}\n")
	if _, err := compareIDs(a, d, "HF tokenizers"); err == nil {
		t.Error("different line counts accepted")
	}
	e := write("e", "{\"ids\":[1,2,3,9]}\n{\"ids\":[]}\n{\"ids\":[4]}\n")
	if msg, err := compareIDs(a, e, "HF tokenizers"); err == nil || !strings.Contains(msg, "line 1 differs at token 3") {
		t.Errorf("longer: %q, %v", msg, err)
	}
	f := write("f", "{\"nope\":[1]}\n{\"ids\":[]}\n{\"ids\":[4]}\n")
	if _, err := compareIDs(a, f, "HF tokenizers"); err == nil {
		t.Error("line without ids accepted")
	}
}

func TestCheckShards(t *testing.T) {
	dir := t.TempDir()
	files := []map[string]any{}
	for r := 0; r < 16; r++ {
		name := filepath.Join(dir, "rank-"+string(rune('a'+r))+".arrow")
		os.WriteFile(name, make([]byte, r+1), 0o644)
		files = append(files, map[string]any{"path": filepath.Base(name), "bytes": r + 1})
	}
	man := func(tokens int, files []map[string]any) {
		b, _ := json.Marshal(map[string]any{"ranks": 16, "unique_rows": 10, "files": files,
			"stats": map[string]any{"records_read": 10, "records_skipped": 0, "tokens": tokens}})
		os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
	}
	hf := filepath.Join(t.TempDir(), "hf.out")
	os.WriteFile(hf, []byte(`{"bench": {"lines": 10, "tokens": 500}}`+"\n"), 0o644)

	man(500, files)
	if msg, err := checkShards(dir, hf, "pack"); err != nil || !strings.Contains(msg, "= HF's token count") {
		t.Errorf("pack ok: %q, %v", msg, err)
	}
	man(499, files)
	if _, err := checkShards(dir, hf, "pack"); err == nil {
		t.Error("token count mismatch accepted in pack mode")
	}
	if _, err := checkShards(dir, hf, "pad"); err != nil {
		t.Errorf("pad mode compares records only: %v", err)
	}
	bad := append([]map[string]any(nil), files...)
	bad[3] = map[string]any{"path": files[3]["path"], "bytes": 99}
	man(500, bad)
	if _, err := checkShards(dir, hf, "pad"); err == nil {
		t.Error("wrong shard size accepted")
	}
	man(500, files[:15])
	if _, err := checkShards(dir, hf, "pad"); err == nil {
		t.Error("15 files for 16 ranks accepted")
	}
	os.Remove(filepath.Join(dir, "manifest.json"))
	if _, err := checkShards(dir, hf, "pad"); err == nil {
		t.Error("missing manifest accepted")
	}
}

// fakeTokenize stands in for bench/tokenize (and, with no ids subcommand
// to offer, for bin/dataprep): its ids subcommand runs the HF anchor
// itself, so the harness must find identical IDs.
const fakeTokenize = `#!/bin/sh
if [ "$1" != ids ]; then echo "usage: dataprep (fake)" >&2; exit 2; fi
shift
args=""
for a in "$@"; do
	case "$a" in --help) printf '  -tokenizer path\n  -threads int\n'; exit 0;; esac
done
tok=""; in=""
while [ $# -gt 0 ]; do
	case "$1" in
	--tokenizer) tok=$2; shift 2;;
	--threads) export RAYON_NUM_THREADS=$2; shift 2;;
	*) in=$1; shift;;
	esac
done
exec "$FERRY_BENCH_TEST_PYTHON" "$REPO/bench/anchors/hf_tokenize.py" --tokenizer "$tok" "$in"
`

// TestRunEndToEnd runs the harness on one real tokenizer job, with the real
// HF anchor (HF tokenizers' Python binding, from the test venv) on both
// sides, and checks what it writes.
func TestRunEndToEnd(t *testing.T) {
	py := pyenv.Python(t, "tokenizers")
	t.Chdir("../../..")
	repo, _ := os.Getwd()
	t.Setenv("REPO", repo)
	t.Setenv("FERRY_BENCH_TEST_PYTHON", py)
	bin, work, results := t.TempDir(), t.TempDir(), t.TempDir()
	for _, name := range []string{"tokenize", "dataprep"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(fakeTokenize), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-mode", "quick", "-bin", bin, "-work", work, "-results", results,
		"-python", py, "-pairs", "2", "-warmup", "0", "-threads", "1",
		"-only", `^tokenize qwen2\.5 corpus 1T$`}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "tokenize qwen2.5 corpus 1T") {
		t.Errorf("table lacks the job:\n%s", stdout.String())
	}
	jsons, _ := filepath.Glob(filepath.Join(results, "*-quick.json"))
	if len(jsons) != 1 {
		t.Fatalf("results files %v", jsons)
	}
	f, _ := os.Open(jsons[0])
	defer f.Close()
	res, err := harness.ReadResults(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 {
		t.Fatalf("%d jobs in results, want 1", len(res.Jobs))
	}
	j := res.Jobs[0]
	if j.Status != harness.StatusOK || j.Pairs != 2 || len(j.Ratios) != 2 || len(j.Ferry.Samples) != 2 {
		t.Fatalf("job %+v", j)
	}
	if !regexp.MustCompile(`^token IDs identical to HF tokenizers on all [1-9][0-9]* lines`).MatchString(j.Check) {
		t.Errorf("check = %q", j.Check)
	}
	if j.Anchor.PeakRSSBytes < 10<<20 || j.Ferry.PeakRSSBytes < 10<<20 {
		t.Errorf("peak RSS %d / %d: a process with a tokenizer uses more than 10 MiB", j.Ferry.PeakRSSBytes, j.Anchor.PeakRSSBytes)
	}
	if res.Machine.CPUs < 1 || res.Machine.Tools["tokenizers"] == "" || res.Machine.Go == "" {
		t.Errorf("machine %+v", res.Machine)
	}
	for _, name := range []string{"report.md", "chart.svg"} {
		b, err := os.ReadFile(filepath.Join(results, name))
		if err != nil || !bytes.Contains(b, []byte("tokenize qwen2.5 corpus 1T")) {
			t.Errorf("%s: %v, or lacks the job", name, err)
		}
	}
	// -list shows every job and why the others cannot run.
	stdout.Reset()
	if err := run(context.Background(), []string{"-mode", "quick", "-bin", bin, "-work", work, "-results", results,
		"-python", py, "-list"}, &stdout, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"dataprep qwen2.5 pack", "not available: dataprep has no", "ckptmerge vs cp",
		"storage S3 upload 64MiB", "feed direct per batch", "seed path 2 ranks first batch", "feed vs mosaic per batch",
		"feed vs litdata per batch", "feed conversion vs litdata", "tokenize qwen2.5 alpaca transformers per row",
		"ckptmerge vs accelerate merge-weights", "ckptmerge vs torch consolidate_safetensors_files", "ckptmerge vs dd direct-write floor",
		"tokenize qwen2.5 alpaca 1T gigatoken "} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("-list lacks %q:\n%s", want, stdout.String())
		}
	}
	// Quick mode runs Gigatoken for the seeds' tokenizers only.
	if strings.Contains(stdout.String(), "tokenize tinyllama alpaca 1T gigatoken") {
		t.Errorf("-list: quick mode has a Gigatoken row for TinyLlama:\n%s", stdout.String())
	}
}

// TestGigatokenJob: the Gigatoken row runs ferry's side of the HF row
// against gigatoken_tokenize.py, checks the IDs against ferry's, and is
// unavailable where Gigatoken is not installed or refuses the tokenizer.
func TestGigatokenJob(t *testing.T) {
	e := &env{c: &config{python: "py", anchors: "/anchors", work: t.TempDir(), mode: "full"}, tools: map[string]string{"gigatoken": "0.10.0"}}
	hf := harness.Job{Name: "tokenize qwen2.5 alpaca 1T", Ferry: harness.Side{Label: "ferry"}}
	j := e.gigatokenJob(hf, "qwen2.5", "in.jsonl", "tok/qwen2.5", "ferry.jsonl")
	if j.Name != "tokenize qwen2.5 alpaca 1T gigatoken" || j.Unavailable != "" || j.Ferry.Label != "ferry" ||
		!strings.HasPrefix(j.Anchor.Label, "Gigatoken 0.10.0 ") || j.Check == nil {
		t.Errorf("job %+v", j)
	}
	want := []string{"py", gigatokenTokenizePy, "--tokenizer", "tok/qwen2.5", "--bench-line", "in.jsonl"}
	if !slices.Equal(j.Anchor.Cmd.Argv, want) || !slices.Contains(j.Anchor.Cmd.Env, "PYTHONPATH=/anchors") {
		t.Errorf("anchor command %q, env %q", j.Anchor.Cmd.Argv, j.Anchor.Cmd.Env)
	}
	ferryOut := filepath.Join(e.c.work, "ferry.jsonl")
	j = e.gigatokenJob(hf, "qwen2.5", "in.jsonl", "tok/qwen2.5", ferryOut)
	if err := os.WriteFile(ferryOut, []byte("{\"ids\":[1,2]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(j.Anchor.Cmd.Stdout, []byte("{\"ids\":[1,2]}\n{\"bench\":{\"encode_s\":1}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if msg, err := j.Check(); err != nil || msg != "token IDs identical to Gigatoken on all 1 lines (2 tokens)" {
		t.Errorf("check: %q, %v", msg, err)
	}
	if j := e.gigatokenJob(hf, "smollm2", "in.jsonl", "tok/smollm2", "ferry.jsonl"); !strings.Contains(j.Unavailable, "does not load SmolLM2's") {
		t.Errorf("smollm2: unavailable %q", j.Unavailable)
	}
	e.tools["gigatoken"] = ""
	if j := e.gigatokenJob(hf, "qwen2.5", "in.jsonl", "tok/qwen2.5", "ferry.jsonl"); !strings.Contains(j.Unavailable, "not installed in /anchors") {
		t.Errorf("not installed: unavailable %q", j.Unavailable)
	}
}

func TestTrimToolName(t *testing.T) {
	for _, tt := range [][3]string{
		{"cp", "cp (GNU coreutils) 9.1", "(GNU coreutils) 9.1"},
		{"python", "Python 3.11.2", "3.11.2"},
		{"go", "go1.26.0", "go1.26.0"},
		{"torch", "torchvision 1", "torchvision 1"},
	} {
		if got := trimToolName(tt[0], tt[1]); got != tt[2] {
			t.Errorf("trimToolName(%q, %q) = %q, want %q", tt[0], tt[1], got, tt[2])
		}
	}
}

// The new anchors' checks read both sides' bench lines and refuse
// disagreeing counts.
func TestAnchorChecks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, line string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("log line\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := write("f", `{"bench": {"ranks": 8, "rows": 52002, "lines": 10, "tokens": 1000}}`)
	same := write("same", `{"bench": {"ranks": 8, "rows": 52002, "lines": 10, "tokens": 1000}}`)
	rows := write("rows", `{"bench": {"ranks": 8, "rows": 52001, "lines": 10, "tokens": 999}}`)
	ranks := write("ranks", `{"bench": {"ranks": 2, "rows": 52002}}`)
	none := write("none", `no bench line`)
	for _, tt := range []struct {
		name    string
		check   func() (string, error)
		wantErr bool
	}{
		{"seed path ok", func() (string, error) { return checkSeedPath(f, same, 8) }, false},
		{"seed path rows differ", func() (string, error) { return checkSeedPath(f, rows, 8) }, true},
		{"seed path ranks", func() (string, error) { return checkSeedPath(f, ranks, 8) }, true},
		{"seed path no line", func() (string, error) { return checkSeedPath(f, none, 8) }, true},
		{"convert ok", func() (string, error) { return checkConvert(f, same) }, false},
		{"convert rows differ", func() (string, error) { return checkConvert(f, rows) }, true},
		{"counts ok", func() (string, error) { return compareCounts(f, same) }, false},
		{"counts differ", func() (string, error) { return compareCounts(f, rows) }, true},
		{"counts missing file", func() (string, error) { return compareCounts(f, filepath.Join(dir, "nope")) }, true},
	} {
		msg, err := tt.check()
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: %q, %v; want error %v", tt.name, msg, err, tt.wantErr)
		}
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/invariants"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/internal/testutil/arrowcheck"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// TestMain lets the test binary act as the dataprep command (for the
// SIGKILL test) when FERRY_DATAPREP_MAIN=1.
func TestMain(m *testing.M) {
	if os.Getenv("FERRY_DATAPREP_MAIN") == "1" {
		main()
		return
	}
	// Loading a tokenizer takes about a second; load each once per test binary.
	var mu sync.Mutex
	cache := map[string]*tokenize.Tokenizer{}
	loadTokenizer = func(path string) (*tokenize.Tokenizer, error) {
		mu.Lock()
		defer mu.Unlock()
		if abs, err := filepath.Abs(path); err == nil {
			path = abs
		}
		if t, ok := cache[path]; ok {
			return t, nil
		}
		t, err := tokenize.Load(path)
		if err == nil {
			cache[path] = t
		}
		return t, err
	}
	os.Exit(m.Run())
}

var (
	alpacaDir = filepath.Join("..", "..", "testdata", "alpaca")
	qwenDir   = filepath.Join(tokDir, "qwen2.5")
	llamaDir  = filepath.Join(tokDir, "llama3.1")
)

type model struct {
	name, dir, eos string
	eosID          int32
}

var (
	qwen  = model{"qwen2.5", qwenDir, "<|endoftext|>", 151643}
	llama = model{"llama3.1", llamaDir, "<|end_of_text|>", 128001}
)

// dataprep runs the command in-process.
func dataprep(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var o, e bytes.Buffer
	err = dispatch(context.Background(), args, nil, &o, &e)
	return o.String(), e.String(), err
}

func mustPrep(t *testing.T, args ...string) string {
	t.Helper()
	out, stderr, err := dataprep(t, args...)
	if err != nil {
		t.Fatalf("dataprep %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return out
}

func unzstd(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	b, err := d.DecodeAll(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func goldens(t *testing.T, name string) [][]int32 {
	t.Helper()
	data := unzstd(t, filepath.Join("testdata", "golden-"+name+".jsonl.zst"))
	var out [][]int32
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var v struct{ IDs []int32 }
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v.IDs)
	}
	return out
}

// allRows has pyarrow check dir (arrowcheck.CheckDir), then opens every
// shard of dir and calls fn for each row with its global position.
func allRows(t *testing.T, dir string, fn func(m *shard.Manifest, pos int, r *shard.Row)) *shard.Manifest {
	t.Helper()
	arrowcheck.CheckDir(t, dir)
	m, err := shard.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	var row shard.Row
	for rank := range m.Ranks {
		_, rd, err := shard.OpenDir(dir, rank, shard.WithChecksum())
		if err != nil {
			t.Fatal(err)
		}
		for j := range rd.NumRows() {
			if err := rd.Row(j, &row); err != nil {
				t.Fatal(err)
			}
			fn(m, j*m.Ranks+rank, &row)
		}
		rd.Close()
	}
	return m
}

// TestSeedParity: --mode pad --labels copy --seq-len 1024 gives, row for
// row, what HF tokenizers gives for the seeds' tokenizer(text,
// truncation=True, max_length=1024, padding="max_length") with labels =
// input_ids (goldens made by testdata/make-goldens.js).
func TestSeedParity(t *testing.T) {
	for _, md := range []model{qwen, llama} {
		for _, data := range []struct{ name, file string }{
			{"en", filepath.Join(alpacaDir, "alpaca_en_demo.json.zst")},
			{"zh", filepath.Join(alpacaDir, "alpaca_zh_demo.json.zst")},
			{"long", filepath.Join("testdata", "alpaca_long.json.zst")},
		} {
			name := md.name + "/" + data.name
			if invariants.Race && name != "qwen2.5/en" && name != "llama3.1/zh" && name != "llama3.1/long" {
				continue // see prep_race_test.go
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				want := goldens(t, data.name+"."+md.name)
				dir := t.TempDir()
				out := mustPrep(t, "--input", data.file, "--tokenizer", md.dir, "--eos", md.eos, "--pad", md.eos,
					"--mode", "pad", "--labels", "copy", "--seq-len", "1024", "--ranks", "3", "--quiet", "--json", "--out", dir)
				seen := make([]int, len(want))
				truncated := 0
				for _, w := range want {
					if len(w) == 1024 {
						truncated++
					}
				}
				m := allRows(t, dir, func(m *shard.Manifest, pos int, r *shard.Row) {
					s := r.Segments[0].Sample
					if pos < m.UniqueRows {
						seen[s]++
					}
					g := want[s]
					full := append(slices.Clone(g), slices.Repeat([]int32{md.eosID}, 1024-len(g))...)
					if !slices.Equal(r.InputIDs, full) {
						t.Fatalf("sample %d: input_ids differ from HF\n got %v\nwant %v", s, r.InputIDs[:min(40, len(g))], g[:min(40, len(g))])
					}
					if int(r.Length) != len(g) {
						t.Fatalf("sample %d: length %d, HF attention_mask sum %d", s, r.Length, len(g))
					}
					if !slices.Equal(r.Labels, r.InputIDs) {
						t.Fatalf("sample %d: labels != input_ids under --labels copy", s)
					}
				})
				for s, c := range seen {
					if c != 1 {
						t.Fatalf("sample %d appears %d times", s, c)
					}
				}
				if m.Stats.RecordsTruncated != int64(truncated) || m.UniqueRows != len(want) {
					t.Errorf("truncated %d (HF: %d), unique rows %d (records %d)", m.Stats.RecordsTruncated, truncated, m.UniqueRows, len(want))
				}
				var s prep.Summary
				if err := json.Unmarshal([]byte(out), &s); err != nil {
					t.Fatalf("--json output %q: %v", out, err)
				}
				if s.RecordsRead != int64(len(want)) || s.RowsPerRank != m.RowsPerRank || s.Tokens != m.Stats.Tokens {
					t.Errorf("summary %+v disagrees with the manifest", s)
				}
			})
		}
	}
}

// TestPack checks the pack-mode invariants against the HF goldens: every
// record exactly once, its tokens contiguous and equal to its pad-mode
// tokens, position ids restarting, first label −100, prompt masked under
// mask-prompt, and the efficiency in the manifest and summary.
func TestPack(t *testing.T) {
	for _, md := range []model{qwen, llama} {
		t.Run(md.name, func(t *testing.T) {
			want := goldens(t, "en."+md.name)
			dir := t.TempDir()
			out := mustPrep(t, "--input", filepath.Join(alpacaDir, "alpaca_en_demo.json.zst"), "--tokenizer", md.dir,
				"--eos", md.eos, "--mode", "pack", "--labels", "mask-prompt", "--ranks", "4", "--seed", "7", "--quiet", "--json", "--out", dir)
			seen := make([]int, len(want))
			var tokens int64
			m := allRows(t, dir, func(m *shard.Manifest, pos int, r *shard.Row) {
				if pos < m.UniqueRows {
					tokens += int64(r.Length)
				}
				for _, sg := range r.Segments {
					if pos < m.UniqueRows {
						seen[sg.Sample]++
					}
					g := want[sg.Sample]
					ids := r.InputIDs[sg.Start : sg.Start+sg.Length]
					if !slices.Equal(ids, g) {
						t.Fatalf("sample %d: packed tokens differ from its pad-mode tokens", sg.Sample)
					}
					labs := r.Labels[sg.Start : sg.Start+sg.Length]
					if labs[0] != shard.IgnoreIndex {
						t.Fatalf("sample %d: first label %d, want -100", sg.Sample, labs[0])
					}
					// The response (after "### Response:\n") carries loss, the prompt not.
					k := slices.IndexFunc(labs, func(l int32) bool { return l != shard.IgnoreIndex })
					if k < 0 || labs[len(labs)-1] != md.eosID || k > len(labs)-1 {
						t.Fatalf("sample %d: no loss on the response (first loss at %d)", sg.Sample, k)
					}
					if !slices.Equal(labs[k:], ids[k:]) {
						t.Fatalf("sample %d: response labels differ from ids", sg.Sample)
					}
					for j, p := range r.PositionIDs[sg.Start : sg.Start+sg.Length] {
						if p != int32(j) {
							t.Fatalf("sample %d: position id %d at %d", sg.Sample, p, j)
						}
					}
				}
				for j := r.Length; j < int32(m.SeqLen); j++ {
					if r.Labels[j] != shard.IgnoreIndex || r.InputIDs[j] != md.eosID {
						t.Fatalf("padding at %d: id %d label %d", j, r.InputIDs[j], r.Labels[j])
					}
				}
			})
			for s, c := range seen {
				if c != 1 {
					t.Fatalf("sample %d appears %d times", s, c)
				}
			}
			eff := float64(tokens) / float64(m.UniqueRows*m.SeqLen)
			if m.Stats.Tokens != tokens || m.Stats.Efficiency != eff {
				t.Errorf("stats tokens %d eff %v, counted %d %v", m.Stats.Tokens, m.Stats.Efficiency, tokens, eff)
			}
			var s prep.Summary
			if err := json.Unmarshal([]byte(out), &s); err != nil || s.Efficiency != eff {
				t.Errorf("summary efficiency %v (err %v), want %v", s.Efficiency, err, eff)
			}
			if eff < 0.95 {
				t.Errorf("packing efficiency %.3f < 0.95", eff)
			}
			t.Logf("%d records -> %d rows, efficiency %.4f", len(want), m.UniqueRows, eff)
		})
	}
}

// TestSplitLong: with --split-long no token is lost: the pieces of each
// record, in order, are its full tokenization.
func TestSplitLong(t *testing.T) {
	dir := t.TempDir()
	mustPrep(t, "--input", filepath.Join("testdata", "alpaca_long.json.zst"), "--tokenizer", qwen.dir, "--eos", qwen.eos,
		"--mode", "pack", "--split-long", "--seq-len", "256", "--quiet", "--out", dir)
	type piece struct{ ids []int32 }
	pieces := map[int64][]piece{}
	m := allRows(t, dir, func(m *shard.Manifest, pos int, r *shard.Row) {
		if pos >= m.UniqueRows {
			return
		}
		for _, sg := range r.Segments {
			pieces[sg.Sample] = append(pieces[sg.Sample], piece{ids: slices.Clone(r.InputIDs[sg.Start : sg.Start+sg.Length])})
		}
	})
	if m.Stats.RecordsTruncated != 0 || m.Stats.RecordsSplit == 0 {
		t.Fatalf("truncated %d split %d", m.Stats.RecordsTruncated, m.Stats.RecordsSplit)
	}
	res, err := dataset.Parse("long", unzstd(t, filepath.Join("testdata", "alpaca_long.json.zst")), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pieces) != len(res.Records) {
		t.Fatalf("%d samples, want %d", len(pieces), len(res.Records))
	}
	tok, err := loadTokenizer(qwen.dir)
	if err != nil {
		t.Fatal(err)
	}
	key := func(ids []int32) string { return fmt.Sprint(ids) }
	for i, rec := range res.Records {
		text, _ := dataset.Alpaca().Append(nil, &rec, "", qwen.eos)
		full := tok.Encode(string(text), true)
		var want, got []string
		for k := 0; k < len(full); k += 256 {
			want = append(want, key(full[k:min(k+256, len(full))]))
		}
		for _, p := range pieces[int64(i)] {
			got = append(got, key(p.ids))
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("sample %d: pieces %d differ from the full tokenization cut every 256 tokens (%d pieces)", i, len(got), len(want))
		}
	}
}

// TestWorkersIdentical: the output is byte-identical for any worker count.
func TestWorkersIdentical(t *testing.T) {
	var dirs []string
	for _, mode := range []string{"pad", "pack"} {
		var sums []string
		for _, w := range []string{"1", "3"} {
			dir := t.TempDir()
			dirs = append(dirs, dir)
			mustPrep(t, "--input", filepath.Join(alpacaDir, "alpaca_tiny.json"), "--tokenizer", qwen.dir,
				"--mode", mode, "--seq-len", "256", "--ranks", "3", "--workers", w, "--batch-rows", "7", "--quiet", "--out", dir)
			m, err := shard.ReadManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			var s []string
			for _, f := range m.Files {
				s = append(s, f.SHA256)
			}
			sums = append(sums, strings.Join(s, ","))
		}
		if sums[0] != sums[1] {
			t.Errorf("%s: shards differ between --workers 1 and 3", mode)
		}
	}
	arrowcheck.CheckDir(t, dirs...)
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const good = `{"instruction": "Say hi", "input": "", "output": "hi"}`

func TestBadInput(t *testing.T) {
	existing := t.TempDir()
	mustPrep(t, "--input", writeFile(t, "ok.json", "["+good+","+good+"]"), "--tokenizer", qwen.dir, "--quiet", "--out", existing)
	arrowcheck.CheckDir(t, existing)
	for _, tc := range []struct {
		name    string
		input   string
		args    []string
		wantErr error
		wantIn  []string
	}{
		{"invalid json", "[" + good + ", {\"instruction\": }]", nil, dataset.ErrSyntax, []string{"bad.json: record 1 (byte ", "line 1)"}},
		{"trailing comma", "[\n" + good + ",\n]\n", nil, dataset.ErrSyntax, []string{"record 1 (byte 58, line 3)", "trailing comma"}},
		{"missing instruction", "[" + good + ",\n{\"output\": \"x\"}]", nil, dataset.ErrField, []string{"record 1 (byte 57, line 2)", `"instruction" is missing`}},
		{"missing output", "[{\"instruction\": \"x\"}]", nil, dataset.ErrField, []string{"record 0", `"output" is missing`}},
		{"null field", "[{\"instruction\": \"x\", \"output\": null}]", nil, dataset.ErrField, []string{"record 0", `"output" is null`}},
		{"non-string field", "[{\"instruction\": [\"x\"], \"output\": \"y\"}]", nil, dataset.ErrField, []string{"record 0", `"instruction" is an array`}},
		{"invalid utf-8", "[" + good + ",{\"instruction\": \"\xc3\x28\", \"output\": \"y\"}]", nil, dataset.ErrUTF8, []string{"record 1", "invalid UTF-8"}},
		{"empty file", "", nil, dataset.ErrEmpty, []string{"bad.json is empty"}},
		{"empty array", "[]", nil, dataset.ErrEmpty, []string{"no records"}},
		{"zero usable records", "{\"output\": \"x\"}\n{\"instruction\": 1, \"output\": \"x\"}\n", []string{"--on-bad-record", "skip"}, nil, []string{"no usable records (2 skipped)"}},
		{"more ranks than rows", "[" + good + "," + good + "]", []string{"--ranks", "3"}, shard.ErrTooFewRows, []string{"2 rows for 3 ranks"}},
		{"seq-len too small", "[" + good + "]", []string{"--seq-len", "7"}, errUsage, []string{"--seq-len 7 is too small for the template alpaca"}},
		{"existing output", "[" + good + "]", []string{"--out", existing}, shard.ErrExists, []string{"manifest.json (use --force"}},
		{"unknown eos", "[" + good + "]", []string{"--eos", "<nope>"}, errUsage, []string{`--eos "<nope>" is not a token`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := writeFile(t, "bad.json", tc.input)
			args := append([]string{"--input", in, "--tokenizer", qwen.dir, "--quiet", "--out", filepath.Join(t.TempDir(), "out")}, tc.args...)
			_, _, err := dataprep(t, args...)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("err %v, want %v", err, tc.wantErr)
			}
			for _, w := range tc.wantIn {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestSkipCounted(t *testing.T) {
	in := writeFile(t, "mixed.jsonl", good+"\n{\"instruction\": null, \"output\": \"x\"}\n"+good+"\n{broken\n"+good+"\n")
	dir := t.TempDir()
	_, stderr, err := dataprep(t, "--input", in, "--tokenizer", qwen.dir, "--on-bad-record", "skip", "--out", dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := shard.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats.RecordsRead != 5 || m.Stats.RecordsSkipped != 2 || m.UniqueRows != 3 {
		t.Fatalf("stats %+v, unique rows %d", m.Stats, m.UniqueRows)
	}
	for _, w := range []string{"skipped: ", "mixed.jsonl: record 1 (byte 55, line 2)", "record 3", "2 skipped"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, stderr)
		}
	}
	var samples []int64
	allRows(t, dir, func(m *shard.Manifest, pos int, r *shard.Row) { samples = append(samples, r.Segments[0].Sample) })
	slices.Sort(samples)
	if !slices.Equal(samples, []int64{0, 2, 4}) {
		t.Errorf("samples %v, want the input indices [0 2 4]", samples)
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--input", "x"},
		{"--input", "x", "--tokenizer", "y", "--out", "z", "--mode", "zip"},
		{"--input", "x", "--tokenizer", "y", "--out", "z", "--split-long"},
		{"--input", "x", "--tokenizer", "y", "--out", "z", "--on-bad-record", "maybe"},
	} {
		_, _, err := dataprep(t, args...)
		if !errors.Is(err, errUsage) {
			t.Errorf("%v: err %v, want errUsage", args, err)
		}
		if code := exitCode(context.Background(), err, &bytes.Buffer{}); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
	}
}

func TestInspect(t *testing.T) {
	dir := t.TempDir()
	mustPrep(t, "--input", filepath.Join(alpacaDir, "alpaca_tiny.json"), "--tokenizer", qwen.dir, "--eos", qwen.eos,
		"--mode", "pack", "--ranks", "2", "--quiet", "--out", dir)
	arrowcheck.CheckDir(t, dir)
	out := mustPrep(t, "inspect", dir, "--rank", "1", "--row", "0", "--verify")
	for _, w := range []string{"2 ranks", "mode       pack", "verify: 2 shards match", "rank 1 row 0 (global position 1)",
		`text    "### Instruction:\n`, `<|endoftext|>"`} {
		if !strings.Contains(out, w) {
			t.Errorf("inspect output lacks %q:\n%s", w, out)
		}
	}
	if _, _, err := dataprep(t, "inspect", dir, "--rank", "0", "--row", "99999"); !errors.Is(err, errUsage) {
		t.Errorf("row out of range: %v", err)
	}
}

// TestKilledRunLeavesNoManifest SIGKILLs dataprep at several points: the
// output directory must never hold a manifest.json afterwards.
func TestKilledRunLeavesNoManifest(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in := bigInput(t)
	committed := 0
	for i, delay := range []time.Duration{100 * time.Millisecond, 1000 * time.Millisecond, 2500 * time.Millisecond} {
		dir := filepath.Join(t.TempDir(), fmt.Sprint(i))
		cmd := exec.Command(exe, "--input", in, "--tokenizer", qwen.dir, "--ranks", "4", "--batch-rows", "64", "--quiet", "--out", dir)
		cmd.Env = append(os.Environ(), "FERRY_DATAPREP_MAIN=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		_ = cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		_, statErr := os.Stat(filepath.Join(dir, shard.ManifestName))
		switch {
		case err == nil && statErr != nil:
			t.Fatalf("run finished but left no manifest: %v", statErr)
		case statErr == nil:
			// The manifest is written last: a run killed after writing it
			// (while printing its summary, say) has committed, and its
			// output must be whole.
			committed++
			mustBeComplete(t, dir)
		}
	}
	t.Logf("%d of 3 runs committed before SIGKILL", committed)
	// Deterministic points: kill as soon as the first shard temp file
	// appears (mid-write), and as soon as the first shard is renamed into
	// place (some shards complete, others not, no manifest yet).
	firstTemp := func(names []string) bool { return len(names) > 0 }
	for _, point := range []struct {
		name string
		hit  func(names []string) bool
	}{
		{"first temp file", firstTemp},
		{"first complete shard", func(names []string) bool {
			return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "rank-") })
		}},
	} {
		dir := filepath.Join(t.TempDir(), "point")
		killAt(t, exe, dir, point.name, point.hit, "--input", in, "--tokenizer", qwen.dir, "--ranks", "4", "--workers", "1", "--batch-rows", "64", "--quiet", "--out", dir)
		if _, err := os.Stat(filepath.Join(dir, shard.ManifestName)); err == nil {
			t.Fatalf("killed at %s: manifest.json exists", point.name)
		}
	}
	// A killed run's leftovers do not block the next run (no --force needed).
	dir := filepath.Join(t.TempDir(), "again")
	killAt(t, exe, dir, "first temp file", firstTemp, "--input", in, "--tokenizer", qwen.dir, "--ranks", "2", "--workers", "1", "--batch-rows", "64", "--quiet", "--out", dir)
	mustPrep(t, "--input", in, "--tokenizer", qwen.dir, "--ranks", "2", "--quiet", "--out", dir)
	ents, _ := os.ReadDir(dir)
	if len(ents) != 4 {
		t.Errorf("after a killed run and a good one the directory holds %d entries, want 2 shards + %s + manifest", len(ents), shard.LossTokensName)
	}
	arrowcheck.CheckDir(t, dir)
}

// killAt runs dataprep (exe in FERRY_DATAPREP_MAIN mode) with args, polls
// the output directory dir every millisecond, and SIGKILLs the run as soon
// as hit(the names in dir) is true; the run must not end before that.
func killAt(t *testing.T, exe, dir, name string, hit func(names []string) bool, args ...string) {
	t.Helper()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), "FERRY_DATAPREP_MAIN=1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	for {
		select {
		case <-exited:
			t.Fatalf("%s: the run ended before the kill point", name)
		default:
		}
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if hit(names) {
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-exited
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// bigInput writes a larger input, the en demo file six times over as JSON
// Lines, so that a run takes long enough to be killed or interrupted midway.
func bigInput(t *testing.T) string {
	t.Helper()
	res, err := dataset.Parse("en", unzstd(t, filepath.Join(alpacaDir, "alpaca_en_demo.json.zst")), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	for range 6 {
		for _, r := range res.Records {
			b, _ := json.Marshal(map[string]string{"instruction": r.Instruction, "input": r.Input, "output": r.Output})
			buf.Write(b)
			buf.WriteByte('\n')
		}
	}
	return writeFile(t, "big.jsonl", buf.String())
}

// mustBeComplete checks that every shard a manifest lists is there, whole and
// with the checksum the manifest records, and that pyarrow reads it.
func mustBeComplete(t *testing.T, dir string) {
	t.Helper()
	m, err := shard.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for rank := range m.Ranks {
		_, r, err := shard.OpenDir(dir, rank, shard.WithChecksum())
		if err != nil {
			t.Fatalf("manifest.json exists but rank %d is not complete: %v", rank, err)
		}
		r.Close()
	}
	arrowcheck.CheckDir(t, dir)
}

// TestInterrupt: SIGINT exits with status 130 and leaves no manifest. The
// signal is sent only once the child has printed a progress line of its
// read or tokenize phase: main installs the handler before the job starts,
// so the handler is in place, and the job is still far from done.
func TestInterrupt(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in := bigInput(t)
	dir := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(exe, "--input", in, "--tokenizer", qwen.dir, "--ranks", "2", "--progress-every", "1ms", "--out", dir)
	cmd.Env = append(os.Environ(), "FERRY_DATAPREP_MAIN=1")
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read stderr to the end (the child must never block on it), and say
	// when the first progress line of an early phase arrives.
	var stderr strings.Builder
	running := make(chan struct{})
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		sc := bufio.NewScanner(pipe)
		seen := false
		for sc.Scan() {
			line := sc.Text()
			stderr.WriteString(line + "\n")
			if !seen && (strings.HasPrefix(line, "dataprep: read ") || strings.HasPrefix(line, "dataprep: tokenize ")) {
				seen = true
				close(running)
			}
		}
	}()
	select {
	case <-running:
	case <-readDone:
		_ = cmd.Wait()
		t.Fatalf("the child printed no read/tokenize progress line; stderr:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-readDone
	err = cmd.Wait()
	var ee *exec.ExitError
	if err == nil {
		t.Fatalf("the run finished before the interrupt: make the input larger; stderr:\n%s", stderr.String())
	}
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want status 130; stderr:\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "dataprep: interrupted; no result was written") {
		t.Errorf("stderr does not say the run was interrupted:\n%s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(dir, shard.ManifestName)); err == nil {
		t.Fatal("interrupted run left manifest.json")
	}
}

// TestUserTemplate: --template formats with a user file and mask-prompt
// masks exactly the text before {output}.
func TestUserTemplate(t *testing.T) {
	tmpl := writeFile(t, "t.txt", "Q: {instruction}{?input} [{input}]{/input}\nA: {output}{eos}")
	in := writeFile(t, "in.jsonl", `{"instruction": "Add 2 and 2", "input": "fast", "output": "4"}`+"\n")
	dir := t.TempDir()
	mustPrep(t, "--input", in, "--tokenizer", qwen.dir, "--eos", qwen.eos, "--template", tmpl, "--labels", "mask-prompt", "--seq-len", "64", "--quiet", "--out", dir)
	tok, err := loadTokenizer(qwen.dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("Q: Add 2 and 2 [fast]\nA: ", false)
	full := tok.Encode("Q: Add 2 and 2 [fast]\nA: 4<|endoftext|>", false)
	m := allRows(t, dir, func(m *shard.Manifest, pos int, r *shard.Row) {
		if !slices.Equal(r.InputIDs[:r.Length], full) {
			t.Fatalf("ids %v, want %v", r.InputIDs[:r.Length], full)
		}
		for j := range int(r.Length) {
			want := full[j]
			if j < len(prompt) {
				want = shard.IgnoreIndex
			}
			if r.Labels[j] != want {
				t.Fatalf("label %d = %d, want %d", j, r.Labels[j], want)
			}
		}
	})
	if !strings.HasPrefix(m.Template, "file:") || m.TemplateText == "" {
		t.Errorf("manifest template %q", m.Template)
	}
}

// TestSeveralInputFiles: a split spread over several files (JSON array,
// JSON Lines, zstd JSON Lines), named by a glob or by repeated --input, gives
// shards byte-identical to those of the same records in one file, and
// loss_tokens.u32 too; the manifest names the files.
func TestSeveralInputFiles(t *testing.T) {
	res, err := dataset.Parse("en", unzstd(t, filepath.Join(alpacaDir, "alpaca_en_demo.json.zst")), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	recs := make([]map[string]string, len(res.Records))
	for i, r := range res.Records {
		recs[i] = map[string]string{"instruction": r.Instruction, "input": r.Input, "output": r.Output}
	}
	dir := t.TempDir()
	jsonl := func(rs []map[string]string) []byte {
		var buf bytes.Buffer
		for _, r := range rs {
			b, _ := json.Marshal(r)
			buf.Write(b)
			buf.WriteByte('\n')
		}
		return buf.Bytes()
	}
	k := len(recs) / 3
	whole, _ := json.Marshal(recs)
	first, _ := json.Marshal(recs[:k])
	enc, _ := zstd.NewWriter(nil)
	third := enc.EncodeAll(jsonl(recs[2*k:]), nil)
	for name, data := range map[string][]byte{
		"one.json": whole, "train-0.json": first, "train-1.jsonl": jsonl(recs[k : 2*k]), "train-2.jsonl.zst": third,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--tokenizer", qwen.dir, "--eos", qwen.eos, "--seq-len", "256", "--mode", "pack", "--ranks", "3", "--quiet"}
	ref := filepath.Join(dir, "ref")
	mustPrep(t, append([]string{"--input", filepath.Join(dir, "one.json"), "--out", ref}, common...)...)
	glob := filepath.Join(dir, "glob")
	mustPrep(t, append([]string{"--input", filepath.Join(dir, "train-*"), "--out", glob}, common...)...)
	rep := filepath.Join(dir, "repeated")
	mustPrep(t, append([]string{"--input", filepath.Join(dir, "train-0.json"), "--input", filepath.Join(dir, "train-1.jsonl"),
		"--input", filepath.Join(dir, "train-2.jsonl.zst"), "--out", rep}, common...)...)
	refM, err := shard.ReadManifest(ref)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{glob, rep} {
		m, err := shard.ReadManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		if m.Stats.RecordsRead != refM.Stats.RecordsRead || !strings.Contains(m.Input, "train-1.jsonl") {
			t.Errorf("%s: records %d (want %d), input %q", out, m.Stats.RecordsRead, refM.Stats.RecordsRead, m.Input)
		}
		for _, f := range append(slices.Clone(refM.Files), shard.FileEntry{Path: shard.LossTokensName}) {
			a, _ := os.ReadFile(filepath.Join(ref, f.Path))
			b, _ := os.ReadFile(filepath.Join(out, f.Path))
			if len(a) == 0 || !bytes.Equal(a, b) {
				t.Errorf("%s: %s differs from the single-file run's", out, f.Path)
			}
		}
	}
	// --max-records: the first N records across the files (split="train[:N]").
	head := filepath.Join(dir, "head")
	mustPrep(t, append([]string{"--input", filepath.Join(dir, "train-*"), "--max-records", fmt.Sprint(k + 5), "--out", head}, common...)...)
	hm, err := shard.ReadManifest(head)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]bool{}
	allRows(t, head, func(m *shard.Manifest, pos int, r *shard.Row) {
		for _, s := range r.Segments {
			seen[s.Sample] = true
		}
	})
	if hm.Stats.RecordsRead != int64(k+5) || len(seen) != k+5 || !seen[int64(k+4)] || seen[int64(k+5)] {
		t.Errorf("--max-records %d: records_read %d, %d samples", k+5, hm.Stats.RecordsRead, len(seen))
	}
	_, _, err = dataprep(t, append([]string{"--input", filepath.Join(dir, "train-0.json"), "--max-records", fmt.Sprint(k + 1), "--out", filepath.Join(dir, "short")}, common...)...)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("has only %d records", k)) {
		t.Errorf("--max-records beyond the input: %v", err)
	}
	// A pattern that matches nothing stops the run before anything is written.
	_, _, err = dataprep(t, append([]string{"--input", filepath.Join(dir, "validation-*"), "--out", filepath.Join(dir, "none")}, common...)...)
	if !errors.Is(err, dataset.ErrNoMatch) || !strings.Contains(err.Error(), "validation-*") {
		t.Fatalf("no match: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "none", shard.ManifestName)); err == nil {
		t.Fatal("manifest written for an input that matched nothing")
	}
}

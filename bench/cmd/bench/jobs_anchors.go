package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// Quick mode runs the new anchors' jobs as one pair without a warm-up:
// each of their runs starts Python and imports torch (seconds of CPU on a
// 2-core machine), the runs before them have already brought those files
// into the page cache, and make bench-quick must stay under 5 minutes.
// Full mode keeps the warm-up (but for the seed path: minutes per run).
const (
	seedPathPy    = "bench/anchors/seed_path.py"
	feedAnchorsPy = "bench/anchors/feed_anchors.py"
)

// anchorEnv is the environment of the scripts that import the bench's own
// anchors (MosaicML Streaming, LitData, Gigatoken): scripts/setup-bench-deps
// installs them into -anchors, laid over the venv by PYTHONPATH.
func (e *env) anchorEnv() []string {
	return []string{"PYTHONPATH=" + e.c.anchors, "TOKENIZERS_PARALLELISM=true"}
}

// anchorVersions looks up MosaicML Streaming, LitData and Gigatoken (also
// imported: a wheel that does not load is missing) in -anchors.
func (e *env) anchorVersions() {
	for _, m := range []string{"mosaicml-streaming", "litdata", "gigatoken"} {
		e.tools[m] = ""
	}
	if e.c.anchors == "" || !exists(e.c.anchors) {
		return
	}
	b := e.outputEnv(e.anchorEnv(), e.c.python, "-c", pythonModules, "mosaicml-streaming", "litdata", "+gigatoken")
	var v map[string]string
	if b != "" && jsonUnmarshal(lastLine(b), &v) == nil {
		for m := range v {
			e.tools[m] = v[m]
		}
	}
}

// records returns an Alpaca records file (JSON array) of n records: the
// -alpaca file as it is when n <= 0 and -alpaca is given, else the first n
// (cycled) of the source.
func (e *env) records(name string, n int) (string, string, error) {
	src, err := e.alpaca()
	if err != nil {
		return "", "", err
	}
	if n <= 0 && src.path != "" {
		return src.path, src.desc, nil
	}
	if n <= 0 {
		n = 52002
	}
	p, err := e.writeRecords(name, src.recs, n)
	return p, fmt.Sprintf("%s — %d Alpaca records (JSON array) from %s", p, n, src.desc), err
}

// seedPathJobs: the seeds' data path, whole, on every rank of one node
// (bench/anchors/seed_path.py): the torchrun + FSDP seed's own
// build_dataset (datasets + AutoTokenizer per row, padding to 1024), then
// DataLoader + DistributedSampler, in every rank, against dataprep once and
// ferry.Loader in every rank. Full: 8 ranks on the whole input (pass
// -alpaca for the real 52,002 records); quick: 2 ranks on 200 records.
func seedPathJobs(e *env) ([]harness.Job, []string) {
	ranks, n := 8, 0
	if e.c.mode == "quick" {
		ranks, n = 2, 200
	}
	if e.c.seedRecords > 0 {
		n = e.c.seedRecords
	}
	name := fmt.Sprintf("seed path %d ranks first batch", ranks)
	key := func(k string) harness.ExtraMetric {
		unit := map[string]string{"cpu_s": "s", "peak_node_rss_mb": "MB", "data_path_s_max": "s", "wall_s": "s"}[k]
		return harness.ExtraMetric{Metric: harness.Metric{Name: k, Unit: unit}}
	}
	j := harness.Job{
		Name: name, Group: "seed path",
		Metric: harness.Metric{Name: "first_batch_s_max", Unit: "s"},
		Extra:  []harness.ExtraMetric{key("data_path_s_max"), key("cpu_s"), key("peak_node_rss_mb")},
		Ferry:  harness.Side{Label: fmt.Sprintf("dataprep --mode pad --labels copy --ranks %d once, then ferry.Loader in each of %d ranks", ranks, ranks)},
		Anchor: harness.Side{Label: fmt.Sprintf("the torchrun seed's build_dataset (datasets %s load_dataset + map, transformers %s AutoTokenizer per row, padding=max_length 1024) + DataLoader/DistributedSampler (torch %s) in each of %d ranks",
			e.tools["datasets"], e.tools["transformers"], e.tools["torch"], ranks)},
	}
	if e.c.mode == "full" {
		// One run of each side is minutes of 8 processes on the whole data
		// set: no warm-up (the input is in the page cache from the
		// dataprep jobs; every run starts with an empty datasets cache).
		j.NoWarmup, j.MaxPairs = true, 1
	} else {
		j.NoWarmup, j.MaxPairs = true, 1 // quick: one pair, see quickOnePair
	}
	switch {
	case e.torch() != "":
		j.Unavailable = e.torch()
	case e.tools["datasets"] == "" || e.tools["transformers"] == "":
		j.Unavailable = e.c.python + " lacks datasets or transformers (scripts/setup-test-deps)"
	}
	dataprep, why := e.goBuild("cmd/dataprep")
	if why != "" && j.Unavailable == "" {
		j.Unavailable = why
	}
	if j.Unavailable != "" || e.c.list {
		return []harness.Job{j}, nil
	}
	recs, desc, err := e.records(fmt.Sprintf("alpaca-records-seed-%s.json", e.c.mode), n)
	if err != nil {
		j.Unavailable = "alpaca input: " + err.Error()
		return []harness.Job{j}, nil
	}
	tok, err := e.tokenizerDir("llama3.1")
	if err != nil {
		j.Unavailable = "tokenizer: " + err.Error()
		return []harness.Job{j}, nil
	}
	work := filepath.Join(e.c.work, "out-"+e.c.mode, "seed-path")
	args := []string{"--records", recs, "--tokenizer", tok, "--ranks", strconv.Itoa(ranks), "--dataprep", dataprep}
	j.Ferry.Cmd = harness.Command{Argv: append([]string{e.c.python, seedPathPy, "ferry", "--work", work + ".ferry"}, args...),
		Stdout: e.outPath("seed-path", "ferry")}
	j.Anchor.Cmd = harness.Command{Argv: append([]string{e.c.python, seedPathPy, "seed", "--work", work + ".seed"}, args...),
		Stdout: e.outPath("seed-path", "seed")}
	j.Check = func() (string, error) {
		return checkSeedPath(e.outPath("seed-path", "ferry"), e.outPath("seed-path", "seed"), ranks)
	}
	return []harness.Job{j}, []string{fmt.Sprintf("seed path: %s; tokenizer testdata/tokenizers/llama3.1 with Llama-3.1-8B's special tokens; %d ranks", desc, ranks)}
}

// checkSeedPath: both sides delivered a 4 × 1024 first batch on every rank
// from the same number of rows.
func checkSeedPath(ferryOut, seedOut string, ranks int) (string, error) {
	v, err := readBenchLines(ferryOut, seedOut)
	if err != nil {
		return "", err
	}
	var rows [2]float64
	for i, p := range []string{ferryOut, seedOut} {
		if int(v[i]["ranks"]) != ranks {
			return "", fmt.Errorf("%s: %v ranks, want %d", p, v[i]["ranks"], ranks)
		}
		rows[i] = v[i]["rows"]
	}
	if rows[0] != rows[1] {
		return "", fmt.Errorf("ferry's shards hold %.0f rows, the seed's DistributedSampler goes through %.0f", rows[0], rows[1])
	}
	return fmt.Sprintf("every one of the %d ranks of both sides held a 4 × 1024 first batch; an epoch of %.0f rows on both sides (padded to a multiple of the ranks)", ranks, rows[0]), nil
}

// feedAnchorJobs: ferry's feed against MosaicML Streaming and LitData (and
// the seeds' DataLoader + DistributedSampler over in-memory rows), one
// contestant per process (bench/anchors/feed_anchors.py), same Alpaca rows
// padded to 1024, batch 4: per-batch CPU, time to first batch, mid-epoch
// resume and peak RSS (read jobs), and the conversion of the Alpaca input
// into each format (convert jobs). The read jobs' inputs are converted once
// here; the convert jobs convert again into scratch directories.
func feedAnchorJobs(e *env) ([]harness.Job, []string) {
	batches, n := "2000", 0
	if e.c.mode == "quick" {
		batches, n = "200", 999
	}
	ms := func(k string) harness.ExtraMetric {
		return harness.ExtraMetric{Metric: harness.Metric{Name: k, Unit: "ms"}}
	}
	type anchor struct{ side, label string }
	anchors := []anchor{
		{"mosaic", "MosaicML Streaming " + e.tools["mosaicml-streaming"] + ": MDSWriter, StreamingDataset + StreamingDataLoader"},
		{"litdata", "LitData " + e.tools["litdata"] + ": optimize, StreamingDataset + StreamingDataLoader"},
		{"dataloader", "torch " + e.tools["torch"] + " DataLoader + DistributedSampler over in-memory int64 dict rows (the seeds' shape)"},
	}
	var jobs []harness.Job
	for _, a := range anchors {
		jobs = append(jobs, harness.Job{
			Name: "feed vs " + a.side + " per batch", Group: "feed",
			Metric: harness.Metric{Name: "cpu_us_per_batch", Unit: "µs"},
			Extra:  []harness.ExtraMetric{ms("first_batch_ms"), ms("resume_ms")},
			Ferry:  harness.Side{Label: "ferry.Loader (mapped shard, zero-copy views)"},
			Anchor: harness.Side{Label: a.label},
			// each run imports torch and the loader: one pair in quick mode,
			// two in full (each run measures 2,000 batches inside)
			MaxPairs: map[string]int{"quick": 1, "full": 2}[e.c.mode],
			NoWarmup: e.c.mode == "quick",
		})
	}
	for _, a := range anchors[:2] {
		jobs = append(jobs, harness.Job{
			Name: "feed conversion vs " + a.side, Group: "feed",
			Metric:   harness.Metric{Name: "wall_s", Unit: "s"},
			Extra:    []harness.ExtraMetric{{Metric: harness.Metric{Name: "convert_s", Unit: "s"}}},
			Ferry:    harness.Side{Label: "dataprep --mode pad --labels copy --ranks 1 --seq-len 1024"},
			Anchor:   harness.Side{Label: "HF tokenizers " + e.tools["tokenizers"] + " encode_batch (all threads, padding to 1024) + " + strings.SplitN(a.label, ":", 2)[0] + " " + map[string]string{"mosaic": "MDSWriter", "litdata": "optimize"}[a.side]},
			MaxPairs: 1, // a conversion of the whole input is minutes on the anchors' side
			NoWarmup: e.c.mode == "quick",
		})
	}
	why := e.torch()
	if why == "" && (e.tools["mosaicml-streaming"] == "" || e.tools["litdata"] == "") {
		why = "MosaicML Streaming or LitData is not installed in " + e.c.anchors + " (scripts/setup-bench-deps installs them)"
	}
	dataprep, whyBin := e.goBuild("cmd/dataprep")
	if why == "" {
		why = whyBin
	}
	if why != "" {
		return unavailable(jobs, why), nil
	}
	if e.c.list {
		return jobs, nil
	}
	recs, desc, err := e.records(fmt.Sprintf("alpaca-records-feed-%s.json", e.c.mode), n)
	if err != nil {
		return unavailable(jobs, "alpaca input: "+err.Error()), nil
	}
	t := seedTokenizers[0] // qwen2.5: eos = pad, as the Ray seed
	tok, err := e.tokenizerDir(t.name)
	if err != nil {
		return unavailable(jobs, "tokenizer: "+err.Error()), nil
	}
	dir := filepath.Join(e.c.work, "feed-"+e.c.mode)
	conv := func(side, out string) []string {
		return []string{e.c.python, feedAnchorsPy, "convert", side, "--records", recs, "--tokenizer", tok, "--eos", t.eos,
			"--out", out, "--dataprep", dataprep}
	}
	// The read jobs' inputs, converted once, before the first read job runs
	// (kept in the work dir while the input is the same).
	prepare := sync.OnceValue(func() error {
		stamp := filepath.Join(dir, "input")
		if b, _ := os.ReadFile(stamp); string(b) == recs+"\n"+fileStamp(recs) {
			return nil
		}
		os.RemoveAll(dir)
		os.MkdirAll(dir, 0o755)
		for _, side := range []string{"ferry", "mosaic", "litdata"} {
			e.logf("converting %s to the %s format for the feed jobs", recs, side)
			if out, ok := e.outputOK(e.anchorEnv(), conv(side, filepath.Join(dir, side))...); !ok {
				return fmt.Errorf("converting the feed input to %s: %s", side, oneLine(out, 300))
			}
		}
		return os.WriteFile(stamp, []byte(recs+"\n"+fileStamp(recs)), 0o644)
	})
	read := func(side, data string) []string {
		return []string{e.c.python, feedAnchorsPy, "read", side, "--data", data, "--batches", batches}
	}
	for i, a := range anchors {
		slug := slugify(jobs[i].Name)
		data := filepath.Join(dir, a.side)
		if a.side == "dataloader" {
			data = filepath.Join(dir, "ferry")
		}
		jobs[i].Ferry.Cmd = harness.Command{Argv: read("ferry", filepath.Join(dir, "ferry")), Env: e.anchorEnv(), Stdout: e.outPath(slug, "ferry"),
			Before: prepare}
		jobs[i].Anchor.Cmd = harness.Command{Argv: read(a.side, data), Env: e.anchorEnv(), Stdout: e.outPath(slug, a.side)}
	}
	for i, a := range anchors[:2] {
		j := &jobs[len(anchors)+i]
		slug := slugify(j.Name)
		fo, ao := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".ferry"), filepath.Join(e.c.work, "out-"+e.c.mode, slug+"."+a.side)
		j.Ferry.Cmd = harness.Command{Argv: conv("ferry", fo), Env: e.anchorEnv(), Stdout: e.outPath(slug, "ferry")}
		j.Anchor.Cmd = harness.Command{Argv: conv(a.side, ao), Env: e.anchorEnv(), Stdout: e.outPath(slug, a.side)}
		j.Check = func() (string, error) { return checkConvert(e.outPath(slug, "ferry"), e.outPath(slug, a.side)) }
	}
	return jobs, []string{fmt.Sprintf("feed anchors: %s, tokenized with %s (eos = pad %s), padded to 1024; rank 0 of 1, batch 4 × 1024, shuffle, num_workers=0, %s batches measured",
		desc, t.name, t.eos, batches)}
}

// checkConvert: both conversions wrote every record as one row.
func checkConvert(ferryOut, anchorOut string) (string, error) {
	v, err := readBenchLines(ferryOut, anchorOut)
	if err != nil {
		return "", err
	}
	rows := [2]float64{v[0]["rows"], v[1]["rows"]}
	if rows[0] != rows[1] || rows[0] == 0 {
		return "", fmt.Errorf("ferry wrote %.0f rows, the anchor %.0f", rows[0], rows[1])
	}
	return fmt.Sprintf("%.0f rows on both sides", rows[0]), nil
}

// fileStamp is a file's sha256 (the records file is rewritten every run).
func fileStamp(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// transformersTokenizeJobs: dataprep tokenize's pass (bench/tokenize ids)
// against transformers'
// AutoTokenizer called once per row, as the seeds call it (truncation,
// padding="max_length" 1024, pad = eos), on the tokenizer jobs' Alpaca
// records; IDs are discarded on both sides and their counts compared.
func transformersTokenizeJobs(e *env) ([]harness.Job, []string) {
	t := seedTokenizers[0]
	name := "tokenize " + t.name + " alpaca transformers per row"
	slug := slugify(name)
	j := harness.Job{
		Name: name, Group: "tokenizer",
		Metric: harness.Metric{Name: "wall_s", Unit: "s"},
		Extra:  []harness.ExtraMetric{{Metric: harness.Metric{Name: "encode_mb_per_s", Unit: "MB/s", HigherIsBetter: true}}},
		Ferry:  harness.Side{Label: "ferry dataprep tokenize --threads 1, truncation + padding to 1024"},
		// one pair after the warm-up: transformers' import alone is seconds
		// (quick), and a call per row is minutes on the whole input (full)
		MaxPairs: 1,
		NoWarmup: e.c.mode == "quick",
		Anchor:   harness.Side{Label: "transformers " + e.tools["transformers"] + " AutoTokenizer(text, truncation=True, max_length=1024, padding=\"max_length\") per row, as the seeds call it"},
	}
	ids, why := e.goBuild("bench/tokenize")
	if why == "" {
		why = e.hfTokenizers()
	}
	if why == "" && e.tools["transformers"] == "" {
		why = e.c.python + " cannot import transformers (scripts/setup-test-deps)"
	}
	if why != "" || e.c.list {
		j.Unavailable = why
		return []harness.Job{j}, nil
	}
	n := 0
	if e.c.mode == "quick" {
		n = 200
	}
	recs, desc, err := e.records(fmt.Sprintf("alpaca-records-tok-%s.json", e.c.mode), n)
	if err != nil {
		j.Unavailable = "alpaca input: " + err.Error()
		return []harness.Job{j}, nil
	}
	tok, err := e.tokenizerDir(t.name)
	if err != nil {
		j.Unavailable = "tokenizer: " + err.Error()
		return []harness.Job{j}, nil
	}
	common := []string{"--alpaca", "--eos", t.eos, "--max-length", "1024", "--pad", "--out", "none"}
	j.Ferry.Cmd = harness.Command{Argv: append(append([]string{ids, "ids", "--tokenizer", tok, "--threads", "1"}, common...), recs),
		Stdout: e.outPath(slug, "ferry")}
	j.Anchor.Cmd = harness.Command{Argv: append(append([]string{e.c.python, hfTokenizePy, "--tokenizer", tok, "--transformers"}, common...), "--bench-line", recs),
		Env: e.pyEnv(1), Stdout: e.outPath(slug, "hf")}
	j.Check = func() (string, error) { return compareCounts(e.outPath(slug, "ferry"), e.outPath(slug, "hf")) }
	return []harness.Job{j}, []string{"tokenize " + t.name + " alpaca transformers per row: " + desc}
}

// readBenchLines reads the {"bench"} line of each output file, in order.
func readBenchLines(paths ...string) ([]map[string]float64, error) {
	v := make([]map[string]float64, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if v[i], err = harness.ParseBenchLine(b); err != nil || v[i] == nil {
			return nil, fmt.Errorf("%s: no bench line (%v)", p, err)
		}
	}
	return v, nil
}

// compareCounts compares the lines and tokens two tokenizer bench lines report.
func compareCounts(ferryOut, hfOut string) (string, error) {
	v, err := readBenchLines(ferryOut, hfOut)
	if err != nil {
		return "", err
	}
	for _, k := range []string{"lines", "tokens"} {
		if v[0][k] != v[1][k] {
			return "", fmt.Errorf("%s: ferry %.0f, transformers %.0f", k, v[0][k], v[1][k])
		}
	}
	return fmt.Sprintf("%.0f rows, %.0f tokens on both sides", v[0]["lines"], v[0]["tokens"]), nil
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/ferryml/ferry/bench/internal/harness"
)

const (
	hfTokenizePy        = "bench/anchors/hf_tokenize.py"
	gigatokenTokenizePy = "bench/anchors/gigatoken_tokenize.py"
)

// buildJobs defines every job for the mode, preparing its inputs. A job
// that cannot run says why in Unavailable. It also returns one line per
// input for the report.
func buildJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	var inputs []string
	add := func(js []harness.Job, in []string) {
		jobs = append(jobs, js...)
		inputs = append(inputs, in...)
	}
	add(tokenizerJobs(e))
	add(tokenizerLoadJobs(e))
	add(transformersTokenizeJobs(e))
	add(chatRenderJobs(e))
	add(chatPrepJobs(e))
	add(dataprepJobs(e))
	add(mixJobs(e))
	add(partsJobs(e))
	add(seedPathJobs(e))
	add(feedJobs(e))
	add(feedAnchorJobs(e))
	add(ckptJobs(e))
	add(loadPretrainedJobs(e))
	add(storageJobs(e))
	return jobs, inputs
}

// threadCounts is 1 and all threads (once when the machine has one CPU).
// Quick mode measures one thread only, to stay CI-sized: each tokenizer job
// costs a few seconds of process start-up (both sides load a tokenizer).
func (e *env) threadCounts() []int {
	if e.c.threads == 1 || e.c.mode == "quick" {
		return []int{1}
	}
	return []int{1, e.c.threads}
}

func (e *env) outPath(slug, side string) string {
	dir := filepath.Join(e.c.work, "out-"+e.c.mode)
	os.MkdirAll(dir, 0o755)
	return filepath.Join(dir, slug+"."+side+".out")
}

func slugify(s string) string {
	return strings.Trim(regexp.MustCompile(`[^a-z0-9.]+`).ReplaceAllString(strings.ToLower(s), "-"), "-")
}

// flagRE matches a flag in --help output, as Go's flag package (-name)
// or GNU style (--name) prints it.
func hasFlag(help, name string) bool {
	return regexp.MustCompile(`(^|[\s,\[|])--?` + regexp.QuoteMeta(name) + `($|[\s=,\]|])`).MatchString(help)
}

func requireFlags(help, prog string, names ...string) string {
	var miss []string
	for _, n := range names {
		if !hasFlag(help, n) {
			miss = append(miss, "--"+n)
		}
	}
	if len(miss) > 0 {
		return fmt.Sprintf("%s has no %s flag yet", prog, strings.Join(miss, ", "))
	}
	return ""
}

// pyEnv is the anchor's environment: RAYON_NUM_THREADS sizes the rayon pool
// of HF tokenizers, and TOKENIZERS_PARALLELISM=true overrides a false value
// inherited from the caller, which would make every run sequential.
func (e *env) pyEnv(threads int) []string {
	return []string{"RAYON_NUM_THREADS=" + strconv.Itoa(threads), "TOKENIZERS_PARALLELISM=true"}
}

// hfLabel names the anchor: "HF tokenizers 0.23.3 (Python binding)".
func (e *env) hfLabel() string {
	return "HF tokenizers " + e.tools["tokenizers"] + " (Python binding)"
}

func unavailable(jobs []harness.Job, why string) []harness.Job {
	for i := range jobs {
		if jobs[i].Unavailable == "" {
			jobs[i].Unavailable = why
		}
	}
	return jobs
}

// tokenizerJobs: `dataprep tokenize`'s pass (prep.Tokenize, run by
// bench/tokenize ids) vs HF tokenizers (Python), for both seed
// tokenizers, 1 and all threads, on Alpaca prompts and the hard corpus.
// The metric is the wall time of the whole process: start, tokenizer load,
// reading JSONL texts, encoding, writing JSONL IDs — the same work on both
// sides, checked to give identical IDs.
func tokenizerJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	var inputs []string
	why := e.hfTokenizers()
	// bench/tokenize ids: dataprep tokenize's pass (prep.Tokenize) plus the
	// {"bench"} line with the encode throughput
	ids, whyBin := e.goBuild("bench/tokenize")
	if why == "" {
		why = whyBin
	}
	src, err := e.alpaca()
	if err != nil && why == "" {
		why = "alpaca input: " + err.Error()
	}
	// quick: the first 200 records of the sample (~0.17 MB) and the first
	// 256 KiB of the corpus; full: the sample cycled to 20 MB (or the real
	// Alpaca once) and the whole corpus (4.7 MB).
	minBytes, corpusMax := int64(0), int64(256<<10)
	var recs []record
	if src != nil {
		recs = src.recs
		if e.c.mode == "quick" {
			recs = recs[:min(200, len(recs))]
		}
	}
	if e.c.mode == "full" {
		corpusMax = 0
		if e.c.alpaca == "" {
			minBytes = 20e6
		}
	}
	type input struct {
		name string
		path map[string]string // per tokenizer
	}
	var ins []input
	alp := input{name: "alpaca", path: map[string]string{}}
	toks := append(append([]tokenizerSpec{}, seedTokenizers...), familyTokenizers...)
	for _, t := range toks {
		if src == nil {
			break
		}
		p, n, b, err := e.writeTexts(fmt.Sprintf("alpaca-%s-%s.jsonl", t.name, e.c.mode), recs, t.eos, minBytes)
		if err != nil {
			why = "alpaca input: " + err.Error()
			break
		}
		alp.path[t.name] = p
		inputs = append(inputs, fmt.Sprintf("tokenize … alpaca (%s): %s — %d prompts in the seeds' format ending with %s, %.2f MB of text, from %s",
			t.name, p, n, t.eos, float64(b)/1e6, src.desc))
	}
	ins = append(ins, alp)
	cp, n, b, err := e.corpus(corpusMax)
	if err != nil && why == "" {
		why = "corpus input: " + err.Error()
	} else {
		inputs = append(inputs, fmt.Sprintf("tokenize … corpus: %s — %d lines, %.2f MB of text (testdata/tokenizers/corpus-dev.jsonl.zst: prose, code, ~150 languages, stress text)",
			cp, n, float64(b)/1e6))
	}
	corpusIn := input{name: "corpus", path: map[string]string{}}
	for _, t := range toks {
		corpusIn.path[t.name] = cp
	}
	ins = append(ins, corpusIn)

	for _, in := range ins {
		for k, t := range toks {
			// quick: the other families on the Alpaca prompts only (make
			// test holds each to HF's IDs on the whole corpus), so that
			// make bench-quick stays under 5 minutes
			if e.c.mode == "quick" && in.name == "corpus" && k >= len(seedTokenizers) {
				continue
			}
			tokDir, err := e.tokenizerDir(t.name)
			for _, th := range e.threadCounts() {
				name := fmt.Sprintf("tokenize %s %s %dT", t.name, in.name, th)
				slug := slugify(name)
				ferryOut, hfOut := e.outPath(slug, "ferry"), e.outPath(slug, "hf")
				argv := []string{ids, "ids", "--tokenizer", tokDir, "--threads", strconv.Itoa(th)}
				j := harness.Job{
					Name: name, Group: "tokenizer",
					Metric: harness.Metric{Name: "wall_s", Unit: "s"},
					Extra:  []harness.ExtraMetric{{Metric: harness.Metric{Name: "encode_mb_per_s", Unit: "MB/s", HigherIsBetter: true}}},
					Ferry: harness.Side{Label: "ferry dataprep tokenize (bench/tokenize ids: prep.Tokenize)", Cmd: harness.Command{
						Argv:   append(argv, in.path[t.name]),
						Stdout: ferryOut,
					}},
					Anchor: harness.Side{Label: e.hfLabel(), Cmd: harness.Command{
						Argv:   []string{e.c.python, hfTokenizePy, "--tokenizer", tokDir, "--bench-line", in.path[t.name]},
						Env:    e.pyEnv(th),
						Stdout: hfOut,
					}},
					Check:       func() (string, error) { return compareIDs(ferryOut, hfOut, "HF tokenizers") },
					Unavailable: why,
				}
				if err != nil && j.Unavailable == "" {
					j.Unavailable = "tokenizer: " + err.Error()
				}
				jobs = append(jobs, j)
				// quick: the seeds' tokenizers only (~4 s a row)
				if in.name == "alpaca" && th == 1 && (e.c.mode != "quick" || k < len(seedTokenizers)) {
					jobs = append(jobs, e.gigatokenJob(j, t.name, in.path[t.name], tokDir, ferryOut))
				}
			}
		}
	}
	return jobs, inputs
}

// gigatokenJob is j (a tokenize row on one thread) against Gigatoken, the
// fastest HF-exact tokenizer we know of (bench/anchors/gigatoken_tokenize.py:
// its own API, one thread, one call over the input), for every tokenizer
// on the Alpaca prompts: issue 31's goals are stated against HF, and this
// row says where the field's best stands on the same machine in the same
// run. Its IDs are checked against ferry's, as HF's are in j.
func (e *env) gigatokenJob(j harness.Job, tok, in, tokDir, ferryOut string) harness.Job {
	name := j.Name + " gigatoken"
	gtOut := e.outPath(slugify(name), "gigatoken")
	j.Name = name
	j.Anchor = harness.Side{Label: "Gigatoken " + e.tools["gigatoken"] + " (Python binding, encode_batch on the calling thread)", Cmd: harness.Command{
		Argv:   []string{e.c.python, gigatokenTokenizePy, "--tokenizer", tokDir, "--bench-line", in},
		Env:    e.anchorEnv(),
		Stdout: gtOut,
	}}
	j.Check = func() (string, error) { return compareIDs(ferryOut, gtOut, "Gigatoken") }
	if j.Unavailable == "" && e.tools["gigatoken"] == "" {
		j.Unavailable = "Gigatoken is not installed in " + e.c.anchors + " (scripts/setup-bench-deps installs it)"
	}
	if why := gigatokenRefuses[tok]; why != "" && j.Unavailable == "" {
		j.Unavailable = why
	}
	return j
}

// gigatokenRefuses says which tokenizers Gigatoken (bench/requirements.lock's
// version) does not load, and how it refuses them.
var gigatokenRefuses = map[string]string{
	// SmolLM2's vocabulary has no single-byte token for some control bytes.
	"smollm2": "Gigatoken 0.10.0 does not load SmolLM2's tokenizer.json (\"Byte remapping failed: no single-byte vocab entry for byte 0x04\")",
}

// dataprepJobs: dataprep end to end (read, format, tokenize, pad or pack,
// shuffle, write 16 shards + manifest) vs HF tokenizers encoding the same
// formatted prompts with the same threads and nothing else (no shards
// written): pad mode against the seeds' call (truncation to 1024 and
// padding="max_length"), pack mode against truncation alone.
func dataprepJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	var inputs []string
	const seqLen, ranks = "1024", "16"
	why := e.hfTokenizers()
	dataprep, whyBin := e.goBuild("cmd/dataprep")
	help := ""
	if whyBin == "" {
		help = e.helpText(dataprep)
		whyBin = requireFlags(help, "dataprep", "input", "tokenizer", "seq-len", "ranks", "mode", "out")
	}
	if why == "" {
		why = whyBin
	}
	src, err := e.alpaca()
	recPath := ""
	if err != nil {
		if why == "" {
			why = "alpaca input: " + err.Error()
		}
	} else if src.path != "" {
		recPath = src.path
		inputs = append(inputs, "dataprep: "+src.desc)
	} else {
		n := len(src.recs)
		if e.c.mode == "full" {
			n = 52002 // the size of the real Stanford Alpaca
		}
		recPath, err = e.writeRecords(fmt.Sprintf("alpaca-records-%s.json", e.c.mode), src.recs, n)
		if err != nil && why == "" {
			why = "alpaca input: " + err.Error()
		}
		inputs = append(inputs, fmt.Sprintf("dataprep: %s — %d Alpaca records (JSON array) cycled from %s; pass -alpaca for the real 52,002-record file",
			recPath, n, src.desc))
	}
	threads := strconv.Itoa(e.c.threads)
	for _, t := range seedTokenizers {
		tokDir, terr := e.tokenizerDir(t.name)
		for _, mode := range []string{"pad", "pack"} {
			name := fmt.Sprintf("dataprep %s %s", t.name, mode)
			slug := slugify(name)
			outDir := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".shards")
			argv := []string{dataprep, "--input", recPath, "--tokenizer", tokDir, "--seq-len", seqLen, "--ranks", ranks, "--mode", mode, "--out", outDir}
			for _, opt := range [][2]string{{"eos", t.eos}, {"workers", threads}, {"quiet", ""}} {
				if hasFlag(help, opt[0]) {
					argv = append(argv, "--"+opt[0])
					if opt[1] != "" {
						argv = append(argv, opt[1])
					}
				}
			}
			anchor := []string{e.c.python, hfTokenizePy, "--tokenizer", tokDir, "--alpaca", "--eos", t.eos, "--max-length", seqLen}
			label := e.hfLabel() + ", truncation to 1024 (tokenization alone)"
			if mode == "pad" {
				anchor = append(anchor, "--pad")
				label = e.hfLabel() + ", truncation + padding to 1024 as the seeds call it (tokenization alone)"
			}
			anchor = append(anchor, "--out", "none", "--bench-line", recPath)
			hfOut := e.outPath(slug, "hf")
			j := harness.Job{
				Name: name, Group: "dataprep",
				Metric: harness.Metric{Name: "wall_s", Unit: "s"},
				Ferry: harness.Side{Label: fmt.Sprintf("ferry dataprep --mode %s --ranks %s --seq-len %s", mode, ranks, seqLen), Cmd: harness.Command{
					Argv: argv, Stdout: e.outPath(slug, "ferry"),
					Before: func() error { return os.RemoveAll(outDir) },
				}},
				Anchor: harness.Side{Label: label, Cmd: harness.Command{
					Argv: anchor, Env: e.pyEnv(e.c.threads), Stdout: hfOut,
				}},
				Check:       func() (string, error) { return checkShards(outDir, hfOut, mode) },
				Unavailable: why,
			}
			if terr != nil && j.Unavailable == "" {
				j.Unavailable = "tokenizer: " + terr.Error()
			}
			jobs = append(jobs, j)
		}
	}
	return jobs, inputs
}

// checkShards verifies that dataprep left a complete result (a manifest and
// the shards it lists, with their sizes) and compares its counts with HF's.
// In pack mode (HF: truncation only) the manifest's token count must equal
// HF's; in pad mode HF's count includes the padding, so only records are
// compared.
func checkShards(dir, hfOut, mode string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		return "", fmt.Errorf("dataprep left no manifest: %w", err)
	}
	var m struct {
		Ranks      int `json:"ranks"`
		UniqueRows int `json:"unique_rows"`
		Files      []struct {
			Path  string `json:"path"`
			Bytes int64  `json:"bytes"`
		} `json:"files"`
		Stats struct {
			RecordsRead    int64 `json:"records_read"`
			RecordsSkipped int64 `json:"records_skipped"`
			Tokens         int64 `json:"tokens"`
		} `json:"stats"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("%s/manifest.json: %w", dir, err)
	}
	if len(m.Files) != m.Ranks || m.Ranks != 16 {
		return "", fmt.Errorf("%s/manifest.json: %d files for %d ranks, want 16", dir, len(m.Files), m.Ranks)
	}
	for _, f := range m.Files {
		fi, err := os.Stat(filepath.Join(dir, f.Path))
		if err != nil {
			return "", err
		}
		if fi.Size() != f.Bytes {
			return "", fmt.Errorf("%s: %d bytes, manifest says %d", f.Path, fi.Size(), f.Bytes)
		}
	}
	tail, err := os.ReadFile(hfOut)
	if err != nil {
		return "", err
	}
	hf, err := harness.ParseBenchLine(tail)
	if err != nil || hf == nil {
		return "", fmt.Errorf("%s: no bench line from the HF anchor (%v)", hfOut, err)
	}
	if got, want := m.Stats.RecordsRead, int64(hf["lines"]); got != want {
		return "", fmt.Errorf("dataprep read %d records, HF tokenized %d", got, want)
	}
	msg := fmt.Sprintf("16 shards + manifest complete; %d records read (%d skipped), %d rows, %d tokens",
		m.Stats.RecordsRead, m.Stats.RecordsSkipped, m.UniqueRows, m.Stats.Tokens)
	if mode == "pack" {
		if m.Stats.RecordsSkipped == 0 && m.Stats.Tokens != int64(hf["tokens"]) {
			return msg, fmt.Errorf("dataprep counted %d tokens, HF tokenized %d (truncated to 1024)", m.Stats.Tokens, int64(hf["tokens"]))
		}
		msg += " = HF's token count"
	}
	return msg, nil
}

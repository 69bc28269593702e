package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// mixJobs: a mixture (dataprep --recipe, docs/mixtures.md) of two Alpaca
// sources, the small one upsampled 3x, against a single-source run of the
// same size: one input holding the same records, the small source's three
// times (three copies of its file). Both write the same examples, so the
// same output tokens, and the wall-time ratio is the ratio of the cost per
// output token (goal: the mixture within 10%). The mixture tokenizes the
// small source once and repeats its examples; the single run tokenizes
// every copy.
func mixJobs(e *env) ([]harness.Job, []string) {
	const seqLen, ranks, repeat = "1024", "16", 3
	name := "dataprep mixture qwen2.5 pack"
	slug := slugify(name)
	job := harness.Job{Name: name, Group: "dataprep", Metric: harness.Metric{Name: "wall_s", Unit: "s"}}
	dataprep, why := e.goBuild("cmd/dataprep")
	if why == "" {
		why = requireFlags(e.helpText(dataprep), "dataprep", "recipe", "input", "tokenizer", "seq-len", "ranks", "mode", "out", "workers")
	}
	src, err := e.alpaca()
	if err != nil && why == "" {
		why = "alpaca input: " + err.Error()
	}
	tokDir, err := e.tokenizerDir("qwen2.5")
	if err != nil && why == "" {
		why = "tokenizer: " + err.Error()
	}
	if why != "" {
		job.Unavailable = why
		return []harness.Job{job}, nil
	}
	nA := 4 * len(src.recs)
	if e.c.mode == "full" {
		nA = 52002
	}
	nB := nA / 10
	general, err := e.writeRecords(fmt.Sprintf("mix-general-%s.json", e.c.mode), src.recs, nA)
	var domain []string
	for k := range repeat {
		if err != nil {
			break
		}
		var p string
		p, err = e.writeRecords(fmt.Sprintf("mix-domain-%s-%d.json", e.c.mode, k), src.recs[len(src.recs)/2:], nB)
		domain = append(domain, p)
	}
	recipe := filepath.Join(e.c.work, "in", "mix-"+e.c.mode+".yaml")
	var absG, absD string // a recipe's relative paths are relative to its directory
	if err == nil {
		if absG, err = filepath.Abs(general); err == nil {
			absD, err = filepath.Abs(domain[0])
		}
	}
	if err == nil {
		err = os.WriteFile(recipe, fmt.Appendf(nil, "sources:\n  - name: general\n    inputs: [%q]\n    repeat: 1\n  - name: domain\n    inputs: [%q]\n    repeat: %d\n",
			absG, absD, repeat), 0o644)
	}
	if err != nil {
		job.Unavailable = "mixture inputs: " + err.Error()
		return []harness.Job{job}, nil
	}
	inputs := []string{fmt.Sprintf("dataprep mixture: %s (%d Alpaca records) + %s (%d records, repeat %d) vs one run over the same %d records",
		general, nA, domain[0], nB, repeat, nA+repeat*nB)}
	common := []string{"--tokenizer", tokDir, "--eos", "<|endoftext|>", "--seq-len", seqLen, "--ranks", ranks, "--mode", "pack",
		"--workers", strconv.Itoa(e.c.threads), "--quiet"}
	mixOut := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".mix.shards")
	oneOut := filepath.Join(e.c.work, "out-"+e.c.mode, slug+".one.shards")
	mixArgv := append([]string{dataprep, "--recipe", recipe, "--out", mixOut}, common...)
	oneArgv := []string{dataprep, "--input", general}
	for _, d := range domain {
		oneArgv = append(oneArgv, "--input", d)
	}
	oneArgv = append(append(oneArgv, "--out", oneOut), common...)
	job.Ferry = harness.Side{Label: fmt.Sprintf("ferry dataprep --recipe (general + domain x%d)", repeat), Cmd: harness.Command{
		Argv: mixArgv, Stdout: e.outPath(slug, "ferry"), Before: func() error { return os.RemoveAll(mixOut) },
	}}
	job.Anchor = harness.Side{Label: fmt.Sprintf("ferry dataprep --input, one source of the same size (domain's file %d times)", repeat), Cmd: harness.Command{
		Argv: oneArgv, Stdout: e.outPath(slug, "one"), Before: func() error { return os.RemoveAll(oneOut) },
	}}
	job.Check = func() (string, error) { return checkMix(mixOut, oneOut, nA, nB, repeat) }
	return []harness.Job{job}, inputs
}

// checkMix checks that the mixture and the single run wrote the same
// tokens, and that the mixture used every record as asked.
func checkMix(mixOut, oneOut string, nA, nB, repeat int) (string, error) {
	type manifest struct {
		Version int `json:"version"`
		Sources []struct {
			Name        string `json:"name"`
			RecordsUsed int    `json:"records_used"`
			Uses        int    `json:"uses"`
		} `json:"sources"`
		Stats struct {
			Tokens int64 `json:"tokens"`
		} `json:"stats"`
	}
	read := func(dir string) (*manifest, error) {
		b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
		if err != nil {
			return nil, fmt.Errorf("dataprep left no manifest: %w", err)
		}
		var m manifest
		return &m, json.Unmarshal(b, &m)
	}
	mix, err := read(mixOut)
	if err != nil {
		return "", err
	}
	one, err := read(oneOut)
	if err != nil {
		return "", err
	}
	if mix.Version != 2 || len(mix.Sources) != 2 || mix.Sources[0].Uses != nA || mix.Sources[1].RecordsUsed != nB || mix.Sources[1].Uses != repeat*nB {
		return "", fmt.Errorf("%s: version %d, sources %+v: want general used %d times, domain's %d records %d times", mixOut, mix.Version, mix.Sources, nA, nB, repeat*nB)
	}
	if mix.Stats.Tokens != one.Stats.Tokens {
		return "", fmt.Errorf("the mixture wrote %d tokens, the single run %d: not the same size", mix.Stats.Tokens, one.Stats.Tokens)
	}
	return fmt.Sprintf("same output: %d tokens each; domain's %d records used %d times", mix.Stats.Tokens, nB, repeat), nil
}

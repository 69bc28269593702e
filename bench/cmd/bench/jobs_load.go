package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferryml/ferry/bench/internal/harness"
)

const hfLoadPy = "bench/anchors/hf_load.py"

// tokenizerLoadJobs: the time to load the seeds' tokenizers, ferry's
// tokenize.Load (bench/tokenize's `load` subcommand) against HF tokenizers'
// Tokenizer.from_file (bench/anchors/hf_load.py), each timed inside a fresh
// process around the load call alone. ferry's compiled cache is a fresh
// directory: the warm-up run parses tokenizer.json and writes it, the timed
// runs read it (the Load of every run after the first on a machine).
func tokenizerLoadJobs(e *env) ([]harness.Job, []string) {
	var jobs []harness.Job
	why := e.hfTokenizers()
	bin, whyBin := e.goBuild("bench/tokenize")
	if why == "" {
		why = whyBin
	}
	cache := filepath.Join(e.c.work, "ferry-tokenizer-cache")
	for _, t := range seedTokenizers {
		dir, err := e.tokenizerDir(t.name)
		name := "tokenizer load " + t.name
		slug := slugify(name)
		j := harness.Job{
			Name: name, Group: "tokenizer",
			Metric: harness.Metric{Name: "load_s", Unit: "s"},
			Extra:  []harness.ExtraMetric{{Metric: harness.Metric{Name: "load_cpu_s", Unit: "s"}}},
			Ferry: harness.Side{Label: "ferry tokenize.Load (compiled cache)", Cmd: harness.Command{
				Argv:   []string{bin, "load", "-tokenizer", dir},
				Env:    []string{"FERRY_TOKENIZER_CACHE=" + cache},
				Stdout: e.outPath(slug, "ferry"),
			}},
			Anchor: harness.Side{Label: e.hfLabel() + " Tokenizer.from_file", Cmd: harness.Command{
				Argv:   []string{e.c.python, hfLoadPy, filepath.Join(dir, "tokenizer.json")},
				Stdout: e.outPath(slug, "hf"),
			}},
			Unavailable: why,
		}
		if err != nil && j.Unavailable == "" {
			j.Unavailable = "tokenizer: " + err.Error()
		}
		jobs = append(jobs, j)
	}
	if err := os.RemoveAll(cache); err != nil {
		e.logf("tokenizer load: %v", err)
	}
	return jobs, []string{fmt.Sprintf("tokenizer load: the seeds' tokenizer.json files (uncompressed), ferry's compiled cache in %s", cache)}
}

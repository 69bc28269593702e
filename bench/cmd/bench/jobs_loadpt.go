package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ferryml/ferry/bench/internal/harness"
)

const loadPretrainedPy = "bench/load_pretrained/bench_load.py"

// loadPretrainedJobs: loading an HF base model into FSDP2 on N ranks of this
// machine (torchrun, gloo, CPU), ferry.load_pretrained (alone, and through
// one ferry-serve for the node) against what users run instead: the seeds'
// from_pretrained on every rank then fully_shard, torch's DCP
// HuggingFaceStorageReader, and rank 0 reading then broadcast_from_rank0
// (accelerate's RAM-efficient pattern, with torch's own call). Each side is
// one torchrun launch of bench/load_pretrained/bench_load.py --one METHOD,
// which times the load between two barriers (imports and process start
// excluded) with the files in the page cache, samples the node's PSS, and
// measures dd iflag=direct of the same files as the read floor. The
// checkpoint (Llama-shaped, bf16, several shard files: ~1.7 GB full, ~0.2 GB
// quick) is made by the first side that runs, once, in the work dir. The
// check compares the two sides' checksums of the loaded shards.
func loadPretrainedJobs(e *env) ([]harness.Job, []string) {
	size, ranks, pairs := "full", 4, 2
	anchors := []struct{ method, label string }{
		{"seed", "from_pretrained on every rank, then fully_shard (the seeds)"},
		{"dcp-hf", "torch DCP HuggingFaceStorageReader into the sharded state dict"},
		{"rank0-bcast", "rank 0 from_pretrained, set_model_state_dict(broadcast_from_rank0=True)"},
	}
	ferrySides := []string{"ferry", "ferry-serve"}
	if e.c.mode == "quick" {
		size, ranks, pairs = "quick", 2, 1
		anchors = anchors[:2]
		ferrySides = ferrySides[:1]
	}
	dir := filepath.Join(e.c.work, "load-pretrained-"+size)
	serve, why := e.goBuild("cmd/ferry-serve")
	if why == "" {
		why = e.torch()
	}
	if why == "" && e.tools["transformers"] == "" {
		why = e.c.python + " cannot import transformers (scripts/setup-test-deps)"
	}
	side := func(method, slug string) harness.Command {
		return harness.Command{
			Argv: []string{e.c.python, loadPretrainedPy, "--dir", dir, "--size", size, "--ranks", strconv.Itoa(ranks),
				"--ferry-serve", serve, "--one", method, "--out-json", e.outPath(slug, method+".json")},
			Stdout: e.outPath(slug, method),
		}
	}
	extra := []harness.ExtraMetric{
		{Metric: harness.Metric{Name: "peak_above_baseline_mb", Unit: "MB"}},
		{Metric: harness.Metric{Name: "peak_node_pss_mb", Unit: "MB"}},
		{Metric: harness.Metric{Name: "load_over_dd_floor", Unit: "x"}},
	}
	var jobs []harness.Job
	for _, f := range ferrySides {
		for _, a := range anchors {
			name := fmt.Sprintf("load_pretrained %s %s %dR vs %s", size, f, ranks, a.method)
			slug := slugify(name)
			flabel := "ferry.load_pretrained (meta model, fully_shard, each rank reads its ranges)"
			if f == "ferry-serve" {
				flabel = "ferry.load_pretrained(serve=) through one ferry-serve for the node"
			}
			fout, aout := e.outPath(slug, f+".json"), e.outPath(slug, a.method+".json")
			jobs = append(jobs, harness.Job{
				Name: name, Group: "load",
				Metric:      harness.Metric{Name: "load_s", Unit: "s"},
				Extra:       extra,
				Ferry:       harness.Side{Label: flabel, Cmd: side(f, slug)},
				Anchor:      harness.Side{Label: a.label, Cmd: side(a.method, slug)},
				Check:       func() (string, error) { return sameChecksum(fout, aout) },
				Unavailable: why,
				NoWarmup:    true, // each side warms the page cache itself
				MaxPairs:    pairs,
			})
		}
	}
	return jobs, []string{fmt.Sprintf("load_pretrained: a Llama-shaped random-init bf16 checkpoint (%s size of %s, made once in %s), %d ranks gloo CPU, files in the page cache",
		size, loadPretrainedPy, dir, ranks)}
}

// sameChecksum compares the checksums of the loaded shards the two sides
// wrote (summed over the ranks, in the same order: bit-for-bit equal loads
// give the same float).
func sameChecksum(a, b string) (string, error) {
	read := func(p string) (float64, error) {
		buf, err := os.ReadFile(p)
		if err != nil {
			return 0, err
		}
		var v struct {
			Checksum *float64 `json:"checksum"`
		}
		if err := json.Unmarshal(buf, &v); err != nil || v.Checksum == nil {
			return 0, fmt.Errorf("%s: no checksum (%v)", p, err)
		}
		return *v.Checksum, nil
	}
	x, err := read(a)
	if err != nil {
		return "", err
	}
	y, err := read(b)
	if err != nil {
		return "", err
	}
	if x != y {
		return "", fmt.Errorf("loaded shards differ: checksum %v (ferry) vs %v (anchor)", x, y)
	}
	return fmt.Sprintf("same checksum of the loaded shards on every rank (%v)", x), nil
}

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// feedJobs: per-batch cost and time to first batch of the ferry loader
// (direct, and through the ferry-serve daemon) vs DataLoader +
// DistributedSampler over a map-style dataset of dict rows (the seeds'
// pattern). The scripts measure all contestants in one process, repeat
// inside, and print every figure in their bench line.
func feedJobs(e *env) ([]harness.Job, []string) {
	maxRuns, args := 2, []string{"--rows-per-rank", "1024", "--repeat", "1"}
	if e.c.mode == "full" {
		maxRuns, args = 3, []string{"--rows-per-rank", "4096", "--repeat", "3"}
	}
	const anchorKey = "results.anchor_dataloader_distsampler."
	direct := harness.Job{
		Name: "feed direct per batch", Group: "feed",
		Metric: harness.Metric{Name: "cpu_us_per_batch", Unit: "µs"},
		Ferry: harness.Side{Label: "ferry.Loader (mapped shard, zero-copy views)", Metric: "results.ferry_loader.cpu_us_per_batch",
			Cmd: harness.Command{Argv: append([]string{e.c.python, "python/bench_feed.py"}, args...), Stdout: e.outPath("feed-direct", "py")}},
		Anchor: harness.Side{Label: "DataLoader + DistributedSampler over dict rows (batch 4 × 1024)", SameRun: true,
			Metric: anchorKey + "cpu_us_per_batch"},
		Extra: []harness.ExtraMetric{
			{Metric: harness.Metric{Name: "first_batch_ms", Unit: "ms"}, Ferry: "results.ferry_loader.first_batch_ms", Anchor: anchorKey + "first_batch_ms"},
			{Metric: harness.Metric{Name: "cpu_us_per_batch vs HF-formatted rows", Unit: "µs"},
				Ferry: "results.ferry_loader.cpu_us_per_batch", Anchor: "results.anchor_formatted_rows.cpu_us_per_batch"},
		},
		NoWarmup: true, MaxPairs: maxRuns,
	}
	// The daemon job compares wall time per batch (what the training loop
	// waits, so the daemon's own work counts), with the client's CPU per
	// batch and the time to first batch as extras.
	const serveKey = "results.ferry_serve."
	daemon := harness.Job{
		Name: "feed daemon per batch", Group: "feed",
		Metric: harness.Metric{Name: "wall_us_per_batch", Unit: "µs"},
		Ferry:  harness.Side{Label: "ferry-serve daemon + ServeLoader (shared-memory ring)", Metric: serveKey + "wall_us_per_batch"},
		Anchor: harness.Side{Label: "DataLoader + DistributedSampler over dict rows (batch 4 × 1024)", SameRun: true,
			Metric: anchorKey + "wall_us_per_batch"},
		Extra: []harness.ExtraMetric{
			{Metric: harness.Metric{Name: "client cpu_us_per_batch", Unit: "µs"}, Ferry: serveKey + "cpu_us_per_batch", Anchor: anchorKey + "cpu_us_per_batch"},
			{Metric: harness.Metric{Name: "first_batch_ms", Unit: "ms"}, Ferry: serveKey + "first_batch_ms", Anchor: anchorKey + "first_batch_ms"},
		},
		NoWarmup: true, MaxPairs: maxRuns,
	}
	switch {
	case e.torch() != "":
		direct.Unavailable = e.torch()
	case !exists("python/bench_feed.py"):
		direct.Unavailable = "python/bench_feed.py does not exist yet"
	}
	serve, why := e.goBuild("cmd/ferry-serve")
	switch {
	case e.torch() != "":
		daemon.Unavailable = e.torch()
	case !exists("python/bench_serve.py"):
		daemon.Unavailable = "python/bench_serve.py does not exist yet"
	case why != "":
		daemon.Unavailable = why
	default:
		daemon.Ferry.Cmd = harness.Command{Argv: append([]string{e.c.python, "python/bench_serve.py", "--serve-bin", serve}, args...),
			Stdout: e.outPath("feed-daemon", "py")}
	}
	return []harness.Job{direct, daemon}, []string{fmt.Sprintf("feed: synthetic shards made by the scripts (2 ranks × %s rows × 1,024 tokens), rank 0, batch 4 × 1024", args[1])}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ckptJobs: ckptmerge vs the PyTorch way (DCP load_state_dict into full
// tensors, then a safetensors file) and vs cp of the same bytes, on a
// synthetic FSDP-style checkpoint made by bench/ckptbench.
func ckptJobs(e *env) ([]harness.Job, []string) {
	var inputs []string
	merge := harness.Side{Label: "ferry ckptmerge"}
	jobs := []harness.Job{
		{Name: "ckptmerge vs torch", Group: "ckptmerge", Metric: harness.Metric{Name: "wall_s", Unit: "s"}, Ferry: merge,
			Anchor: harness.Side{Label: "PyTorch " + e.tools["torch"] + " DCP _load_state_dict (no_dist, as accelerate merge-weights) + safetensors save_file"}},
		{Name: "ckptmerge vs cp", Group: "ckptmerge", Metric: harness.Metric{Name: "wall_s", Unit: "s"}, Ferry: merge,
			Anchor: harness.Side{Label: "cp -r of the checkpoint + sync of the copies"}},
	}
	ckptmerge, why := e.goBuild("cmd/ckptmerge")
	if why != "" {
		return unavailable(jobs, why), nil
	}
	gen := ckptGenerator
	if why := e.torch(); why != "" {
		return unavailable(jobs, why), nil
	}
	if e.c.list {
		return jobs, nil // -list: do not spend minutes generating the checkpoint
	}
	ckpt, desc, err := e.checkpoint(gen)
	if err != nil {
		return unavailable(jobs, "generating the checkpoint: "+err.Error()), nil
	}
	inputs = append(inputs, "ckptmerge: "+desc)
	out := func(side string) string { return filepath.Join(e.c.work, "out-"+e.c.mode, "ckpt."+side) }
	rm := func(dir string) func() error { return func() error { return os.RemoveAll(dir) } }
	for i := range jobs {
		slug := slugify(jobs[i].Name)
		jobs[i].Ferry.Cmd = harness.Command{Argv: []string{ckptmerge, ckpt, out("ferry")},
			Stdout: e.outPath(slug, "ferry"), Before: rm(out("ferry"))}
	}
	jobs[0].Anchor.Cmd = harness.Command{
		Argv:   []string{e.c.python, "bench/anchors/torch2-consolidate.py", "safetensors", ckpt, filepath.Join(out("torch"), "model.safetensors")},
		Stdout: e.outPath(slugify(jobs[0].Name), "torch"), Before: func() error { os.RemoveAll(out("torch")); return os.MkdirAll(out("torch"), 0o755) },
	}
	jobs[0].Check = func() (string, error) { return compareSafetensors(out("ferry"), out("torch")) }
	jobs[1].Anchor.Cmd = harness.Command{
		Argv:   []string{"sh", "-c", `cp -r "$1" "$2" && sync "$2"/*`, "sh", ckpt, out("cp")},
		Stdout: e.outPath(slugify(jobs[1].Name), "cp"), Before: rm(out("cp")),
	}
	return jobs, inputs
}

// ckptGenerator writes the benchmark checkpoint with torch's own DCP
// writer (--big OUT_DIR plus the model shape).
const ckptGenerator = "bench/ckptbench/make_dcp_big_torch2.py"

// checkpoint generates (once; it is kept in the work dir) a 4-rank bf16
// checkpoint of a Llama-shaped model: ~75 MB in quick mode, ~1.5 GB full.
func (e *env) checkpoint(gen string) (string, string, error) {
	args := []string{"--layers", "16", "--hidden", "2048", "--intermediate", "5632", "--vocab", "32000", "--world-size", "4"}
	if e.c.mode == "quick" {
		args = []string{"--layers", "2", "--hidden", "512", "--intermediate", "1408", "--vocab", "32000", "--world-size", "4"}
	}
	dir := filepath.Join(e.c.work, "ckpt", slugify(strings.Join(args, " ")))
	if _, err := os.Stat(filepath.Join(dir, ".metadata")); err != nil {
		os.RemoveAll(dir)
		e.logf("generating the checkpoint %s with %s", dir, gen)
		out := e.output(e.c.python, append([]string{gen, dir}, args...)...)
		if _, err := os.Stat(filepath.Join(dir, ".metadata")); err != nil {
			return "", "", fmt.Errorf("%s %s wrote no .metadata (%s)", gen, strings.Join(args, " "), oneLine(out, 200))
		}
	}
	var n int
	var size int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n++
			size += fi.Size()
		}
		return nil
	})
	return dir, fmt.Sprintf("%s — %d files, %.0f MB, bf16, 4 ranks (%s --big %s)", dir, n, float64(size)/1e6, gen, strings.Join(args, " ")), nil
}

// storageJobs: upload and download through internal/storage vs plain
// minio-go, against a local versitygw, and a local durable copy vs cp +
// sync, driven by bench/storagebench (one side per process). The harness's
// peak RSS of a side includes the versitygw it starts; the side's own peak
// is the extra metric peak_rss_mb.
func storageJobs(e *env) ([]harness.Job, []string) {
	rss := harness.ExtraMetric{Metric: harness.Metric{Name: "peak_rss_mb", Unit: "MB"}}
	type spec struct{ name, op, anchor, anchorLabel string }
	specs := []spec{
		{"storage S3 upload " + e.c.storageSize, "upload", "minio", "plain minio-go PutObject"},
		{"storage S3 download " + e.c.storageSize, "download", "minio", "plain minio-go GetObject"},
		{"storage local copy " + e.c.storageSize, "copy", "cp-sync", "cp + sync of the copy"},
	}
	var jobs []harness.Job
	for _, s := range specs {
		jobs = append(jobs, harness.Job{
			Name: s.name, Group: "storage",
			Metric: harness.Metric{Name: "mb_per_s", Unit: "MB/s", HigherIsBetter: true},
			Extra:  []harness.ExtraMetric{rss},
			Ferry:  harness.Side{Label: "ferry internal/storage"},
			Anchor: harness.Side{Label: s.anchorLabel},
		})
	}
	if entries, _ := os.ReadDir("bench/storagebench"); len(entries) == 0 {
		return unavailable(jobs, "bench/storagebench does not exist yet"), nil
	}
	sb, why := e.goBuild("bench/storagebench")
	if why != "" {
		return unavailable(jobs, why), nil
	}
	help := e.helpText(sb)
	if why := requireFlags(help, "storagebench", "side", "op", "size"); why != "" {
		return unavailable(jobs, why), nil
	}
	dir := filepath.Join(e.c.work, "storage")
	os.MkdirAll(dir, 0o755)
	for i, s := range specs {
		if s.op != "copy" && e.tools["versitygw"] == "" {
			jobs[i].Unavailable = "versitygw is not installed (scripts/setup-test-deps installs it)"
			continue
		}
		if s.op == "copy" && !hasFlag(help, "dir") {
			jobs[i].Unavailable = "storagebench has no -dir flag for the local copy"
			continue
		}
		slug := slugify(s.name)
		for _, side := range []struct {
			side *harness.Side
			name string
		}{{&jobs[i].Ferry, "ferry"}, {&jobs[i].Anchor, s.anchor}} {
			argv := []string{sb, "-side", side.name, "-op", s.op, "-size", e.c.storageSize}
			if s.op == "copy" {
				argv = append(argv, "-dir", dir)
			}
			side.side.Cmd = harness.Command{Argv: argv, Stdout: e.outPath(slug, side.name)}
		}
	}
	return jobs, []string{"storage: one object of " + e.c.storageSize + " of random bytes; S3 through a local versitygw started by bench/storagebench; local copy in " + dir}
}

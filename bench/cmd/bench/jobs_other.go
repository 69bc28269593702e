package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
		direct.Unavailable = "python/bench_feed.py does not exist (run from the repository root)"
	}
	serve, why := e.goBuild("cmd/ferry-serve")
	switch {
	case e.torch() != "":
		daemon.Unavailable = e.torch()
	case !exists("python/bench_serve.py"):
		daemon.Unavailable = "python/bench_serve.py does not exist (run from the repository root)"
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

// ckptJobs: ckptmerge against what a torch 2.x user would run instead, on
// one FSDP2-layout bf16 checkpoint written by torch's own dcp.save
// (bench/ckptbench/make_dcp_big_torch2.py): torch's dcp_to_torch_save, the
// real `accelerate merge-weights` CLI, torch's safetensors consolidation
// (on the same tensors saved by HuggingFaceStorageWriter, the only input it
// reads), cp -r + sync of the same bytes, and the disk's direct-write floor
// (dd oflag=direct of as many bytes as ckptmerge writes). Every side puts
// its output on the disk (fsync or sync) before it stops the clock.
func ckptJobs(e *env) ([]harness.Job, []string) {
	var inputs []string
	merge := harness.Side{Label: "ferry ckptmerge"}
	wall := harness.Metric{Name: "wall_s", Unit: "s"}
	torchV, accV := e.tools["torch"], e.tools["accelerate"]
	threads := strconv.Itoa(e.c.threads)
	jobs := []harness.Job{
		{Name: "ckptmerge vs torch dcp_to_torch_save", Group: "ckptmerge", Metric: wall, Ferry: merge,
			Anchor: harness.Side{Label: "torch " + torchV + " torch.distributed.checkpoint.format_utils.dcp_to_torch_save (+ fsync)"}},
		{Name: "ckptmerge vs accelerate merge-weights", Group: "ckptmerge", Metric: wall, Ferry: merge,
			Anchor: harness.Side{Label: "accelerate " + accV + " `accelerate merge-weights` (torch " + torchV + ") + sync"}},
		{Name: "ckptmerge vs torch consolidate_safetensors_files", Group: "ckptmerge", Metric: wall, Ferry: merge,
			Anchor: harness.Side{Label: "torch " + torchV + " _consolidate_hf_safetensors.consolidate_safetensors_files, num_threads=" +
				threads + " (" + threads + " output files), on HuggingFaceStorageWriter's sharded safetensors (+ fsync)"}},
		{Name: "ckptmerge vs cp", Group: "ckptmerge", Metric: wall, Ferry: merge,
			Anchor: harness.Side{Label: "cp -r of the checkpoint + sync of the copies"}},
		{Name: "ckptmerge vs dd direct-write floor", Group: "ckptmerge", Metric: wall, Ferry: merge,
			Anchor: harness.Side{Label: "dd if=/dev/zero bs=16M oflag=direct of the merged size (the disk's durable write floor)"}},
	}
	ckptmerge, why := e.goBuild("cmd/ckptmerge")
	if why != "" {
		return unavailable(jobs, why), nil
	}
	if why := e.torch(); why != "" {
		return unavailable(jobs, why), nil
	}
	accel := filepath.Join(filepath.Dir(e.c.python), "accelerate")
	if accV == "" || !exists(accel) {
		jobs[1].Unavailable = "accelerate is not installed next to " + e.c.python + " (scripts/setup-test-deps installs it)"
	}
	if e.c.list {
		return jobs, nil // -list: do not spend minutes generating the checkpoint
	}
	ckpt, hf, desc, err := e.checkpoint(ckptGenerator)
	if err != nil {
		return unavailable(jobs, "generating the checkpoint: "+err.Error()), nil
	}
	inputs = append(inputs, "ckptmerge: "+desc)
	out := func(side string) string { return filepath.Join(e.c.work, "out-"+e.c.mode, "ckpt."+side) }
	rm := func(dir string) func() error { return func() error { return os.RemoveAll(dir) } }
	mkdir := func(dir string) func() error {
		return func() error { os.RemoveAll(dir); return os.MkdirAll(dir, 0o755) }
	}
	for i := range jobs {
		if e.c.mode == "quick" && i < 3 {
			jobs[i].MaxPairs = 1 // torch's import dominates the small checkpoint
			jobs[i].NoWarmup = true
		}
		slug := slugify(jobs[i].Name)
		jobs[i].Ferry.Cmd = harness.Command{Argv: []string{ckptmerge, ckpt, out("ferry")},
			Stdout: e.outPath(slug, "ferry"), Before: rm(out("ferry"))}
	}
	py := "bench/anchors/torch2-consolidate.py"
	jobs[0].Anchor.Cmd = harness.Command{
		Argv:   []string{e.c.python, py, "torch_save", ckpt, filepath.Join(out("torch-save"), "model.pt")},
		Stdout: e.outPath(slugify(jobs[0].Name), "torch"), Before: mkdir(out("torch-save")),
	}
	jobs[1].Anchor.Cmd = harness.Command{
		Argv:   []string{"sh", "-c", `"$1" merge-weights "$2" "$3" && sync "$3"/*`, "sh", accel, ckpt, out("accelerate")},
		Stdout: e.outPath(slugify(jobs[1].Name), "accelerate"), Before: rm(out("accelerate")),
	}
	jobs[1].Check = func() (string, error) { return compareSafetensors(out("ferry"), out("accelerate")) }
	jobs[2].Anchor.Cmd = harness.Command{
		Argv:   []string{e.c.python, py, "hf_consolidate", hf, out("torch-hf"), threads},
		Stdout: e.outPath(slugify(jobs[2].Name), "torch"), Before: rm(out("torch-hf")),
	}
	jobs[2].Check = func() (string, error) { return compareSafetensors(out("ferry"), out("torch-hf")) }
	jobs[3].Anchor.Cmd = harness.Command{
		Argv:   []string{"sh", "-c", `cp -r "$1" "$2" && sync "$2"/*`, "sh", ckpt, out("cp")},
		Stdout: e.outPath(slugify(jobs[3].Name), "cp"), Before: rm(out("cp")),
	}
	// The floor writes ckptmerge's output size, rounded up to 16 MiB blocks.
	blocks := strconv.FormatInt((dirSize(ckpt)+16<<20-1)/(16<<20), 10)
	jobs[4].Anchor.Cmd = harness.Command{
		Argv:   []string{"dd", "if=/dev/zero", "of=" + out("dd"), "bs=16M", "count=" + blocks, "oflag=direct", "status=none"},
		Stdout: e.outPath(slugify(jobs[4].Name), "dd"), Before: rm(out("dd")),
	}
	return jobs, inputs
}

// ckptGenerator writes the benchmark checkpoint with torch's own DCP
// writer (--big OUT_DIR plus the model shape).
const ckptGenerator = "bench/ckptbench/make_dcp_big_torch2.py"

// checkpoint generates (once; it is kept in the work dir) a 4-rank bf16
// checkpoint of a Llama-shaped model, ~75 MB in quick mode, ~1.7 GB full
// (-ckpt-layers changes the number of layers),
// and the same tensors as torch's sharded HF safetensors (the input of
// torch's consolidation). It returns both directories and a description.
func (e *env) checkpoint(gen string) (string, string, string, error) {
	args := []string{"--layers", "16", "--hidden", "2048", "--intermediate", "5632", "--vocab", "32000", "--world-size", "4"}
	if e.c.mode == "quick" {
		args = []string{"--layers", "2", "--hidden", "512", "--intermediate", "1408", "--vocab", "32000", "--world-size", "4"}
	}
	if e.c.ckptLayers > 0 {
		args[1] = strconv.Itoa(e.c.ckptLayers)
	}
	dir := filepath.Join(e.c.work, "ckpt", slugify(strings.Join(args, " ")))
	hf := dir + ".hf-sharded"
	done := filepath.Join(dir, ".ferry-bench-complete")
	if _, err := os.Stat(done); err != nil {
		os.RemoveAll(dir)
		os.RemoveAll(hf)
		e.logf("generating the checkpoint %s (and %s) with %s", dir, hf, gen)
		// outputOK: no time limit (the full checkpoint takes a minute or
		// more; e.output's 30 s limit killed it) and stderr in the error
		out, _ := e.outputOK(nil, append([]string{e.c.python, gen, dir, "--hf-out", hf}, args...)...)
		if _, err := os.Stat(filepath.Join(dir, ".metadata")); err != nil {
			return "", "", "", fmt.Errorf("%s %s wrote no .metadata (%s)", gen, strings.Join(args, " "), oneLine(out, 200))
		}
		if m, _ := filepath.Glob(filepath.Join(hf, "*.safetensors")); len(m) == 0 {
			return "", "", "", fmt.Errorf("%s --hf-out %s wrote no .safetensors (%s)", gen, hf, oneLine(out, 200))
		}
		if err := os.WriteFile(done, nil, 0o644); err != nil {
			return "", "", "", err
		}
	}
	var n int
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
			n++
		}
		return nil
	})
	return dir, hf, fmt.Sprintf("%s — %d files, %.0f MB, bf16, 4 ranks, FSDP2 layout (DTensor Shard(0)), torch %s dcp.save (%s %s); "+
		"the same tensors as HuggingFaceStorageWriter(save_distributed=True) sharded safetensors in %s for torch's consolidation",
		dir, n, float64(dirSize(dir))/1e6, e.tools["torch"], gen, strings.Join(args, " "), hf), nil
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var size int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			size += fi.Size()
		}
		return nil
	})
	return size
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
		return unavailable(jobs, "bench/storagebench does not exist (run from the repository root)"), nil
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

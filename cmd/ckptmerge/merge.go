package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ferryml/ferry/ckpt"
	"github.com/ferryml/ferry/internal/cli"
)

const mergeUsage = `Usage: ckptmerge [flags] CKPT OUT
       ckptmerge inspect [--json] CKPT

Consolidates a sharded torch.distributed.checkpoint (DCP) directory into a
Hugging Face safetensors model: OUT/model.safetensors, or above
--max-shard-size OUT/model-0000k-of-0000n.safetensors plus
OUT/model.safetensors.index.json (written last). CKPT and OUT are local
paths, mounted volumes or s3://bucket/prefix URLs.

CKPT may be a DCP directory (.metadata + *.distcp, torch 1.13 or 2.x), an
accelerate checkpoint (its pytorch_model_fsdp_0/ is used), a torchtitan
checkpoint folder (the highest step-N/ is used), or a directory of
safetensors shards written by torch's HuggingFaceStorageWriter
(DCP_SHARDING_INFO).

Keys are cleaned: a wrapper every tensor is nested in (the "app" of
PyTorch's dcp.save({"app": AppState})), the "model" of {"model": ...,
"optim": ...} (accelerate, get_state_dict), _fsdp_wrapped_module.,
_checkpoint_wrapped_module., _orig_mod. and a shared DDP "module." prefix are
removed. Optimizer and other training state, and non-tensor (bytes) items,
are left out unless --include-optimizer (bytes items always are).

Examples:
  ckptmerge ckpt/step-1000 hf/                        # one model.safetensors (or shards)
  ckptmerge --dtype bf16 --config-from base/ out/pytorch_model_fsdp_0 hf/
  ckptmerge --max-shard-size 2GB s3://runs/job7/ckpt s3://models/job7
  ckptmerge CKPT /Volumes/main/ml/models/job7         # FUSE volume: written front to back (--write-mode auto)
  ckptmerge --strip-prefix base_model. --rename 'layers\.(\d+)\.attn=layers.$1.self_attn' CKPT OUT
  ckptmerge inspect ckpt/step-1000

Exit status: 0 success, 1 error, 2 bad usage, 130 interrupted.

Flags:
`

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(s string) error { *l = append(*l, s); return nil }

type mergeConfig struct {
	ckpt, out        string
	dtype            string
	maxShard         string
	includeOptimizer bool
	keepKeys         bool
	strip, rename    listFlag
	configFrom       string
	force, verify    bool
	jsonOut, quiet   bool
	parallelism      int
	bufferSize       int
	noKernelCopy     bool
	noDirectIO       bool
	writeMode        string
}

func mergeMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c mergeConfig
	fs := flag.NewFlagSet("ckptmerge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, mergeUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.dtype, "dtype", "keep", "output dtype of floating tensors: keep, bf16, fp16 or fp32")
	fs.StringVar(&c.maxShard, "max-shard-size", "5GB", "split the output into shards of at most this size (HF naming; GB=1e9, GiB=2^30)")
	fs.BoolVar(&c.includeOptimizer, "include-optimizer", false, "also write optimizer and other training-state tensors")
	fs.BoolVar(&c.keepKeys, "keep-keys", false, "write keys as saved (no automatic prefix/wrapper cleaning)")
	fs.Var(&c.strip, "strip-prefix", "remove this prefix from tensor names (repeatable)")
	fs.Var(&c.rename, "rename", "REGEXP=REPLACEMENT applied to tensor names after cleaning (repeatable)")
	fs.StringVar(&c.configFrom, "config-from", "", "copy config.json, generation_config.json and tokenizer files from this directory")
	fs.BoolVar(&c.force, "force", false, "replace an existing model in OUT")
	fs.BoolVar(&c.verify, "verify", false, "re-read the output and compare every tensor with the source; per-tensor SHA-256 in the summary")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as JSON on stdout")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress and no summary line")
	fs.IntVar(&c.parallelism, "parallelism", 0, "copy workers (default: number of CPUs, at least 4, at most 8)")
	fs.BoolVar(&c.noDirectIO, "no-direct-io", false, "write local outputs through the page cache even where the file system supports direct I/O (O_DIRECT)")
	fs.BoolVar(&c.noKernelCopy, "no-kernel-copy", false, "without direct I/O, copy through user-space buffers even where an in-kernel copy (copy_file_range) is possible")
	fs.StringVar(&c.writeMode, "write-mode", "auto", "how local output files are written: sequential (front to back by one writer, for volumes that refuse other writes), parallel (positioned writes from every worker) or auto (sequential on FUSE mounts such as /Volumes, parallel elsewhere)")
	fs.IntVar(&c.bufferSize, "buffer-size", 0, "bytes per copy buffer (default 4 MiB; direct I/O writes spans of this size); memory is at most about 3 x parallelism x buffer")
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return fmt.Errorf("%w: want CKPT and OUT, got %d arguments", errUsage, len(pos))
	}
	c.ckpt, c.out = pos[0], pos[1]
	if _, err := ckpt.ParseWriteMode(c.writeMode); err != nil {
		return fmt.Errorf("%w: --write-mode: %v", errUsage, err)
	}
	return runMerge(ctx, c, stdout, stderr)
}

func runMerge(ctx context.Context, c mergeConfig, stdout, stderr io.Writer) error {
	po := ckpt.PlanOptions{}
	if c.dtype != "keep" && c.dtype != "" {
		d, err := ckpt.ParseDType(c.dtype)
		if err != nil || !d.IsFloat() {
			return fmt.Errorf("%w: --dtype %q: want keep, bf16, fp16 or fp32", errUsage, c.dtype)
		}
		po.DType = d
	}
	n, err := ckpt.ParseSize(c.maxShard)
	if err != nil {
		return fmt.Errorf("%w: --max-shard-size: %v", errUsage, err)
	}
	po.MaxShardSize = n
	ko := ckpt.KeyOptions{IncludeOptimizer: c.includeOptimizer, StripPrefixes: c.strip, KeepKeys: c.keepKeys}
	for _, r := range c.rename {
		rr, err := ckpt.ParseRename(r)
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		ko.Renames = append(ko.Renames, rr)
	}
	if c.parallelism < 0 || c.bufferSize < 0 {
		return fmt.Errorf("%w: --parallelism and --buffer-size must be positive", errUsage)
	}
	dir, note, err := ckpt.Locate(ctx, c.ckpt)
	if err != nil {
		return err
	}
	if note != "" && !c.quiet && !c.jsonOut {
		fmt.Fprintf(stderr, "ckptmerge: %s\n", note)
	}
	ck, err := ckpt.Open(ctx, ckpt.SourceFor(dir))
	if err != nil {
		return err
	}
	defer ck.Close()
	sel, skipped, err := ckpt.SelectTensors(ck.Meta, ko)
	if err != nil {
		return err
	}
	if len(sel) == 0 {
		return fmt.Errorf("%s: no tensors to write (%d items skipped)", dir, len(skipped))
	}
	plan, err := ckpt.NewPlan(sel, skipped, po)
	if err != nil {
		return err
	}
	mo := ckpt.MergeOptions{Parallelism: c.parallelism, BufferSize: c.bufferSize, Force: c.force, Verify: c.verify, NoKernelCopy: c.noKernelCopy, NoDirectIO: c.noDirectIO}
	mo.WriteMode, _ = ckpt.ParseWriteMode(c.writeMode) // checked with the flags
	if c.configFrom != "" {
		mo.ConfigFrom = ckpt.SourceFor(c.configFrom)
	}
	var total int64
	for _, f := range plan.Files {
		total += f.Size
	}
	// a progress line on a terminal only (off one, the summary suffices)
	var done atomic.Int64
	start := time.Now()
	prog := cli.NewProgress(stderr, c.quiet || c.jsonOut, 0, func() string {
		d := done.Load()
		el := time.Since(start).Seconds()
		return fmt.Sprintf("merging: %s / %s (%d%%) %s/s", human(d), human(total), d*100/max(total, 1), human(int64(float64(d)/max(el, 1e-9))))
	})
	if prog.Active() {
		mo.OnProgress = func(n int64) { done.Add(n) }
	}
	res, err := ckpt.Merge(ctx, ck, plan, ckpt.SinkFor(c.out), mo)
	prog.Stop()
	if err != nil {
		return err
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Input  string `json:"input"`
			Format string `json:"format"`
			*ckpt.Result
			PeakRSS int64 `json:"peak_rss_bytes,omitempty"`
		}{dir, ck.Format, res, cli.PeakRSS()})
	}
	if !c.quiet {
		printSummary(stderr, dir, res, total)
	}
	return nil
}

func printSummary(w io.Writer, dir string, res *ckpt.Result, total int64) {
	names := make([]string, len(res.Files))
	for i, f := range res.Files {
		names[i] = f.Name
	}
	if res.Index != "" {
		names = append(names, res.Index)
	}
	rate := float64(total) / max(res.Seconds, 1e-9)
	var paths []string
	for _, f := range res.Files {
		if !slices.Contains(paths, f.IO) {
			paths = append(paths, f.IO)
		}
	}
	fmt.Fprintf(w, "ckptmerge: %s -> %s: %d tensors, %s in %d file(s) in %.2fs (%s/s, %s)\n",
		dir, res.Output, len(res.Tensors), human(total), len(res.Files), res.Seconds, human(int64(rate)), strings.Join(paths, ", "))
	if len(res.Skipped) > 0 {
		reasons := map[string]int{}
		for _, s := range res.Skipped {
			reasons[s.Reason]++
		}
		keys := make([]string, 0, len(reasons))
		for r := range reasons {
			keys = append(keys, r)
		}
		sort.Strings(keys)
		for _, r := range keys {
			fmt.Fprintf(w, "ckptmerge: skipped %d item(s): %s\n", reasons[r], r)
		}
	}
	if len(res.Copied) > 0 {
		fmt.Fprintf(w, "ckptmerge: copied %s\n", strings.Join(res.Copied, ", "))
	}
	if res.Verified {
		fmt.Fprintf(w, "ckptmerge: verified %d tensors against the source (sha256 per tensor with --json)\n", len(res.Tensors))
	}
	fmt.Fprintf(w, "ckptmerge: wrote %s\n", strings.Join(names, ", "))
}

func human(n int64) string {
	f := float64(n)
	for _, u := range []string{"B", "kB", "MB", "GB", "TB"} {
		if f < 1000 || u == "TB" {
			if u == "B" {
				return fmt.Sprintf("%d B", n)
			}
			return fmt.Sprintf("%.2f %s", f, u)
		}
		f /= 1000
	}
	return ""
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
)

const commitUsage = `usage: dataprep commit OUT [--parts LOC] [--force] [--json] [--quiet]

Lays out the parts of a split run (dataprep --part I/N ... --out OUT, for
I = 0..N-1, in any order and on any machines) into OUT: the same shards,
loss_tokens.u32 and manifest.json, byte for byte, as one dataprep run with
the same inputs and flags (only manifest.json's stats.seconds differs: here
it is the slowest part's time plus commit's).

It first checks that every part 0..N-1 is there and whole: each part
manifest, its file's size and SHA-256, its record and token counts, the same
tokenizer, options and input files in every part, and shares that tile the
input. Any problem fails naming the part, and OUT gets no manifest.json.
Part files on S3 are downloaded to a temporary directory, local ones are
mapped: commit holds one small entry per example in memory, not the tokens.

Examples:
  for i in 0 1 2; do dataprep --part $i/3 --input 'data/train-*.jsonl' \
      --tokenizer models/Qwen2.5-3B --mode pack --ranks 16 --out shards/ & done; wait
  dataprep commit shards/
  dataprep commit s3://bucket/shards --parts /mnt/shared/parts

Flags:
`

func runCommit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var c prep.CommitConfig
	var quiet, jsonOut bool
	var progressEvery time.Duration
	fs := flag.NewFlagSet("dataprep commit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, commitUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.Parts, "parts", "", "directory or s3:// prefix of the part files (default OUT/parts)")
	fs.BoolVar(&c.Force, "force", false, "replace an existing result in OUT")
	fs.BoolVar(&quiet, "quiet", false, "no progress and no summary on stderr")
	fs.BoolVar(&jsonOut, "json", false, "print the summary as one JSON object on stdout")
	fs.IntVar(&c.Workers, "workers", runtime.NumCPU(), "parallel checksum and write workers (the output is identical for any value)")
	fs.DurationVar(&progressEvery, "progress-every", 5*time.Second, "interval of the progress lines when stderr is not a terminal")
	bad := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "dataprep commit: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run dataprep commit --help for usage")
		return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return bad("want one output directory, got %d arguments", len(pos))
	case c.Workers < 1:
		return bad("--workers %d: want >= 1", c.Workers)
	}
	c.Out = pos[0]
	t0 := time.Now()
	prog := cli.NewPhases(stderr, quiet, progressEvery, "dataprep[commit]")
	defer prog.Stop()
	c.Progress = prog
	res, err := prep.Commit(ctx, c)
	if err != nil {
		return err
	}
	prog.Stop()
	s := prep.NewSummary(c.Out, c.Workers, res, time.Since(t0).Seconds())
	return printReport(jsonOut, quiet, &s, res.Manifest, stdout, stderr)
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

const prepUsage = `usage: dataprep --input FILE [--input FILE...] --tokenizer PATH --out DIR [flags]
       dataprep --recipe MIX.yaml --tokenizer PATH --out DIR [flags]   (a mixture: docs/mixtures.md)
       dataprep --part I/N [the same flags] [--parts LOC]   (one part of a split run)
       dataprep commit DIR [--parts LOC] [--force] [--json]  (see dataprep commit --help)
       dataprep inspect DIR [--rank R --row N]
       dataprep tokenize --tokenizer PATH [IN.jsonl]   (see dataprep tokenize --help)

Tokenizes an Alpaca-style dataset (JSON array, JSON Lines or Parquet, optionally
gzip/zstd, local or s3://) once, with the same ids as Hugging Face tokenizers,
and writes one fixed-length Arrow shard per training rank plus manifest.json
(written last: a directory without it is not a result).

Examples:
  # seed parity: what tokenizer(text, truncation=True, max_length=1024,
  # padding="max_length") and labels = input_ids give, for 16 ranks
  dataprep --input alpaca_data.json --tokenizer models/Qwen2.5-3B \
      --eos '<|endoftext|>' --labels copy --ranks 16 --out shards/
  # packed rows, loss on the response only, straight to S3
  dataprep --input s3://data/alpaca.parquet --tokenizer models/Llama-3.1-8B \
      --eos '<|end_of_text|>' --mode pack --labels mask-prompt --ranks 16 --out s3://bucket/shards/
  # a split in several files (a glob, or --input repeated), read in order
  dataprep --input 'alpaca/data/train-*.parquet' --tokenizer models/Qwen2.5-3B --out shards/
  dataprep inspect shards/ --rank 3 --row 0
  # conversations (messages / ShareGPT conversations), loss on the assistant's turns
  dataprep --input chats.jsonl --tokenizer models/Qwen2.5-3B --mode pack --ranks 16 --out shards/

Chat data (--format chat, detected when the first record has "messages" or
"conversations"): each conversation is rendered with the tokenizer
directory's chat template (or --chat-template) exactly as transformers'
apply_chat_template does and tokenized without adding special tokens (the
template writes the BOS). --labels (docs/chat.md):
  assistant       (default) for every assistant message: from the first token
                  that overlaps what the template writes for it (content,
                  reasoning, tool calls) through the first added special token
                  after it (the end of turn: <|im_end|>, <|eot_id|>, </s>, ...),
                  whitespace between included; headers and every system, user
                  and tool token get -100
  last-assistant  the same for the final assistant message only
  generation      the template's {% generation %} spans, as transformers'
                  return_assistant_tokens_mask (TRL's *_training.jinja templates)
  all             every non-pad token
A template that leaves an end-of-turn untrained or gives an all-zero or all-one
mask is refused. --seq-len keeps a conversation's start; one whose trained
tokens are all cut off is dropped and counted. --date pins strftime_now.

Split runs (docs/parts.md): --part I/N reads only part I's share of the
input (whole files; a plain JSON Lines file may be cut between records),
tokenizes it and writes part-I-of-N.bin and its manifest into --parts
(default OUT/parts), atomically; run every I = 0..N-1 anywhere, in any
order, then "dataprep commit OUT", which checks the parts and writes OUT
byte-identical to a single run (manifest.json's stats.seconds aside):
  for i in 0 1 2; do dataprep --part $i/3 --input 'data/*.jsonl' --tokenizer models/Qwen2.5-3B \
      --mode pack --ranks 16 --out s3://bucket/shards & done; wait
  dataprep commit s3://bucket/shards

Flags:
`

// inputList is the repeatable --input flag.
type inputList []string

func (l *inputList) String() string { return strings.Join(*l, ", ") }

func (l *inputList) Set(v string) error {
	if v == "" {
		return errors.New("empty input")
	}
	*l = append(*l, v)
	return nil
}

// loadTokenizer loads a tokenizer; tests replace it with a memoizing one.
var loadTokenizer = tokenize.Load

// prepFlags is a dataprep run's command line: the pipeline's Config, the
// split-run part, and how to report.
type prepFlags struct {
	cfg            prep.Config
	part           prep.Part
	split          bool // --part given
	quiet, jsonOut bool
	progressEvery  time.Duration
	cpuProfile     string
}

func parsePrepFlags(args []string, stderr io.Writer) (*prepFlags, error) {
	f := &prepFlags{}
	c := &f.cfg
	fs := flag.NewFlagSet("dataprep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, prepUsage)
		fs.PrintDefaults()
	}
	var inputs inputList
	var eos, pad, onBad string
	fs.Var(&inputs, "input", "input `file`: path or s3://bucket/key, or a glob of several (*, ?, [...]); repeat for more files, read in the order given (required)")
	fs.StringVar(&c.Recipe, "recipe", "", "a mixture's recipe `file` (YAML or JSON) instead of --input: sources, each with its inputs, format and weight (a share of the output's tokens) or repeat (epochs); see docs/mixtures.md")
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	fs.StringVar(&c.Out, "out", "", "output `directory` or s3:// prefix (required)")
	fs.IntVar(&c.Layout.SeqLen, "seq-len", 1024, "tokens per row (HF max_length)")
	fs.IntVar(&c.Ranks, "ranks", 1, "number of shards = training world size")
	fs.StringVar((*string)(&c.Layout.Mode), "mode", "pad", "pad: one example per row (the seeds' padding=\"max_length\"); pack: whole examples packed into rows")
	fs.StringVar((*string)(&c.Layout.Labels), "labels", "", "Alpaca: mask-pad (default): -100 on padding; copy: labels = input_ids, pads included (seed parity); mask-prompt: -100 on padding and prompt.\nchat: assistant (default), last-assistant, generation or all (see above)")
	fs.StringVar(&c.Format, "format", "", "input `format`: alpaca or chat (default: chat when the first record has \"messages\" or \"conversations\")")
	fs.StringVar(&c.ChatTemplate, "chat-template", "", "chat: a Jinja chat template `file` instead of the tokenizer directory's")
	fs.StringVar(&c.ChatTemplateName, "template-name", "", "chat: which of the directory's named chat templates (e.g. tool_use)")
	fs.StringVar(&c.Date, "date", "", "chat: pin strftime_now to `YYYY-MM-DD` (default: the run's start, local time); stored in the manifest")
	fs.BoolVar(&c.SplitLong, "split-long", false, "pack mode: split an example longer than --seq-len into several instead of truncating it")
	fs.Uint64Var(&c.Seed, "seed", 0, "shuffle seed")
	fs.Int64Var(&c.MaxRecords, "max-records", 0, "use only the input's first `N` records, in input order (datasets' split=\"train[:N]\"); an input with fewer is an error (default: all)")
	fs.BoolVar(&c.DropLast, "drop-last", false, "drop the tail rows so every rank has floor(rows/ranks) rows (default: wrap around like DistributedSampler)")
	fs.IntVar(&c.Workers, "workers", runtime.NumCPU(), "parallel tokenizer workers; shards are written by max(workers, min(ranks, 8)) (the output is identical for any value)")
	fs.StringVar(&c.TemplateFile, "template", "", "template `file` ({instruction} {input} {output} {eos} {bos}, {?input}...{/input}); default: the seeds' Alpaca prompt")
	fs.StringVar(&eos, "eos", "", "EOS `token` appended by the template (default: the tokenizer's eos_token)")
	fs.StringVar(&pad, "pad", "", "padding `token` (default: the tokenizer's pad_token, else the EOS token, as the seeds set pad_token = eos_token)")
	fs.BoolVar(&c.NoSpecial, "no-special", false, "add_special_tokens=false: no BOS/EOS from the tokenizer's post-processor")
	fs.IntVar(&c.BatchRows, "batch-rows", shard.DefaultBatchRows, "rows per Arrow record batch")
	fs.StringVar(&onBad, "on-bad-record", "error", "error: stop at the first bad record; skip: skip and count it")
	fs.BoolVar(&c.Force, "force", false, "replace an existing result in --out")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress and no summary on stderr")
	fs.BoolVar(&f.jsonOut, "json", false, "print the summary as one JSON object on stdout")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a Go CPU profile to `file` (for performance work)")
	fs.DurationVar(&f.progressEvery, "progress-every", 5*time.Second, "interval of the progress lines when stderr is not a terminal")
	var part string
	fs.StringVar(&part, "part", "", "run part `I/N` (0-based) of a split run: tokenize only this part's share of the input into --parts; then dataprep commit OUT (see docs/parts.md)")
	fs.StringVar(&f.part.Loc, "parts", "", "with --part: directory or s3:// prefix of the part files (default OUT/parts)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	bad := func(format string, a ...any) (*prepFlags, error) {
		fmt.Fprintf(stderr, "dataprep: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run dataprep --help for usage")
		return nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	c.Inputs = inputs
	if cli.FlagGiven(fs, "eos") {
		c.EOS = &eos
	}
	if cli.FlagGiven(fs, "pad") {
		c.Pad = &pad
	}
	// --mode and --labels are checked by Validate
	if part != "" {
		loc := f.part.Loc
		var err error
		if f.part, err = prep.ParsePart(part); err != nil {
			return bad("%s", configMsg(err))
		}
		f.part.Loc, f.split = loc, true
	} else if f.part.Loc != "" {
		return bad("--parts needs --part (or: dataprep commit OUT --parts LOC)")
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case c.Workers < 1:
		return bad("--workers %d: want >= 1", c.Workers)
	case c.BatchRows < 1:
		return bad("--batch-rows %d: want 1..%d", c.BatchRows, 1<<20)
	case onBad != "error" && onBad != "skip":
		return bad("--on-bad-record %q: want error or skip", onBad)
	}
	c.SkipBad = onBad == "skip"
	if err := c.Validate(); err != nil {
		return bad("%s", configMsg(err))
	}
	return f, nil
}

func runPrep(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	f, err := parsePrepFlags(args, stderr)
	if err != nil {
		return err
	}
	prefix := "dataprep"
	if f.split {
		prefix = fmt.Sprintf("dataprep[part %d/%d]", f.part.I, f.part.N)
	}
	defer func() {
		if errors.Is(err, prep.ErrConfig) {
			// A usage error found once the tokenizer is loaded (an unknown
			// --eos, a --seq-len too small for the template): printed here,
			// as parsePrepFlags prints its own.
			fmt.Fprintf(stderr, "dataprep: %s\nrun dataprep --help for usage\n", configMsg(err))
			err = cli.Usage(err)
		}
		// A part's error says which part (launchers interleave the logs).
		if f.split && err != nil && !errors.Is(err, errUsage) {
			err = fmt.Errorf("%s: %w", prefix, err)
		}
	}()
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	t0 := time.Now()
	prog := cli.NewPhases(stderr, f.quiet, f.progressEvery, prefix)
	defer prog.Stop()
	f.cfg.LoadTokenizer = loadTokenizer
	f.cfg.Progress = prog
	if f.split {
		pr, err := prep.RunPart(ctx, f.cfg, f.part)
		if err != nil {
			return err
		}
		prog.Stop()
		printPart(f, pr, time.Since(t0).Seconds(), prog, stdout)
		return nil
	}
	res, err := prep.Run(ctx, f.cfg)
	if err != nil {
		return err
	}
	prog.Stop()
	s := prep.NewSummary(f.cfg.Out, f.cfg.Workers, res, time.Since(t0).Seconds())
	return printReport(f.jsonOut, f.quiet, &s, res.Manifest, stdout, stderr)
}

// printReport prints the summary: JSON on stdout with --json, text on stderr
// unless --quiet.
func printReport(jsonOut, quiet bool, s *prep.Summary, m *shard.Manifest, stdout, stderr io.Writer) error {
	if jsonOut {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !quiet {
		printSummary(stderr, s, m)
	}
	return nil
}

func printSummary(w io.Writer, s *prep.Summary, m *shard.Manifest) {
	effName := "padding efficiency"
	if s.Mode == string(shard.ModePack) {
		effName = "packing efficiency"
	}
	fmt.Fprintf(w, "dataprep: %s -> %s\n", s.Input, s.Out)
	fmt.Fprintf(w, "  records   %d read, %d skipped, %d truncated", s.RecordsRead, s.RecordsSkipped, s.RecordsTruncated)
	if s.RecordsSplit > 0 {
		fmt.Fprintf(w, ", %d split", s.RecordsSplit)
	}
	if s.RecordsDropped > 0 {
		fmt.Fprintf(w, ", %d dropped (truncation cut every trained token)", s.RecordsDropped)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  tokens    %d (+%d pad), %s %.1f%%\n", s.Tokens, s.PadTokens, effName, 100*s.Efficiency)
	for i, src := range s.Sources {
		fmt.Fprintf(w, "  source %d  %s (%s): %d records read, %d used %.2f times on average, %d tokens, share %.4f (asked %.4f)\n",
			i, src.Name, src.Format, src.RecordsRead, src.RecordsUsed, src.Repeats, src.Tokens, src.Share, src.ShareAsked)
	}
	extra := ""
	if m.Stats.RowsRepeated > 0 {
		extra = fmt.Sprintf(", %d repeated to even out ranks", m.Stats.RowsRepeated)
	}
	if m.Stats.RowsDropped > 0 {
		extra = fmt.Sprintf(", %d dropped (--drop-last)", m.Stats.RowsDropped)
	}
	fmt.Fprintf(w, "  rows      %d unique, %d ranks × %d rows of %d tokens (%s, labels %s)%s\n",
		s.UniqueRows, s.Ranks, s.RowsPerRank, s.SeqLen, s.Mode, s.Labels, extra)
	fmt.Fprintf(w, "  output    %d files, %.1f MB\n", s.Ranks, float64(s.OutputBytes)/1e6)
	fmt.Fprintf(w, "  time      %.2f s (read %.2f, tokenize %.2f, write %.2f), %.1f MB/s of input, %d workers\n",
		s.Seconds, s.ReadSeconds, s.TokenizeSeconds, s.WriteSeconds, s.MBPerSec, s.Workers)
}

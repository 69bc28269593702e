package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

const prepUsage = `usage: dataprep --input FILE [--input FILE...] --tokenizer PATH --out DIR [flags]
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

// prepConfig is the configuration of one dataprep run.
type prepConfig struct {
	inputs         inputList
	input          string // the inputs as named in the manifest and summary
	tokenizer, out string
	templateFile   string
	eos, pad       string
	eosSet, padSet bool
	noSpecial      bool
	seqLen, ranks  int
	mode           shard.Mode
	labels         shard.Labels
	splitLong      bool
	seed           uint64
	dropLast       bool
	maxRecords     int64
	workers        int
	batchRows      int
	onBad          string
	force          bool
	quiet, jsonOut bool
	progressEvery  time.Duration
	cpuProfile     string
	// --part I/N (parts = 0: a whole run) and --parts LOC
	part, parts int
	partsLoc    string
}

func parsePrepFlags(args []string, stderr io.Writer) (*prepConfig, error) {
	c := &prepConfig{}
	fs := flag.NewFlagSet("dataprep", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, prepUsage)
		fs.PrintDefaults()
	}
	var mode, labels string
	fs.Var(&c.inputs, "input", "input `file`: path or s3://bucket/key, or a glob of several (*, ?, [...]); repeat for more files, read in the order given (required)")
	fs.StringVar(&c.tokenizer, "tokenizer", "", "tokenizer.json, tokenizer.json.zst or a model `directory` (required)")
	fs.StringVar(&c.out, "out", "", "output `directory` or s3:// prefix (required)")
	fs.IntVar(&c.seqLen, "seq-len", 1024, "tokens per row (HF max_length)")
	fs.IntVar(&c.ranks, "ranks", 1, "number of shards = training world size")
	fs.StringVar(&mode, "mode", "pad", "pad: one example per row (the seeds' padding=\"max_length\"); pack: whole examples packed into rows")
	fs.StringVar(&labels, "labels", "mask-pad", "mask-pad: -100 on padding; copy: labels = input_ids, pads included (seed parity); mask-prompt: -100 on padding and prompt")
	fs.BoolVar(&c.splitLong, "split-long", false, "pack mode: split an example longer than --seq-len into several instead of truncating it")
	fs.Uint64Var(&c.seed, "seed", 0, "shuffle seed")
	fs.Int64Var(&c.maxRecords, "max-records", 0, "use only the input's first `N` records, in input order (datasets' split=\"train[:N]\"); an input with fewer is an error (default: all)")
	fs.BoolVar(&c.dropLast, "drop-last", false, "drop the tail rows so every rank has floor(rows/ranks) rows (default: wrap around like DistributedSampler)")
	fs.IntVar(&c.workers, "workers", runtime.NumCPU(), "parallel tokenizer workers; shards are written by max(workers, min(ranks, 8)) (the output is identical for any value)")
	fs.StringVar(&c.templateFile, "template", "", "template `file` ({instruction} {input} {output} {eos} {bos}, {?input}...{/input}); default: the seeds' Alpaca prompt")
	fs.StringVar(&c.eos, "eos", "", "EOS `token` appended by the template (default: the tokenizer's eos_token)")
	fs.StringVar(&c.pad, "pad", "", "padding `token` (default: the tokenizer's pad_token, else the EOS token, as the seeds set pad_token = eos_token)")
	fs.BoolVar(&c.noSpecial, "no-special", false, "add_special_tokens=false: no BOS/EOS from the tokenizer's post-processor")
	fs.IntVar(&c.batchRows, "batch-rows", shard.DefaultBatchRows, "rows per Arrow record batch")
	fs.StringVar(&c.onBad, "on-bad-record", "error", "error: stop at the first bad record; skip: skip and count it")
	fs.BoolVar(&c.force, "force", false, "replace an existing result in --out")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress and no summary on stderr")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object on stdout")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a Go CPU profile to `file` (for performance work)")
	fs.DurationVar(&c.progressEvery, "progress-every", 5*time.Second, "interval of the progress lines when stderr is not a terminal")
	var part string
	fs.StringVar(&part, "part", "", "run part `I/N` (0-based) of a split run: tokenize only this part's share of the input into --parts; then dataprep commit OUT (see docs/parts.md)")
	fs.StringVar(&c.partsLoc, "parts", "", "with --part: directory or s3:// prefix of the part files (default OUT/parts)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	bad := func(format string, a ...any) (*prepConfig, error) {
		fmt.Fprintf(stderr, "dataprep: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run dataprep --help for usage")
		return nil, fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	c.eosSet, c.padSet = flagSet(fs, "eos"), flagSet(fs, "pad")
	c.input = c.inputs.String()
	var err error
	if c.mode, err = shard.ParseMode(mode); err != nil {
		return bad("--mode %q: want pad or pack", mode)
	}
	if c.labels, err = shard.ParseLabels(labels); err != nil {
		return bad("--labels %q: want mask-pad, copy or mask-prompt", labels)
	}
	if part != "" {
		i, n, ok := strings.Cut(part, "/")
		var err1, err2 error
		c.part, err1 = strconv.Atoi(i)
		c.parts, err2 = strconv.Atoi(n)
		if !ok || err1 != nil || err2 != nil || c.parts < 1 || c.parts > shard.MaxParts || c.part < 0 || c.part >= c.parts {
			return bad("--part %q: want I/N with 0 <= I < N <= %d", part, shard.MaxParts)
		}
	} else if c.partsLoc != "" {
		return bad("--parts needs --part (or: dataprep commit OUT --parts LOC)")
	}
	if c.parts > 0 && c.partsLoc == "" && c.out != "" {
		c.partsLoc = storage.Join(c.out, "parts")
	}
	switch {
	case fs.NArg() > 0:
		return bad("unexpected argument %q", fs.Arg(0))
	case len(c.inputs) == 0:
		return bad("--input is required")
	case c.tokenizer == "":
		return bad("--tokenizer is required")
	case c.out == "":
		return bad("--out is required")
	case c.seqLen < 1 || c.seqLen > shard.MaxSeqLen:
		return bad("--seq-len %d: want 1..%d", c.seqLen, shard.MaxSeqLen)
	case c.ranks < 1 || c.ranks > shard.MaxRanks:
		return bad("--ranks %d: want 1..%d", c.ranks, shard.MaxRanks)
	case c.splitLong && c.mode != shard.ModePack:
		return bad("--split-long needs --mode pack")
	case c.workers < 1:
		return bad("--workers %d: want >= 1", c.workers)
	case c.maxRecords < 0:
		return bad("--max-records %d: want >= 1 (or 0: all)", c.maxRecords)
	case c.batchRows < 1 || c.batchRows > 1<<20:
		return bad("--batch-rows %d: want 1..%d", c.batchRows, 1<<20)
	case c.onBad != "error" && c.onBad != "skip":
		return bad("--on-bad-record %q: want error or skip", c.onBad)
	}
	return c, nil
}

// summary is the final report (--json prints it as is).
type summary struct {
	Out              string  `json:"out"`
	Input            string  `json:"input"`
	Format           string  `json:"format"`
	Mode             string  `json:"mode"`
	Labels           string  `json:"labels"`
	SeqLen           int     `json:"seq_len"`
	Ranks            int     `json:"ranks"`
	RowsPerRank      int     `json:"rows_per_rank"`
	UniqueRows       int     `json:"unique_rows"`
	TotalRows        int     `json:"total_rows"`
	RecordsRead      int64   `json:"records_read"`
	RecordsSkipped   int64   `json:"records_skipped"`
	RecordsTruncated int64   `json:"records_truncated"`
	RecordsSplit     int64   `json:"records_split"`
	Tokens           int64   `json:"tokens"`
	PadTokens        int64   `json:"pad_tokens"`
	Efficiency       float64 `json:"efficiency"`
	InputBytes       int64   `json:"input_bytes"`
	OutputBytes      int64   `json:"output_bytes"`
	Seconds          float64 `json:"seconds"`
	MBPerSec         float64 `json:"mb_per_s"`
	Workers          int     `json:"workers"`
	ReadSeconds      float64 `json:"read_s"`     // read + parse the input, load the tokenizer (overlapped)
	TokenizeSeconds  float64 `json:"tokenize_s"` // format + tokenize
	WriteSeconds     float64 `json:"write_s"`    // pack, shuffle, write, verify, manifest
}

func runPrep(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c, err := parsePrepFlags(args, stderr)
	if err != nil {
		return err
	}
	if c.parts > 0 {
		// A part's error says which part (launchers interleave the logs).
		defer func() {
			if err != nil && !errors.Is(err, errUsage) {
				err = fmt.Errorf("dataprep[part %d/%d]: %w", c.part, c.parts, err)
			}
		}()
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	t0 := time.Now()
	// Refuse an existing result before spending time on the input (WriteDir
	// checks again before writing).
	if !c.force {
		if _, err := storage.Stat(ctx, storage.Join(c.out, shard.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s (use --force to replace it)", shard.ErrExists, storage.Join(c.out, shard.ManifestName))
		}
	}
	prefix := "dataprep"
	if c.parts > 0 {
		prefix = fmt.Sprintf("dataprep[part %d/%d]", c.part, c.parts)
		// A part that is run again (a retry) first removes the manifest
		// of an earlier try: until this try writes its own, commit finds
		// the part missing, never half replaced.
		if err := removeIfExists(ctx, storage.Join(c.partsLoc, shard.PartManifestName(c.part, c.parts))); err != nil {
			return err
		}
	}
	prog := newProgress(stderr, c.quiet, c.progressEvery, prefix)
	defer prog.stop()

	in, err := load(ctx, c, prog)
	if err != nil {
		return err
	}
	res := in.res
	if c.parts == 0 && len(res.Records) == 0 {
		return fmt.Errorf("%s: no usable records (%d skipped)", c.input, res.Skipped)
	}

	tRead := time.Now()
	prog.phase("tokenize", int64(len(res.Records)))
	exs, flags, st, err := in.enc.EncodeRecordsFlags(ctx, res.Records, res.Samples, c.workers, func(n int) { prog.add(int64(n)) })
	if err != nil {
		return err
	}
	tTok := time.Now()
	if c.parts > 0 {
		return writePart(ctx, c, in, exs, flags, st, t0, prog, stdout)
	}
	out := &shardInput{
		exs: exs, tmpl: in.tmpl, tok: in.tokInfo, input: c.input,
		stats: shard.Stats{
			RecordsRead:      int64(len(res.Records)) + res.Skipped,
			RecordsSkipped:   res.Skipped,
			RecordsTruncated: st.Truncated,
			RecordsSplit:     st.Split,
			InputBytes:       res.RawBytes,
		},
		createdBy: createdBy(),
		seconds:   func() float64 { return time.Since(t0).Seconds() },
	}
	m, err := writeShards(ctx, c, out, prog)
	if err != nil {
		return err
	}
	prog.stop()
	secs := time.Since(t0).Seconds()
	s := newSummary(c, m, string(res.Format), res.RawBytes, res.Bytes, secs)
	s.ReadSeconds, s.TokenizeSeconds, s.WriteSeconds = tRead.Sub(t0).Seconds(), tTok.Sub(tRead).Seconds(), time.Since(tTok).Seconds()
	return printReport(c, &s, m, stdout, stderr)
}

// createdBy is the manifest's created_by.
func createdBy() string { return "ferry dataprep (" + runtime.Version() + ")" }

// loaded is what a run (or a part) read: the records, the tokenizer and
// what the flags resolve to.
type loaded struct {
	res     *dataset.Result
	tok     *tokenize.Tokenizer
	tmpl    *dataset.Template
	sp      *specials
	enc     *encode.Encoder
	tokInfo shard.TokenizerInfo
	// a part's: every input file with its size, and what the part read
	files  []string
	sizes  []int64
	pieces []dataset.PieceResult
}

// load reads the input (a part: its share of it) and loads the tokenizer at
// the same time, then resolves the template and special tokens.
func load(ctx context.Context, c *prepConfig, prog *progress) (*loaded, error) {
	in := &loaded{}
	var badCount atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		prog.phase("read", 0)
		opt := dataset.Options{}
		if c.onBad == "skip" {
			opt.OnBad = func(e *dataset.RecordError) error {
				if badCount.Add(1) <= 5 {
					prog.logf("skipped: %v", e)
				}
				return nil
			}
		}
		files, err := dataset.Expand(gctx, c.inputs)
		if err != nil {
			return err
		}
		if len(files) > 1 {
			prog.logf("input: %d files (%s ... %s)", len(files), files[0], files[len(files)-1])
		}
		c.input = strings.Join(files, ", ") // the manifest names the files read, in order
		in.files = files
		if c.parts == 0 {
			if in.res, err = dataset.ReadFiles(gctx, files, opt); err != nil {
				return err
			}
			return in.res.Head(c.maxRecords, c.input)
		}
		pieces, sizes, err := dataset.Share(gctx, files, c.part, c.parts)
		if err != nil {
			return err
		}
		in.sizes = sizes
		if in.res, in.pieces, err = dataset.ReadPieces(gctx, pieces, opt); err != nil {
			return err
		}
		if c.maxRecords > 0 {
			// Records from local index max-records on are past the head
			// whatever the earlier parts hold; commit cuts the rest.
			keep := 0
			for keep < len(in.res.Samples) && in.res.Samples[keep] < c.maxRecords {
				keep++
			}
			in.res.Records, in.res.Samples = in.res.Records[:keep], in.res.Samples[:keep]
		}
		return nil
	})
	g.Go(func() error {
		var err error
		in.tok, err = loadTokenizer(c.tokenizer)
		return err
	})
	// Parsing and loading do not watch ctx: on an interrupt, return at once
	// (the process exits; nothing has been written yet).
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	if n := badCount.Load(); n > 5 {
		prog.logf("skipped %d bad records in all (first 5 shown)", n)
	}
	in.tmpl = dataset.Alpaca()
	if c.templateFile != "" {
		b, err := os.ReadFile(c.templateFile)
		if err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
		if in.tmpl, err = dataset.ParseTemplate(string(b)); err != nil {
			return nil, fmt.Errorf("%s: %w", c.templateFile, err)
		}
	}
	var err error
	if in.sp, err = resolveSpecials(in.tok, c); err != nil {
		return nil, err
	}
	if in.enc, err = newEncoder(in.tok, in.tmpl, in.sp, c); err != nil {
		return nil, err
	}
	absTok := c.tokenizer
	if a, err := filepath.Abs(c.tokenizer); err == nil {
		absTok = a
	}
	sp := in.sp
	in.tokInfo = shard.TokenizerInfo{
		SHA256: in.tok.SHA256(), BOSID: sp.bosID, EOSID: &sp.eosID, PadID: sp.padID,
		EOS: &sp.eos, Pad: &sp.pad, BOS: sp.bos, AddBOS: sp.addBOS, AddEOS: sp.addEOS, Path: absTok,
	}
	return in, nil
}

// shardInput is what writeShards lays out: the examples of the whole input
// in record order, and what the manifest says about them.
type shardInput struct {
	exs       []shard.Example
	tmpl      *dataset.Template
	tok       shard.TokenizerInfo
	input     string
	stats     shard.Stats // records and input bytes; WriteDir adds the rest
	createdBy string
	seconds   func() float64 // stats.seconds, asked just before the manifest is written
}

// writeShards packs (or pads) the examples into rows, assigns them to
// ranks and writes c.out: the one implementation behind a single run and
// commit, so that both give the same bytes.
func writeShards(ctx context.Context, c *prepConfig, in *shardInput, prog *progress) (*shard.Manifest, error) {
	layout := shard.Layout{SeqLen: c.seqLen, Mode: c.mode, Labels: c.labels, PadID: in.tok.PadID}
	src, err := shard.NewExampleSource(layout, in.exs)
	if err != nil {
		return nil, err
	}
	if src.NumRows() < c.ranks {
		return nil, fmt.Errorf("%d rows for %d ranks: every rank needs at least one row (use fewer --ranks or more data): %w",
			src.NumRows(), c.ranks, shard.ErrTooFewRows)
	}
	total := int64(c.ranks) * int64((src.NumRows()+c.ranks-1)/c.ranks)
	prog.phase("write", total)
	return shard.WriteDir(ctx, c.out, shard.DirConfig{
		Layout: layout, Ranks: c.ranks, Seed: c.seed, DropLast: c.dropLast,
		// Shard files are written by at least 8 writers (when there are
		// that many ranks): the time goes to write and fsync waits, not CPU.
		BatchRows: c.batchRows, Workers: max(c.workers, min(c.ranks, 8)), Force: c.force,
		Template: in.tmpl.Name, TemplateText: in.tmpl.Text,
		Tokenizer: in.tok,
		CreatedBy: in.createdBy,
		Input:     in.input,
		Stats:     in.stats,
		Progress:  func(n int) { prog.add(int64(n)) },
		BeforeManifest: func(m *shard.Manifest) {
			m.Stats.Seconds = in.seconds()
		},
	}, src)
}

// newSummary fills a summary from a written manifest.
func newSummary(c *prepConfig, m *shard.Manifest, format string, rawBytes, bytes int64, secs float64) summary {
	var outBytes int64
	for _, f := range m.Files {
		outBytes += f.Bytes
	}
	return summary{
		Out: c.out, Input: m.Input, Format: format, Mode: string(m.Mode), Labels: string(m.Labels),
		SeqLen: m.SeqLen, Ranks: m.Ranks, RowsPerRank: m.RowsPerRank, UniqueRows: m.UniqueRows, TotalRows: m.TotalRows,
		RecordsRead: m.Stats.RecordsRead, RecordsSkipped: m.Stats.RecordsSkipped, RecordsTruncated: m.Stats.RecordsTruncated,
		RecordsSplit: m.Stats.RecordsSplit, Tokens: m.Stats.Tokens, PadTokens: m.Stats.PadTokens, Efficiency: m.Stats.Efficiency,
		InputBytes: rawBytes, OutputBytes: outBytes, Seconds: secs, MBPerSec: float64(bytes) / 1e6 / secs, Workers: c.workers,
	}
}

// printReport prints the summary: JSON on stdout with --json, text on stderr
// unless --quiet.
func printReport(c *prepConfig, s *summary, m *shard.Manifest, stdout, stderr io.Writer) error {
	if c.jsonOut {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !c.quiet {
		printSummary(stderr, s, m)
	}
	return nil
}

func printSummary(w io.Writer, s *summary, m *shard.Manifest) {
	effName := "padding efficiency"
	if s.Mode == string(shard.ModePack) {
		effName = "packing efficiency"
	}
	fmt.Fprintf(w, "dataprep: %s -> %s\n", s.Input, s.Out)
	fmt.Fprintf(w, "  records   %d read, %d skipped, %d truncated", s.RecordsRead, s.RecordsSkipped, s.RecordsTruncated)
	if s.RecordsSplit > 0 {
		fmt.Fprintf(w, ", %d split", s.RecordsSplit)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  tokens    %d (+%d pad), %s %.1f%%\n", s.Tokens, s.PadTokens, effName, 100*s.Efficiency)
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

// specials are the resolved special tokens of a run.
type specials struct {
	eos, pad       string
	eosID, padID   int32
	bos            *string
	bosID          *int32
	bosText        string // the text {bos} stands for in a template
	addBOS, addEOS bool
}

func resolveSpecials(tok *tokenize.Tokenizer, c *prepConfig) (*specials, error) {
	sp := &specials{}
	ts := tok.Special()
	sp.eos = c.eos
	if !c.eosSet {
		sp.eos = ts.EOS
		if sp.eos == "" {
			return nil, fmt.Errorf("%w: the tokenizer has no eos_token; give --eos", errUsage)
		}
	}
	if sp.eos != "" {
		id, ok := tok.TokenID(sp.eos)
		if !ok {
			return nil, fmt.Errorf("%w: --eos %q is not a token of %s", errUsage, sp.eos, c.tokenizer)
		}
		sp.eosID = id
	} else {
		sp.eosID = -1
	}
	sp.pad = c.pad
	if !c.padSet {
		sp.pad = ts.Pad
		if sp.pad == "" {
			sp.pad = sp.eos
		}
	}
	if sp.pad == "" {
		return nil, fmt.Errorf("%w: no padding token: give --pad (or --eos)", errUsage)
	}
	id, ok := tok.TokenID(sp.pad)
	if !ok {
		return nil, fmt.Errorf("%w: --pad %q is not a token of %s", errUsage, sp.pad, c.tokenizer)
	}
	sp.padID = id
	if ts.BOS != "" {
		b := ts.BOS
		sp.bos, sp.bosText = &b, b
		if id, ok := tok.TokenID(b); ok {
			sp.bosID = &id
		}
	}
	if !c.noSpecial { // what the post-processor adds around every text
		sp.addBOS, sp.addEOS = ts.AddBOS, ts.AddEOS
	}
	return sp, nil
}

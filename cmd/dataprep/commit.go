package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/mmap"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
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

var partManifestRE = regexp.MustCompile(`^part-(\d{5})-of-(\d{5})\.json$`)

func runCommit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := &prepConfig{}
	fs := flag.NewFlagSet("dataprep commit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, commitUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.partsLoc, "parts", "", "directory or s3:// prefix of the part files (default OUT/parts)")
	fs.BoolVar(&c.force, "force", false, "replace an existing result in OUT")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress and no summary on stderr")
	fs.BoolVar(&c.jsonOut, "json", false, "print the summary as one JSON object on stdout")
	fs.IntVar(&c.workers, "workers", runtime.NumCPU(), "parallel checksum and write workers (the output is identical for any value)")
	fs.DurationVar(&c.progressEvery, "progress-every", 5*time.Second, "interval of the progress lines when stderr is not a terminal")
	bad := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "dataprep commit: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run dataprep commit --help for usage")
		return fmt.Errorf("%w: "+format, append([]any{errUsage}, a...)...)
	}
	// OUT may come before or after the flags.
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch {
	case len(pos) != 1:
		return bad("want one output directory, got %d arguments", len(pos))
	case c.workers < 1:
		return bad("--workers %d: want >= 1", c.workers)
	}
	c.out = pos[0]
	if c.partsLoc == "" {
		c.partsLoc = storage.Join(c.out, "parts")
	}
	t0 := time.Now()
	if !c.force {
		if _, err := storage.Stat(ctx, storage.Join(c.out, shard.ManifestName)); err == nil {
			return fmt.Errorf("%w: %s (use --force to replace it)", shard.ErrExists, storage.Join(c.out, shard.ManifestName))
		}
	}
	prog := newProgress(stderr, c.quiet, c.progressEvery, "dataprep[commit]")
	defer prog.stop()

	ps, err := openParts(ctx, c.partsLoc, c.workers, prog)
	if err != nil {
		return err
	}
	defer ps.close()
	tRead := time.Now()
	in, err := ps.assemble()
	if err != nil {
		return err
	}
	m0 := ps.ms[0]
	o := m0.Options
	c.seqLen, c.mode, c.labels, c.ranks, c.seed, c.dropLast, c.batchRows = o.SeqLen, o.Mode, o.Labels, o.Ranks, o.Seed, o.DropLast, o.BatchRows
	c.maxRecords, c.splitLong, c.noSpecial, c.onBad = o.MaxRecords, o.SplitLong, o.NoSpecial, o.OnBadRecord
	in.seconds = func() float64 { return ps.maxSeconds + time.Since(t0).Seconds() }
	m, err := writeShards(ctx, c, in, prog)
	if err != nil {
		return err
	}
	prog.stop()
	secs := time.Since(t0).Seconds()
	s := newSummary(c, m, ps.format(), ps.rawBytes, ps.bytes, secs)
	s.ReadSeconds, s.WriteSeconds = tRead.Sub(t0).Seconds(), time.Since(tRead).Seconds()
	return printReport(c, &s, m, stdout, stderr)
}

// partSet is the checked, mapped parts of a split run.
type partSet struct {
	loc        string
	n          int
	ms         []*shard.PartManifest
	parts      []*shard.Part
	tmp        string // downloads of S3 parts
	rawBytes   int64
	bytes      int64
	maxSeconds float64
}

func (ps *partSet) close() {
	for _, p := range ps.parts {
		if p != nil {
			p.Close()
		}
	}
	if ps.tmp != "" {
		os.RemoveAll(ps.tmp)
	}
}

// name is "part I/N (LOC/part-I-of-N.json)" for errors.
func (ps *partSet) name(i int) string {
	return fmt.Sprintf("part %d/%d (%s)", i, ps.n, storage.Join(ps.loc, shard.PartManifestName(i, ps.n)))
}

// openParts finds the part manifests under loc, checks that they are
// every part of one run, and opens and verifies every part file.
func openParts(ctx context.Context, loc string, workers int, prog *progress) (*partSet, error) {
	prefix := loc
	if storage.IsS3(loc) {
		prefix = strings.TrimSuffix(loc, "/") + "/"
	}
	infos, err := storage.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("parts %s: %w", loc, err)
	}
	found := map[int]map[int]bool{} // N -> parts present
	for _, in := range infos {
		var base string
		if storage.IsS3(loc) {
			b, ok := strings.CutPrefix(in.Loc, prefix)
			if !ok || strings.Contains(b, "/") {
				continue
			}
			base = b
		} else {
			if filepath.Dir(in.Loc) != filepath.Clean(loc) {
				continue
			}
			base = filepath.Base(in.Loc)
		}
		sub := partManifestRE.FindStringSubmatch(base)
		if sub == nil {
			continue
		}
		i, _ := strconv.Atoi(sub[1])
		n, _ := strconv.Atoi(sub[2])
		if found[n] == nil {
			found[n] = map[int]bool{}
		}
		found[n][i] = true
	}
	if len(found) == 0 {
		return nil, fmt.Errorf("%s: no part manifest (part-IIIII-of-NNNNN.json): no part of a split run has finished there", loc)
	}
	if len(found) > 1 {
		var ns []string
		for n := range found {
			ns = append(ns, strconv.Itoa(n))
		}
		slices.Sort(ns)
		return nil, fmt.Errorf("%s: parts of runs split %s ways: clear the parts of the other runs", loc, strings.Join(ns, " and "))
	}
	ps := &partSet{loc: loc}
	for n := range found {
		ps.n = n
	}
	if ps.n < 1 || ps.n > shard.MaxParts {
		return nil, fmt.Errorf("%s: %d parts, want 1..%d", loc, ps.n, shard.MaxParts)
	}
	var missing []string
	for i := range ps.n {
		if !found[ps.n][i] {
			missing = append(missing, strconv.Itoa(i))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: part %s of %d missing: no %s (the part has not finished: run dataprep --part %s/%d again)",
			loc, strings.Join(missing, ", "), ps.n, shard.PartManifestName(mustAtoi(missing[0]), ps.n), missing[0], ps.n)
	}
	prog.phase("check", int64(ps.n))
	ps.ms = make([]*shard.PartManifest, ps.n)
	ps.parts = make([]*shard.Part, ps.n)
	if storage.IsS3(loc) {
		if ps.tmp, err = os.MkdirTemp("", "ferry-parts-"); err != nil {
			return nil, err
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i := range ps.n {
		g.Go(func() error {
			m, err := readPartManifest(gctx, storage.Join(loc, shard.PartManifestName(i, ps.n)))
			if err != nil {
				return fmt.Errorf("%s: %w", ps.name(i), err)
			}
			if m.Part != i || m.Parts != ps.n {
				return fmt.Errorf("%s: %w: it says part %d/%d", ps.name(i), shard.ErrCorrupt, m.Part, m.Parts)
			}
			ps.ms[i] = m
			p, err := openPart(gctx, loc, m, ps.tmp)
			if err != nil {
				return fmt.Errorf("%s: %w", ps.name(i), err)
			}
			ps.parts[i] = p
			prog.add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		ps.close()
		return nil, err
	}
	if err := ps.check(); err != nil {
		ps.close()
		return nil, err
	}
	return ps, nil
}

func mustAtoi(s string) int { i, _ := strconv.Atoi(s); return i }

func readPartManifest(ctx context.Context, loc string) (*shard.PartManifest, error) {
	rc, _, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return shard.DecodePartManifest(loc, rc)
}

// openPart maps part m's file (an S3 one after downloading it into tmp)
// after checking its size and SHA-256, then parses it and checks it
// against m.
func openPart(ctx context.Context, loc string, m *shard.PartManifest, tmp string) (*shard.Part, error) {
	floc := storage.Join(loc, m.File.Path)
	path := floc
	if storage.IsS3(floc) {
		path = filepath.Join(tmp, m.File.Path)
		if err := download(ctx, floc, path); err != nil {
			return nil, err
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != m.File.Bytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, the part manifest says %d (a truncated or replaced part file)",
			shard.ErrMismatch, floc, st.Size(), m.File.Bytes)
	}
	data, unmap, err := mmap.Map(f)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	unmap()
	if got := hex.EncodeToString(sum[:]); got != m.File.SHA256 {
		return nil, fmt.Errorf("%w: %s: SHA-256 %s, the part manifest says %s (a corrupt or replaced part file)",
			shard.ErrMismatch, floc, got, m.File.SHA256)
	}
	p, err := shard.OpenPart(path)
	if err != nil {
		return nil, err
	}
	if p.NumTokens() != m.Tokens || int64(p.NumExamples()) != m.Examples || p.LastSample() >= m.Records {
		p.Close()
		return nil, fmt.Errorf("%w: %s: %d examples, %d tokens, up to record %d; the part manifest says %d examples, %d tokens, of %d records",
			shard.ErrMismatch, floc, p.NumExamples(), p.NumTokens(), p.LastSample(), m.Examples, m.Tokens, m.Records)
	}
	return p, nil
}

func download(ctx context.Context, loc, path string) error {
	rc, _, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("download %s: %w", loc, err)
	}
	return f.Close()
}

// check compares the parts with part 0 (tokenizer, options, inputs,
// program) and checks that their shares tile the input in order.
func (ps *partSet) check() error {
	m0 := ps.ms[0]
	tok := func(t shard.TokenizerInfo) string {
		t.Path = "" // informational: the parts may load it from different paths
		b, _ := json.Marshal(t)
		return string(b)
	}
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for i, m := range ps.ms {
		switch {
		case i == 0:
		case m.Tokenizer.SHA256 != m0.Tokenizer.SHA256:
			return fmt.Errorf("%s: tokenizer SHA-256 %s, part 0 has %s: the parts come from different tokenizers",
				ps.name(i), m.Tokenizer.SHA256, m0.Tokenizer.SHA256)
		case tok(m.Tokenizer) != tok(m0.Tokenizer):
			return fmt.Errorf("%s: special tokens %s, part 0 has %s", ps.name(i), tok(m.Tokenizer), tok(m0.Tokenizer))
		case js(m.Options) != js(m0.Options):
			return fmt.Errorf("%s: options %s, part 0 has %s: every part needs the same flags", ps.name(i), js(m.Options), js(m0.Options))
		case js(m.Inputs) != js(m0.Inputs):
			return fmt.Errorf("%s: input files %s, part 0 has %s", ps.name(i), js(m.Inputs), js(m0.Inputs))
		case m.CreatedBy != m0.CreatedBy:
			return fmt.Errorf("%s: written by %q, part 0 by %q: run every part with the same dataprep", ps.name(i), m.CreatedBy, m0.CreatedBy)
		}
	}
	files := m0.Inputs
	fi, pos := 0, int64(0)
	for i, m := range ps.ms {
		for _, p := range m.Share {
			if fi >= len(files) {
				return fmt.Errorf("%s: its share reads %s past the end of the input", ps.name(i), p.File)
			}
			f := files[fi]
			if p.File != f.File || p.Size != f.Size || p.Off != pos {
				return fmt.Errorf("%s: its share goes on with %s byte %d, the input with %s byte %d: the parts do not tile the input",
					ps.name(i), p.File, p.Off, f.File, pos)
			}
			pos = p.End
			if pos == f.Size {
				fi, pos = fi+1, 0
			}
		}
		ps.rawBytes += m.InputBytes
		ps.bytes += m.Bytes
		ps.maxSeconds = max(ps.maxSeconds, m.Seconds)
	}
	if fi != len(files) {
		return fmt.Errorf("%s: the parts end at %s byte %d: the input is not read whole", ps.loc, files[min(fi, len(files)-1)].File, pos)
	}
	return nil
}

// format is the input's format as a single run names it: the files'
// formats in input order, each once, joined by "+".
func (ps *partSet) format() string {
	var fs []string
	for _, m := range ps.ms {
		for _, p := range m.Share {
			if !slices.Contains(fs, p.Format) {
				fs = append(fs, p.Format)
			}
		}
	}
	return strings.Join(fs, "+")
}

// assemble lays the parts' examples end to end with global sample indices
// (the records of earlier parts plus the local index), keeps the first
// max_records records, and counts the stats a single run would.
func (ps *partSet) assemble() (*shardInput, error) {
	m0 := ps.ms[0]
	o := m0.Options
	var total, skipped, truncated, split int64
	n := 0
	for _, m := range ps.ms {
		total += m.Records
		skipped += m.RecordsSkipped
		truncated += m.RecordsTruncated
		split += m.RecordsSplit
		n += int(m.Examples)
	}
	var input []string
	for _, f := range m0.Inputs {
		input = append(input, f.File)
	}
	in := &shardInput{
		tmpl:      &dataset.Template{Name: o.Template, Text: o.TemplateText},
		tok:       m0.Tokenizer,
		input:     strings.Join(input, ", "),
		createdBy: m0.CreatedBy,
	}
	if o.MaxRecords > total {
		return nil, fmt.Errorf("%w: --max-records %d: %s has only %d records", dataset.ErrLimit, o.MaxRecords, in.input, total)
	}
	exs := make([]shard.Example, 0, n)
	flags := make([]uint8, 0, n)
	var base int64
	for i, p := range ps.parts {
		exs, flags = p.AppendExamples(exs, flags, base)
		base += ps.ms[i].Records
	}
	read := total
	if o.MaxRecords > 0 {
		read = o.MaxRecords
		keep := 0
		for keep < len(exs) && exs[keep].Sample < o.MaxRecords {
			keep++
		}
		exs, flags = exs[:keep], flags[:keep]
		var kept int64
		truncated, split = 0, 0
		for k, e := range exs {
			if k == 0 || e.Sample != exs[k-1].Sample {
				kept++
			}
			if flags[k]&shard.PartTruncated != 0 {
				truncated++
			}
			if flags[k]&shard.PartSplit != 0 {
				split++
			}
		}
		skipped = o.MaxRecords - kept
	}
	if len(exs) == 0 {
		return nil, fmt.Errorf("%s: no usable records (%d skipped)", in.input, skipped)
	}
	in.exs = exs
	in.stats = shard.Stats{
		RecordsRead: read, RecordsSkipped: skipped, RecordsTruncated: truncated, RecordsSplit: split, InputBytes: ps.rawBytes,
	}
	return in, nil
}

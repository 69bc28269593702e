package prep

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// CommitConfig is one commit of a split run.
type CommitConfig struct {
	Out   string // the output directory or s3:// prefix (required)
	Parts string // the parts' directory or s3:// prefix; default Out + "/parts"
	Force bool   // replace an existing result in Out
	// Workers is the number of parallel checksum and write workers;
	// default runtime.NumCPU(). The output is the same for any value.
	Workers  int
	Progress Progress // nil: none
}

// Commit lays out the parts of a split run (RunPart for I = 0..N-1, in
// any order and on any machines) into c.Out: the same shards,
// loss_tokens.u32 and manifest.json, byte for byte, as Run with the same
// inputs and options (only manifest.json's stats.seconds differs: here it
// is the slowest part's time plus Commit's).
//
// It first checks that every part 0..N-1 is there and whole: each part
// manifest, its file's size and SHA-256, its record and token counts, the
// same tokenizer, options and input files in every part, and shares that
// tile the input. Any problem fails naming the part, and Out gets no
// manifest.json.
func Commit(ctx context.Context, c CommitConfig) (*Result, error) {
	if c.Out == "" {
		return nil, configErr("commit needs an output directory")
	}
	if c.Workers < 0 {
		return nil, configErr("--workers %d: want >= 1", c.Workers)
	}
	if c.Parts == "" {
		c.Parts = storage.Join(c.Out, "parts")
	}
	cc := Config{Workers: c.Workers, Progress: c.Progress}.withDefaults()
	t0 := time.Now()
	if err := refuseExisting(ctx, c.Out, c.Force); err != nil {
		return nil, err
	}
	if d, err := findMixParts(ctx, c.Parts); err != nil || d != nil {
		if err != nil {
			return nil, err
		}
		return commitMix(ctx, c, cc, d, t0) // a recipe's parts (mixpart.go)
	}
	ps, err := openParts(ctx, c.Parts, cc.Workers, cc.Progress)
	if err != nil {
		return nil, err
	}
	defer ps.close()
	tRead := time.Now()
	in, err := ps.assemble()
	if err != nil {
		return nil, err
	}
	in.seconds = func() float64 { return ps.maxSeconds + time.Since(t0).Seconds() }
	wc := commitConfig(ps.ms[0].Options, c.Out, c.Force, cc.Workers, cc.Progress)
	m, err := writeShards(ctx, &wc, in)
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: m, Format: ps.format(), InputBytes: ps.rawBytes, Bytes: ps.bytes,
		Read: tRead.Sub(t0), Write: time.Since(tRead)}, nil
}

// partSet is the checked, mapped parts of a split run.
type partSet struct {
	loc        string
	n          int
	ms         []*shard.PartManifest
	parts      []*shard.Part
	tmp        string // fetched copies of remote parts
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

// findParts returns N and the parts present of the one split run whose
// part manifests are in loc.
func findParts(ctx context.Context, loc string) (int, map[int]bool, error) {
	names, err := storage.ListNames(ctx, loc)
	if err != nil {
		return 0, nil, fmt.Errorf("parts %s: %w", loc, err)
	}
	found := map[int]map[int]bool{} // N -> parts present
	for _, base := range names {
		i, n, ok := shard.ParsePartManifestName(base)
		if !ok {
			continue
		}
		if found[n] == nil {
			found[n] = map[int]bool{}
		}
		found[n][i] = true
	}
	if len(found) == 0 {
		return 0, nil, fmt.Errorf("%s: no part manifest (part-IIIII-of-NNNNN.json): no part of a split run has finished there", loc)
	}
	if len(found) > 1 {
		var ns []string
		for n := range found {
			ns = append(ns, strconv.Itoa(n))
		}
		slices.Sort(ns)
		return 0, nil, fmt.Errorf("%s: parts of runs split %s ways: clear the parts of the other runs", loc, strings.Join(ns, " and "))
	}
	for n, present := range found {
		if n < 1 || n > shard.MaxParts {
			return 0, nil, fmt.Errorf("%s: %d parts, want 1..%d", loc, n, shard.MaxParts)
		}
		var missing []int
		for i := range n {
			if !present[i] {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			ms := make([]string, len(missing))
			for k, i := range missing {
				ms[k] = strconv.Itoa(i)
			}
			return 0, nil, fmt.Errorf("%s: part %s of %d missing: no %s (the part has not finished: run dataprep --part %d/%d again)",
				loc, strings.Join(ms, ", "), n, shard.PartManifestName(missing[0], n), missing[0], n)
		}
		return n, present, nil
	}
	panic("unreachable")
}

// openParts finds the part manifests under loc, checks that they are
// every part of one run, and opens and verifies every part file.
func openParts(ctx context.Context, loc string, workers int, prog Progress) (*partSet, error) {
	n, _, err := findParts(ctx, loc)
	if err != nil {
		return nil, err
	}
	ps := &partSet{loc: loc, n: n}
	prog.Phase("check", int64(ps.n))
	ps.ms = make([]*shard.PartManifest, ps.n)
	ps.parts = make([]*shard.Part, ps.n)
	if _, local := storage.LocalPath(loc); !local {
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
			prog.Add(1)
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

func readPartManifest(ctx context.Context, loc string) (*shard.PartManifest, error) {
	rc, _, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return shard.DecodePartManifest(loc, rc)
}

// openPart opens and checks part m's file (PartManifest.OpenFile): in
// place when it is local, else after a verified fetch into tmp.
func openPart(ctx context.Context, loc string, m *shard.PartManifest, tmp string) (*shard.Part, error) {
	floc := storage.Join(loc, m.File.Path)
	path, local := storage.LocalPath(floc)
	if !local {
		path = filepath.Join(tmp, m.File.Path)
		if err := storage.Fetch(ctx, floc, path, m.File.SHA256, m.File.Bytes); err != nil {
			return nil, fmt.Errorf("%w: %w", shard.ErrMismatch, err)
		}
	}
	return m.OpenFile(path)
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
	if ps.ms[0].Options.Chat != nil {
		return "chat " + strings.Join(fs, "+")
	}
	return strings.Join(fs, "+")
}

// assemble lays the parts' examples end to end with global sample indices
// (the records of earlier parts plus the local index), keeps the first
// max_records records, and counts the stats a single run would.
func (ps *partSet) assemble() (*shardInput, error) {
	m0 := ps.ms[0]
	o := m0.Options
	var total, skipped, truncated, split, dropped int64
	var droppedAt []int64 // the dropped chat conversations' global samples
	n := 0
	for _, m := range ps.ms {
		for _, s := range m.Dropped {
			droppedAt = append(droppedAt, total+s)
		}
		total += m.Records
		skipped += m.RecordsSkipped
		truncated += m.RecordsTruncated
		split += m.RecordsSplit
		dropped += m.RecordsDropped
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
		chat:      o.Chat,
	}
	if o.MaxRecords > total {
		return nil, errTooFewRecords(o.MaxRecords, in.input, total)
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
		var kept int64
		exs, _, kept, truncated, split = headExamples(exs, flags, o.MaxRecords)
		// a dropped conversation has no example: it counts as truncated,
		// not as kept or skipped
		dropped = int64(headSamples(droppedAt, o.MaxRecords))
		truncated += dropped
		skipped = o.MaxRecords - kept - dropped
	}
	if len(exs) == 0 {
		return nil, fmt.Errorf("%s: no usable records (%d skipped)", in.input, skipped)
	}
	in.exs = exs
	in.stats = shard.Stats{
		RecordsRead: read, RecordsSkipped: skipped, RecordsTruncated: truncated, RecordsSplit: split, RecordsDropped: dropped,
		InputBytes: ps.rawBytes,
	}
	return in, nil
}

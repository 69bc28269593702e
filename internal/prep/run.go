package prep

import (
	"context"
	"fmt"
	"time"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
)

// Result is what Run and Commit wrote and read.
type Result struct {
	Manifest   *shard.Manifest // the manifest written
	Format     string          // the input's format(s), "+"-joined in input order
	InputBytes int64           // the input's bytes as stored
	Bytes      int64           // the input's bytes decoded (decompressed)
	// Read is the time to read and parse the input and load the tokenizer
	// (Commit: to open and check the parts), Tokenize to tokenize (0 for
	// Commit), Write to lay out and write the shards.
	Read, Tokenize, Write time.Duration
}

// Run reads c.Inputs whole, tokenizes them and writes the shard directory
// c.Out (manifest.json last: a directory without it is not a result).
func Run(ctx context.Context, c Config) (*Result, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c = c.withDefaults()
	t0 := time.Now()
	if err := refuseExisting(ctx, c.Out, c.Force); err != nil {
		return nil, err
	}
	if c.Recipe != "" {
		return runMix(ctx, c, t0)
	}
	files, err := dataset.Expand(ctx, c.Inputs)
	if err != nil {
		return nil, err
	}
	if err := c.resolveFormat(ctx, files); err != nil {
		return nil, err
	}
	if c.Format == FormatChat {
		return runChat(ctx, c, files, t0)
	}
	in, err := load(ctx, &c, 0, 0)
	if err != nil {
		return nil, err
	}
	res := in.res
	if len(res.Records) == 0 {
		return nil, fmt.Errorf("%s: no usable records (%d skipped)", in.input, res.Skipped)
	}
	tRead := time.Now()
	c.Progress.Phase("tokenize", int64(len(res.Records)))
	exs, st, err := in.enc.EncodeRecords(ctx, res.Records, res.Samples, c.Workers, func(n int) { c.Progress.Add(int64(n)) })
	if err != nil {
		return nil, err
	}
	tTok := time.Now()
	m, err := writeShards(ctx, &c, &shardInput{
		exs: exs, tmpl: in.tmpl, tok: in.tokInfo, input: in.input,
		stats: shard.Stats{
			RecordsRead:      int64(len(res.Records)) + res.Skipped,
			RecordsSkipped:   res.Skipped,
			RecordsTruncated: st.Truncated,
			RecordsSplit:     st.Split,
			InputBytes:       res.RawBytes,
		},
		createdBy: createdBy(),
		seconds:   func() float64 { return time.Since(t0).Seconds() },
	})
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: m, Format: string(res.Format), InputBytes: res.RawBytes, Bytes: res.Bytes,
		Read: tRead.Sub(t0), Tokenize: tTok.Sub(tRead), Write: time.Since(tTok)}, nil
}

// shardInput is what writeShards lays out: the examples of the whole input
// in record order, and what the manifest says about them.
type shardInput struct {
	exs       []shard.Example
	tmpl      *dataset.Template
	tok       shard.TokenizerInfo
	chat      *shard.ChatInfo // chat input's template hash and date
	input     string
	sources   []shard.SourceInfo // a mixture's (runMix); nil for one input
	stats     shard.Stats        // records and input bytes; WriteDir adds the rest
	createdBy string
	seconds   func() float64 // stats.seconds, asked just before the manifest is written
}

// writeShards packs (or pads) the examples into rows, assigns them to
// ranks and writes c.Out: the one implementation behind Run and Commit, so
// that both give the same bytes. Of c it reads Layout (but PadID, which is
// the tokenizer's), Ranks, Seed, DropLast, BatchRows, Workers, Force, Out
// and Progress.
func writeShards(ctx context.Context, c *Config, in *shardInput) (*shard.Manifest, error) {
	layout := c.Layout
	layout.PadID = in.tok.PadID
	src, err := shard.NewExampleSource(layout, in.exs)
	if err != nil {
		return nil, err
	}
	if src.NumRows() < c.Ranks {
		return nil, fmt.Errorf("%d rows for %d ranks: every rank needs at least one row (use fewer --ranks or more data): %w",
			src.NumRows(), c.Ranks, shard.ErrTooFewRows)
	}
	total := int64(c.Ranks) * int64((src.NumRows()+c.Ranks-1)/c.Ranks)
	c.Progress.Phase("write", total)
	return shard.WriteDir(ctx, c.Out, shard.DirConfig{
		Layout: layout, Ranks: c.Ranks, Seed: c.Seed, DropLast: c.DropLast,
		// Shard files are written by at least 8 writers (when there are
		// that many ranks): the time goes to write and fsync waits, not CPU.
		BatchRows: c.BatchRows, Workers: max(c.Workers, min(c.Ranks, 8)), Force: c.Force,
		Template: in.tmpl.Name, TemplateText: in.tmpl.Text, Chat: in.chat,
		Tokenizer: in.tok,
		CreatedBy: in.createdBy,
		Input:     in.input,
		Sources:   in.sources,
		Stats:     in.stats,
		Progress:  func(n int) { c.Progress.Add(int64(n)) },
		BeforeManifest: func(m *shard.Manifest) {
			m.Stats.Seconds = in.seconds()
		},
	}, src)
}

// resolveFormat settles c.Format (FormatAuto: from the first input file)
// and the default labels policy of the format, and refuses a policy of
// the other format.
func (c *Config) resolveFormat(ctx context.Context, files []string) error {
	if c.Format == FormatAuto {
		c.Format = FormatAlpaca
		if c.Layout.Labels.IsChat() || c.ChatTemplate != "" {
			c.Format = FormatChat
		} else {
			c.Format = detectFormat(ctx, files)
		}
	}
	switch {
	case c.Layout.Labels == "" && c.Format == FormatChat:
		c.Layout.Labels = shard.LabelsAssistant
	case c.Layout.Labels == "":
		c.Layout.Labels = shard.LabelsMaskPad
	case c.Format == FormatChat && !c.Layout.Labels.IsChat():
		return configErr("--labels %s is for Alpaca records; chat data takes assistant, last-assistant, generation or all", c.Layout.Labels)
	case c.Format == FormatAlpaca && c.Layout.Labels.IsChat():
		return configErr("--labels %s is for chat data (--format chat)", c.Layout.Labels)
	}
	return nil
}

package prep

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// Part names part I of a split run in N parts and where the parts go.
type Part struct {
	I, N int
	// Loc is the directory or s3:// prefix of the part files; default
	// Config.Out + "/parts" (--parts).
	Loc string
}

// PartResult is what RunPart wrote.
type PartResult struct {
	Manifest *shard.PartManifest // the part manifest written
	PartsLoc string              // the parts' directory or prefix (Part.Loc or its default)
	Loc      string              // the part file's location
}

// RunPart runs part p.I of a split run (docs/parts.md): it reads only the
// part's share of c.Inputs, tokenizes it and writes its part file and then
// its part manifest into p.Loc, each atomically, replacing what an earlier
// try of the part left. A retry first removes the earlier try's manifest:
// until this try writes its own, Commit finds the part missing, never half
// replaced.
func RunPart(ctx context.Context, c Config, p Part) (*PartResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if p.N < 1 || p.N > shard.MaxParts || p.I < 0 || p.I >= p.N {
		return nil, configErr("--part %d/%d: want I/N with 0 <= I < N <= %d", p.I, p.N, shard.MaxParts)
	}
	if c.Recipe != "" {
		return runMixPart(ctx, c, p)
	}
	files, err := dataset.Expand(ctx, c.Inputs)
	if err != nil {
		return nil, err
	}
	if err := c.resolveFormat(ctx, files); err != nil {
		return nil, err
	}
	if p.Loc == "" {
		p.Loc = storage.Join(c.Out, "parts")
	}
	c = c.withDefaults()
	t0 := time.Now()
	if err := refuseExisting(ctx, c.Out, c.Force); err != nil {
		return nil, err
	}
	if err := storage.Remove(ctx, storage.Join(p.Loc, shard.PartManifestName(p.I, p.N))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var pe *partEncoded
	if c.Format == FormatChat {
		pe, err = encodeChatPart(ctx, &c, files, p)
	} else {
		pe, err = encodePart(ctx, &c, p)
	}
	if err != nil {
		return nil, err
	}
	exs, flags := pe.exs, pe.flags

	c.Progress.Phase("write", 0)
	if err := storage.MakeDir(p.Loc); err != nil {
		return nil, err
	}
	name := shard.PartFileName(p.I, p.N)
	floc := storage.Join(p.Loc, name)
	size, sum, err := writePartFile(ctx, floc, exs, flags)
	if err != nil {
		return nil, fmt.Errorf("part %d/%d: %s: %w", p.I, p.N, name, err)
	}
	var tokens int64
	for _, e := range exs {
		tokens += int64(len(e.Tokens))
	}
	m := &shard.PartManifest{
		Format: shard.PartFormatName, Version: shard.PartFormatVersion, Part: p.I, Parts: p.N,
		CreatedBy: createdBy(), Tokenizer: pe.tokInfo, Options: pe.options,
		RecordsSkipped: pe.skipped, RecordsTruncated: pe.truncated, RecordsSplit: pe.split,
		RecordsDropped: int64(len(pe.dropped)), Dropped: pe.dropped,
		Examples: int64(len(exs)), Tokens: tokens, InputBytes: pe.rawBytes, Bytes: pe.bytes,
		File: shard.PartFileEntry{Path: name, Bytes: size, SHA256: sum},
	}
	for i, f := range pe.files {
		m.Inputs = append(m.Inputs, shard.PartInput{File: f, Size: pe.sizes[i]})
	}
	m.Share = []shard.PartPiece{}
	for _, pc := range pe.pieces {
		m.Share = append(m.Share, shard.PartPiece{File: pc.File, Size: pc.Size, Off: pc.Off, End: pc.End, Format: string(pc.Format),
			Records: pc.Records, Skipped: pc.Skipped})
		m.Records += pc.Records
		m.RecordsSkipped += pc.Skipped
	}
	m.Seconds = time.Since(t0).Seconds()
	data, err := shard.EncodePartManifest(m)
	if err != nil {
		return nil, err
	}
	mname := shard.PartManifestName(p.I, p.N)
	if err := storage.WriteFile(ctx, storage.Join(p.Loc, mname), data); err != nil {
		return nil, fmt.Errorf("part %d/%d: %s: %w", p.I, p.N, mname, err)
	}
	return &PartResult{Manifest: m, PartsLoc: p.Loc, Loc: floc}, nil
}

// partEncoded is what a part tokenized of its share, and what its part
// manifest records besides the file.
type partEncoded struct {
	exs     []shard.Example
	flags   []uint8
	tokInfo shard.TokenizerInfo
	options shard.PartOptions
	// the whole input's files and sizes, and what the part read of them
	files  []string
	sizes  []int64
	pieces []dataset.PieceResult
	// records skipped besides the pieces' bad records (chat conversations
	// the encoder found bad), truncated, split, and the local indices of
	// the dropped ones (chat)
	skipped, truncated, split int64
	dropped                   []int64
	rawBytes, bytes           int64
}

// encodePart reads and tokenizes part p's share of Alpaca records.
func encodePart(ctx context.Context, c *Config, p Part) (*partEncoded, error) {
	in, err := load(ctx, c, p.I, p.N)
	if err != nil {
		return nil, err
	}
	res := in.res
	c.Progress.Phase("tokenize", int64(len(res.Records)))
	exs, flags, st, err := in.enc.EncodeRecordsFlags(ctx, res.Records, res.Samples, c.Workers, func(n int) { c.Progress.Add(int64(n)) })
	if err != nil {
		return nil, err
	}
	return &partEncoded{exs: exs, flags: flags, tokInfo: in.tokInfo, options: partOptions(c, in.tmpl.Name, in.tmpl.Text, nil),
		files: in.files, sizes: in.sizes, pieces: in.pieces, truncated: st.Truncated, split: st.Split,
		rawBytes: res.RawBytes, bytes: res.Bytes}, nil
}

// writePartFile writes the part file loc atomically (storage.Create: temp
// + rename, or one S3 object), replacing what is there, and returns its
// size and SHA-256.
func writePartFile(ctx context.Context, loc string, exs []shard.Example, flags []uint8) (int64, string, error) {
	w, err := storage.Create(ctx, loc, storage.WithOverwrite(true))
	if err != nil {
		return 0, "", err
	}
	defer w.Abort()
	n, sum, err := shard.WritePart(w, exs, flags)
	if err != nil {
		return 0, "", err
	}
	if err := ctx.Err(); err != nil {
		return 0, "", context.Cause(ctx)
	}
	if err := w.Commit(); err != nil {
		return 0, "", err
	}
	return n, sum, nil
}

// partOptions are the options of c that decide the output: every part of
// one run must have the same, and Commit lays the parts out with them.
// For chat data, template and template_text are the chat template's name
// and source, and chat its SHA-256 and the date.
func partOptions(c *Config, template, text string, chat *shard.ChatInfo) shard.PartOptions {
	l := c.Layout
	l.PadID = 0 // the tokenizer's, stored with it
	return shard.PartOptions{
		Layout: l, Template: template, TemplateText: text,
		NoSpecial: c.NoSpecial, SplitLong: c.SplitLong, MaxRecords: c.MaxRecords, Seed: c.Seed, Ranks: c.Ranks,
		DropLast: c.DropLast, BatchRows: c.BatchRows, OnBadRecord: c.onBadRecord(), Chat: chat,
	}
}

// commitConfig is the Config that writeShards needs to lay out the parts
// of a run made with options o, as the single run would have.
func commitConfig(o shard.PartOptions, out string, force bool, workers int, prog Progress) Config {
	return Config{
		Layout: o.Layout, SplitLong: o.SplitLong, NoSpecial: o.NoSpecial, MaxRecords: o.MaxRecords, SkipBad: o.OnBadRecord == "skip",
		Ranks: o.Ranks, Seed: o.Seed, DropLast: o.DropLast, BatchRows: o.BatchRows,
		Out: out, Force: force, Workers: workers, Progress: prog,
	}
}

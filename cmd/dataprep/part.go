package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"

	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// partSummary is a part's final report (--json prints it as is).
type partSummary struct {
	Part           int     `json:"part"`
	Parts          int     `json:"parts"`
	PartsLoc       string  `json:"parts_loc"`
	File           string  `json:"file"`
	Records        int64   `json:"records"` // records of the share, skipped ones included
	RecordsSkipped int64   `json:"records_skipped"`
	Examples       int64   `json:"examples"`
	Tokens         int64   `json:"tokens"`
	InputBytes     int64   `json:"input_bytes"`
	OutputBytes    int64   `json:"output_bytes"`
	Seconds        float64 `json:"seconds"`
}

// writePart writes a part's examples file and then its manifest into
// c.partsLoc, each replacing what an earlier try of the part left.
func writePart(ctx context.Context, c *prepConfig, in *loaded, exs []shard.Example, flags []uint8, st encode.Stats,
	t0 time.Time, prog *progress, stdout io.Writer) error {
	prog.phase("write", 0)
	if !storage.IsS3(c.partsLoc) {
		if err := os.MkdirAll(c.partsLoc, 0o755); err != nil {
			return err
		}
	}
	name := shard.PartFileName(c.part, c.parts)
	size, sum, err := writeObject(ctx, storage.Join(c.partsLoc, name), func(w io.Writer) (int64, string, error) {
		return shard.WritePart(w, exs, flags)
	})
	if err != nil {
		return fmt.Errorf("part %d/%d: %s: %w", c.part, c.parts, name, err)
	}
	var tokens int64
	for _, e := range exs {
		tokens += int64(len(e.Tokens))
	}
	res := in.res
	m := &shard.PartManifest{
		Format: shard.PartFormatName, Version: shard.PartFormatVersion, Part: c.part, Parts: c.parts,
		CreatedBy: createdBy(), Tokenizer: in.tokInfo, Options: partOptions(c, in),
		RecordsTruncated: st.Truncated, RecordsSplit: st.Split,
		Examples: int64(len(exs)), Tokens: tokens, InputBytes: res.RawBytes, Bytes: res.Bytes,
		File: shard.PartFileEntry{Path: name, Bytes: size, SHA256: sum},
	}
	for i, f := range in.files {
		m.Inputs = append(m.Inputs, shard.PartInput{File: f, Size: in.sizes[i]})
	}
	m.Share = []shard.PartPiece{}
	for _, p := range in.pieces {
		m.Share = append(m.Share, shard.PartPiece{File: p.File, Size: p.Size, Off: p.Off, End: p.End, Format: string(p.Format),
			Records: p.Records, Skipped: p.Skipped})
		m.Records += p.Records
		m.RecordsSkipped += p.Skipped
	}
	m.Seconds = time.Since(t0).Seconds()
	data, err := shard.EncodePartManifest(m)
	if err != nil {
		return err
	}
	mname := shard.PartManifestName(c.part, c.parts)
	if _, _, err := writeObject(ctx, storage.Join(c.partsLoc, mname), func(w io.Writer) (int64, string, error) {
		_, err := w.Write(data)
		return 0, "", err
	}); err != nil {
		return fmt.Errorf("part %d/%d: %s: %w", c.part, c.parts, mname, err)
	}
	prog.stop()
	s := partSummary{Part: c.part, Parts: c.parts, PartsLoc: c.partsLoc, File: name, Records: m.Records, RecordsSkipped: m.RecordsSkipped,
		Examples: m.Examples, Tokens: tokens, InputBytes: m.InputBytes, OutputBytes: size, Seconds: time.Since(t0).Seconds()}
	if c.jsonOut {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !c.quiet {
		prog.logf("%d records (%d skipped), %d examples, %d tokens -> %s (%.1f MB) in %.2f s",
			s.Records, s.RecordsSkipped, s.Examples, s.Tokens, storage.Join(c.partsLoc, name), float64(size)/1e6, s.Seconds)
	}
	return nil
}

// partOptions are the options of c that decide the output.
func partOptions(c *prepConfig, in *loaded) shard.PartOptions {
	return shard.PartOptions{
		Layout: shard.Layout{SeqLen: c.seqLen, Mode: c.mode, Labels: c.labels}, Template: in.tmpl.Name, TemplateText: in.tmpl.Text,
		NoSpecial: c.noSpecial, SplitLong: c.splitLong, MaxRecords: c.maxRecords, Seed: c.seed, Ranks: c.ranks,
		DropLast: c.dropLast, BatchRows: c.batchRows, OnBadRecord: c.onBad,
	}
}

// writeObject writes loc atomically (storage.Create: temp + rename, or one
// S3 object), replacing what is there, with the bytes fill writes.
func writeObject(ctx context.Context, loc string, fill func(io.Writer) (int64, string, error)) (int64, string, error) {
	w, err := storage.Create(ctx, loc, storage.WithOverwrite(true))
	if err != nil {
		return 0, "", err
	}
	defer w.Abort()
	n, sum, err := fill(w)
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

// removeIfExists removes loc; a missing one is fine.
func removeIfExists(ctx context.Context, loc string) error {
	if err := storage.Remove(ctx, loc); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

package shard

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/storage"
)

// DirConfig describes a shard directory to write. Zero values take the
// defaults stated on each field.
type DirConfig struct {
	// Layout is the rows' layout: SeqLen, Mode and Labels are required
	// (PadID is the source's business: RowSource fills the rows).
	Layout    Layout
	Ranks     int // required, 1..MaxRanks
	Seed      uint64
	DropLast  bool
	BatchRows int // default DefaultBatchRows
	Workers   int // ranks written in parallel; default GOMAXPROCS
	// Force replaces an existing result; without it a directory that holds
	// manifest.json gives ErrExists.
	Force        bool
	Template     string
	TemplateText string
	Chat         *ChatInfo // chat-format input's template hash and date; nil otherwise
	Tokenizer    TokenizerInfo
	CreatedBy    string // default "ferry (goX.Y)"
	Stats        Stats  // copied into the manifest; Tokens, PadTokens and Efficiency are computed
	// StageDir holds shards on local disk before upload when the output is
	// s3://; default os.TempDir().
	StageDir string
	// Input names the source data in the manifest (informational).
	Input string
	// Sources, when set, are a mixture's sources: the shards carry every
	// segment's source (format version 2) and the manifest lists them.
	Sources []SourceInfo
	// BeforeManifest, when set, may amend the manifest (stats) just before
	// it is written.
	BeforeManifest func(*Manifest)
	// Progress, when set, is called (from several goroutines) with the
	// number of rows just written.
	Progress func(rows int)
}

// WriteDir writes one shard per rank and then manifest.json into out (a
// local directory, created if needed, or an s3:// prefix), laying out the
// source's unique rows as Assign defines. Every shard is written to a
// temporary file, synced, mapped and checked, then renamed (or uploaded)
// into place; manifest.json is written last the same way, so a run that
// fails or is killed at any point leaves no manifest.json. With Force, an
// existing manifest.json is removed before anything else is written.
func WriteDir(ctx context.Context, out string, cfg DirConfig, src RowSource) (*Manifest, error) {
	if cfg.BatchRows == 0 {
		cfg.BatchRows = DefaultBatchRows
	}
	if cfg.Workers <= 0 {
		cfg.Workers = runtime.GOMAXPROCS(0)
	}
	if cfg.CreatedBy == "" {
		cfg.CreatedBy = "ferry (" + runtime.Version() + ")"
	}
	layout := cfg.Layout
	probe := FileMeta{Rank: 0, Ranks: cfg.Ranks, SeqLen: layout.SeqLen, Mode: layout.Mode, Labels: layout.Labels, Sources: len(cfg.Sources) > 0}
	if err := probe.validate(); err != nil {
		return nil, err
	}
	if cfg.BatchRows < 1 || cfg.BatchRows > MaxBatchRows {
		return nil, fmt.Errorf("%w: batch_rows %d", ErrConfig, cfg.BatchRows)
	}
	unique := src.NumRows()
	order, rowsPerRank, err := Assign(unique, cfg.Ranks, cfg.Seed, cfg.DropLast)
	if err != nil {
		return nil, err
	}
	stage, err := storage.NewStage(out, cfg.StageDir)
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	defer stage.Close()
	if err := prepareOut(ctx, out, cfg.Force); err != nil {
		return nil, err
	}

	m := &Manifest{
		Format: FormatName, Version: probe.Version(), CreatedBy: cfg.CreatedBy,
		SeqLen: layout.SeqLen, Mode: layout.Mode, Labels: layout.Labels, Ranks: cfg.Ranks,
		RowsPerRank: rowsPerRank, UniqueRows: unique, TotalRows: rowsPerRank * cfg.Ranks,
		DropLast: cfg.DropLast, Seed: cfg.Seed, BatchRows: cfg.BatchRows,
		Template: cfg.Template, TemplateText: cfg.TemplateText, Chat: cfg.Chat, Tokenizer: cfg.Tokenizer,
		Input: cfg.Input, Files: make([]FileEntry, cfg.Ranks), Sources: cfg.Sources, Stats: cfg.Stats,
	}
	var tokens atomic.Int64 // non-pad tokens over the distinct rows written
	// Every row's loss-token count, rank-major: loss_tokens.u32.
	lossTokens := make([]byte, 4*m.TotalRows)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.Workers)
	for rank := range cfg.Ranks {
		g.Go(func() error {
			meta := FileMeta{Rank: rank, Ranks: cfg.Ranks, SeqLen: layout.SeqLen, Mode: layout.Mode, Labels: layout.Labels,
				TokenizerSHA256: cfg.Tokenizer.SHA256, Sources: probe.Sources}
			name := FileName(rank, cfg.Ranks)
			row := layout.NewRow()
			var tok int64
			fe, err := writeFile(gctx, stage.Dir(), name, meta, cfg.BatchRows, rowsPerRank, func(j int) (*Row, error) {
				p := j*cfg.Ranks + rank
				if err := src.FillRow(int(order[p]), row); err != nil {
					return nil, err
				}
				if p < unique {
					tok += int64(row.Length)
				}
				binary.LittleEndian.PutUint32(lossTokens[4*(rank*rowsPerRank+j):], row.LossTokens())
				return row, nil
			}, cfg.Progress)
			if err != nil {
				return err
			}
			if err := stage.Publish(gctx, name); err != nil {
				return fmt.Errorf("shard: %w", err)
			}
			tokens.Add(tok)
			m.Files[rank] = fe
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	distinct := min(unique, m.TotalRows)
	m.Stats.Tokens = tokens.Load()
	m.Stats.PadTokens = int64(distinct)*int64(layout.SeqLen) - m.Stats.Tokens
	if distinct > 0 {
		m.Stats.Efficiency = float64(m.Stats.Tokens) / (float64(distinct) * float64(layout.SeqLen))
	}
	if cfg.DropLast {
		m.Stats.RowsDropped = int64(unique - m.TotalRows)
	} else {
		m.Stats.RowsRepeated = int64(m.TotalRows - unique)
	}
	var lossTotal int64
	for i := 0; i < len(lossTokens); i += 4 {
		lossTotal += int64(binary.LittleEndian.Uint32(lossTokens[i:]))
	}
	sum := sha256.Sum256(lossTokens)
	m.LossTokens = &SideFile{Path: LossTokensName, Bytes: int64(len(lossTokens)), SHA256: hex.EncodeToString(sum[:]),
		Total: lossTotal}
	if err := storage.WriteFile(ctx, storage.Join(out, LossTokensName), lossTokens); err != nil {
		return nil, fmt.Errorf("shard: %s: %w", LossTokensName, err)
	}
	if cfg.BeforeManifest != nil {
		cfg.BeforeManifest(m)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("shard: internal error: %w", err)
	}
	if err := WriteManifest(ctx, out, m); err != nil {
		return nil, err
	}
	return m, nil
}

// WriteManifest writes m as out/manifest.json atomically (temp + rename, or
// one S3 object), replacing any previous one.
func WriteManifest(ctx context.Context, out string, m *Manifest) error {
	data, err := m.Encode()
	if err != nil {
		return err
	}
	if err := storage.WriteFile(ctx, storage.Join(out, ManifestName), data); err != nil {
		return fmt.Errorf("shard: manifest: %w", err)
	}
	return nil
}

// prepareOut refuses an existing result unless force, in which case it
// removes manifest.json first (so that a later failure cannot leave an old
// manifest describing new files). It then removes the shards (and local
// temporary files) of any earlier, replaced or unfinished run.
func prepareOut(ctx context.Context, out string, force bool) error {
	mloc := storage.Join(out, ManifestName)
	_, err := storage.Stat(ctx, mloc)
	switch {
	case err == nil && !force:
		return fmt.Errorf("%w: %s (use --force to replace it)", ErrExists, mloc)
	case err == nil:
		if err := storage.Remove(ctx, mloc); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("shard: remove old manifest: %w", err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("shard: %w", err)
	}
	stale := func(base string) bool {
		return base == LossTokensName || strings.HasPrefix(base, "rank-") && strings.HasSuffix(base, ".arrow")
	}
	if err := storage.RemoveMatching(ctx, out, stale); err != nil {
		return fmt.Errorf("shard: remove stale shard: %w", err)
	}
	return nil
}

// writeFile writes rows rows (from next) as dir/name through a
// storage.AtomicFile, maps the temporary file, checks it, and commits it
// (fsync, rename, fsync of dir); it returns the file's manifest entry.
func writeFile(ctx context.Context, dir, name string, meta FileMeta, batchRows, rows int,
	next func(j int) (*Row, error), progress func(int)) (fe FileEntry, err error) {
	a, err := storage.CreateAtomic(filepath.Join(dir, name), storage.WithOverwrite(true))
	if err != nil {
		return fe, fmt.Errorf("shard: %w", err)
	}
	defer a.Abort() // a no-op after Commit
	// The SHA-256 is taken of the bytes as they are written: hashing the
	// mapped file afterwards would fault every page of it into this
	// process (a pad-mode shard is hundreds of MB, and 8 are written at
	// once: GBs of peak RSS for nothing).
	h := sha256.New()
	bw := newBufWriter(io.MultiWriter(a.File(), h))
	w, err := NewWriter(bw, meta, WithBatchRows(batchRows))
	if err != nil {
		return fe, err
	}
	const tick = 256
	for j := range rows {
		if j%tick == 0 {
			if err := ctx.Err(); err != nil {
				return fe, context.Cause(ctx)
			}
			if progress != nil && j > 0 {
				progress(tick)
			}
		}
		row, err := next(j)
		if err != nil {
			return fe, fmt.Errorf("shard: %s row %d: %w", name, j, err)
		}
		if err := w.Add(row); err != nil {
			return fe, fmt.Errorf("shard: %s: %w", name, err)
		}
	}
	if progress != nil && rows > 0 {
		progress((rows-1)%tick + 1)
	}
	if err := w.Close(); err != nil {
		return fe, fmt.Errorf("shard: %s: %w", name, err)
	}
	if err := bw.flush(); err != nil {
		return fe, fmt.Errorf("shard: %s: %w", name, err)
	}
	r, err := Open(a.TempName())
	if err != nil {
		return fe, fmt.Errorf("shard: %s: written file does not read back: %w", name, err)
	}
	fe = fileEntry(r, meta.Rank, name, hex.EncodeToString(h.Sum(nil)))
	r.Close()
	if fe.Rows != rows {
		return fe, fmt.Errorf("shard: %s: wrote %d rows, read back %d", name, rows, fe.Rows)
	}
	if err := a.Commit(ctx); err != nil {
		if ctx.Err() != nil {
			return fe, context.Cause(ctx)
		}
		return fe, fmt.Errorf("shard: %w", err)
	}
	return fe, nil
}

// bufWriter is a minimal buffered writer (1 MiB) with a sticky error.
type bufWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func newBufWriter(w io.Writer) *bufWriter { return &bufWriter{w: w, buf: make([]byte, 0, 1<<20)} }

func (b *bufWriter) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(b.buf)+len(p) > cap(b.buf) {
		if err := b.flush(); err != nil {
			return 0, err
		}
		if len(p) >= cap(b.buf) {
			if _, err := b.w.Write(p); err != nil {
				b.err = err
				return 0, err
			}
			return len(p), nil
		}
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *bufWriter) flush() error {
	if b.err != nil {
		return b.err
	}
	if len(b.buf) > 0 {
		if _, err := b.w.Write(b.buf); err != nil {
			b.err = err
			return err
		}
		b.buf = b.buf[:0]
	}
	return nil
}

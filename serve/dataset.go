package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"time"

	"github.com/ferryml/ferry/internal/corrupt"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// ErrCorrupt marks a dataset (manifest or shard file) that breaks the shard
// format contract of docs/shard-format.md. Errors from package shard are
// wrapped with it, so errors.Is also matches shard.ErrCorrupt or
// shard.ErrMismatch.
var ErrCorrupt = errors.New("serve: corrupt dataset")

// ErrNotServed reports a row of a shard the daemon was not asked to serve.
var ErrNotServed = errors.New("serve: shard not served")

// batchView holds the buffers of one record batch of a mapped shard, as
// bytes of the file: fillSlot copies them into a ring as they are.
type batchView struct {
	rows                          int
	inputIDs, labels, positionIDs []byte // rows × L × 4
	length                        []byte // rows × 4
	segOffsets                    []byte // (rows+1) × 4
	segSample                     []byte // segments × 8
	segLength                     []byte // segments × 4
	segSource                     []byte // segments × 4; nil in a version 1 shard (every source 0)
}

// shardFile is one mapped shard.
type shardFile struct {
	r       *shard.Reader
	rows    int64
	batches []batchView
}

// Dataset is a dataprep output whose served shards are mapped read-only.
// It is safe for concurrent use; Close unmaps everything.
type Dataset struct {
	Loc       string
	SeqLen    int
	Pack      bool
	Ranks     int
	BatchRows int64
	files     []*shardFile // by rank; nil when not served
	served    []int
	info      []byte // manifest JSON without per-batch buffers, plus served_ranks
	ones      []byte // seq_len little-endian int32 ones: the attention mask source
}

// DatasetOption configures OpenDataset.
type DatasetOption func(*datasetConfig) error

type datasetConfig struct {
	ranks    []int
	cacheDir string
	verify   bool
	logf     func(format string, args ...any)
}

// WithRanks maps only the shards of these ranks (default: all). A rank
// outside the manifest's is an error.
func WithRanks(ranks ...int) DatasetOption {
	return func(c *datasetConfig) error {
		for _, r := range ranks {
			if r < 0 {
				return fmt.Errorf("serve: rank %d to serve is negative", r)
			}
		}
		c.ranks = ranks
		return nil
	}
}

// WithCacheDir sets where shards of an s3:// dataset are fetched to
// (required for S3; default none).
func WithCacheDir(dir string) DatasetOption {
	return func(c *datasetConfig) error { c.cacheDir = dir; return nil }
}

// WithVerify checks the SHA-256 of local shards against the manifest
// (default false: sizes, structure and buffer offsets are always checked;
// fetched shards are always hashed while they stream in).
func WithVerify(v bool) DatasetOption {
	return func(c *datasetConfig) error { c.verify = v; return nil }
}

// WithLogf receives a line per fetched shard (default: none).
func WithLogf(logf func(format string, args ...any)) DatasetOption {
	return func(c *datasetConfig) error { c.logf = logf; return nil }
}

// OpenDataset reads loc/manifest.json and maps the served shards. For an
// s3:// location the shards are first fetched into the cache directory
// (verified against the manifest's size and SHA-256 while streaming; a
// verified copy from an earlier run is reused). Package shard parses and
// checks the manifest (shard.DecodeManifest) and every shard
// (Manifest.OpenFile); this package only indexes the validated buffers.
func OpenDataset(ctx context.Context, loc string, opts ...DatasetOption) (_ *Dataset, err error) {
	cfg := datasetConfig{logf: func(string, ...any) {}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ranks, cacheDir := cfg.ranks, cfg.cacheDir
	_, local := storage.LocalPath(loc)
	remote := !local
	mloc := storage.Join(loc, shard.ManifestName)
	rc, _, err := storage.OpenStream(ctx, mloc)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w (a dataprep output directory has a manifest.json)", mloc, err)
	}
	var raw bytes.Buffer // kept for Info, which passes on keys this daemon does not know
	m, err := shard.DecodeManifest(mloc, io.TeeReader(rc, &raw))
	rc.Close()
	if err != nil {
		return nil, asCorrupt(err)
	}
	if int64(m.RowsPerRank) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: %s: %d rows per shard, the protocol addresses at most %d", ErrLimit, mloc, m.RowsPerRank, uint64(math.MaxUint32))
	}
	if len(ranks) == 0 {
		for r := range m.Ranks {
			ranks = append(ranks, r)
		}
	}
	ranks = slices.Clone(ranks)
	slices.Sort(ranks)
	ranks = slices.Compact(ranks)
	for _, r := range ranks {
		if r < 0 || r >= m.Ranks {
			return nil, fmt.Errorf("serve: rank %d to serve: %s has ranks 0..%d", r, mloc, m.Ranks-1)
		}
	}
	d := &Dataset{Loc: loc, SeqLen: m.SeqLen, Pack: m.Mode == shard.ModePack, Ranks: m.Ranks, BatchRows: int64(m.BatchRows),
		files: make([]*shardFile, m.Ranks), served: ranks, ones: make([]byte, 4*m.SeqLen)}
	for i := range m.SeqLen {
		d.ones[4*i] = 1
	}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if remote {
		if cacheDir == "" {
			return nil, fmt.Errorf("serve: %s is on S3: a cache directory for the fetched shards is needed", loc)
		}
		if err := os.MkdirAll(cacheDir, 0o755); err != nil {
			return nil, fmt.Errorf("serve: cache directory: %w", err)
		}
	}
	for _, rank := range ranks {
		var r *shard.Reader
		if remote {
			r, err = fetchShard(ctx, loc, cacheDir, m, rank, cfg.logf)
		} else {
			var vo []shard.VerifyOption
			if cfg.verify {
				vo = append(vo, shard.WithChecksum())
			}
			r, err = m.OpenFile(storage.Join(loc, m.Files[rank].Path), rank, vo...)
			if err != nil {
				err = asCorrupt(err)
			}
		}
		if err != nil {
			return nil, err
		}
		d.files[rank] = newShardFile(r)
	}
	d.info, err = infoJSON(raw.Bytes(), ranks)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", mloc, err)
	}
	return d, nil
}

// asCorrupt marks an error of package shard that says the dataset breaks its
// contract with ErrCorrupt (I/O errors pass as they are); errors.As still
// finds shard's *corrupt.Error (path, offset, what) inside.
func asCorrupt(err error) error {
	if errors.Is(err, shard.ErrCorrupt) || errors.Is(err, shard.ErrMismatch) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return fmt.Errorf("serve: %w", err)
}

// newShardFile indexes the batches of a validated shard: the reader lists
// every values buffer, and the manifest's checks guarantee batch_rows rows
// in every batch but the last, and at least one segment per row.
func newShardFile(r *shard.Reader) *shardFile {
	data := r.Bytes()
	f := &shardFile{r: r, rows: int64(r.NumRows()), batches: make([]batchView, r.NumBatches())}
	for i := range f.batches {
		b := r.Batch(i)
		bufs := b.Buffers()
		buf := func(name string) []byte {
			ref := bufs[name]
			return data[ref.Offset : ref.Offset+ref.Length]
		}
		f.batches[i] = batchView{rows: b.Rows,
			inputIDs: buf(shard.ColInputIDs), labels: buf(shard.ColLabels), length: buf(shard.ColLength),
			segOffsets: buf("segments.offsets"), segSample: buf("segments.sample"), segLength: buf("segments.length")}
		if b.SegSource != nil {
			f.batches[i].segSource = buf("segments.source")
		}
		if b.PositionIDs != nil {
			f.batches[i].positionIDs = buf(shard.ColPositionIDs)
		}
	}
	return f
}

// infoJSON is the manifest as sent to clients: without per-batch buffers
// (the client does not map files) and with the served ranks.
func infoJSON(raw []byte, served []int) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, err
	}
	var files []map[string]json.RawMessage
	if err := json.Unmarshal(top["files"], &files); err != nil {
		return nil, err
	}
	for _, f := range files {
		delete(f, "batches")
	}
	fb, err := json.Marshal(files)
	if err != nil {
		return nil, err
	}
	top["files"] = fb
	delete(top, "template_text")
	sb, _ := json.Marshal(served)
	top["served_ranks"] = sb
	return json.Marshal(top)
}

// Info is the JSON document sent to clients in MsgWelcome.
func (d *Dataset) Info() []byte { return d.info }

// Served returns the served ranks in increasing order.
func (d *Dataset) Served() []int { return d.served }

// Close unmaps the shards.
func (d *Dataset) Close() error {
	for i, f := range d.files {
		if f != nil {
			f.r.Close()
			d.files[i] = nil
		}
	}
	return nil
}

// fetchShard maps the shard of rank of the S3 dataset at loc from the cache
// directory, fetching it first unless a copy that checks out against the
// manifest (size, SHA-256, structure) is already there. The copy is named by
// its SHA-256.
func fetchShard(ctx context.Context, loc, cacheDir string, m *shard.Manifest, rank int, logf func(string, ...any)) (*shard.Reader, error) {
	fe := &m.Files[rank]
	src := storage.Join(loc, fe.Path)
	local := filepath.Join(cacheDir, fe.SHA256+"-"+path.Base(fe.Path))
	if r, err := m.OpenFile(local, rank, shard.WithChecksum()); err == nil {
		logf("using %s (verified copy of %s)", local, src)
		return r, nil
	}
	start := time.Now()
	// Only a copy whose size and SHA-256 check out is ever committed to
	// the cache.
	if err := storage.Fetch(ctx, src, local, fe.SHA256, fe.Bytes); errors.Is(err, storage.ErrChecksum) {
		return nil, corrupt.New(ErrCorrupt, src, -1, "the fetched copy does not match the manifest (%v)", err)
	} else if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	logf("fetched %s (%d bytes) to %s in %.1fs", src, fe.Bytes, local, time.Since(start).Seconds())
	r, err := m.OpenFile(local, rank) // hashed while it streamed in
	if err != nil {
		return nil, asCorrupt(err)
	}
	return r, nil
}

// checkRun reports an error wrapping ErrNotServed or ErrLimit for a run
// outside the served shards.
func (d *Dataset) checkRun(r Run) error {
	if int(r.File) >= len(d.files) || d.files[r.File] == nil {
		return fmt.Errorf("%w: shard %d; this daemon serves %v of %d (start it with --ranks covering every shard this node reads)", ErrNotServed, r.File, d.served, d.Ranks)
	}
	if n := d.files[r.File].rows; int64(r.Row)+int64(r.Rows) > n {
		return fmt.Errorf("%w: rows %d..%d of shard %d, the shard has %d rows", ErrLimit, r.Row, int64(r.Row)+int64(r.Rows)-1, r.File, n)
	}
	return nil
}

// fillSlot copies the rows of runs (checked with checkRun, at most
// l.MaxRows in all) into one slot of the ring, a record batch's worth of
// rows at a time. It does not allocate.
func (d *Dataset) fillSlot(l *Layout, slot []byte, runs []Run) int {
	L := int(l.SeqLen)
	tok := 4 * L
	col := func(id int) []byte {
		c := l.Columns[id]
		if !c.Present() {
			return nil
		}
		n := int(uint64(l.MaxRows) * uint64(c.Width) * c.ItemSize())
		return slot[c.Offset : int(c.Offset)+n]
	}
	in, lab, am, pos, ln, sm := col(ColInputIDs), col(ColLabels), col(ColAttentionMask), col(ColPositionIDs), col(ColLength), col(ColSample)
	src := col(ColSourceIDs)
	i := 0 // rows written
	for _, r := range runs {
		f := d.files[r.File]
		for row, end := int64(r.Row), int64(r.Row)+int64(r.Rows); row < end; {
			b := &f.batches[row/d.BatchRows]
			k := int(row % d.BatchRows)
			m := int(min(end-row, int64(b.rows-k)))
			copy(in[i*tok:(i+m)*tok], b.inputIDs[k*tok:(k+m)*tok])
			copy(lab[i*tok:(i+m)*tok], b.labels[k*tok:(k+m)*tok])
			copy(ln[4*i:4*(i+m)], b.length[4*k:4*(k+m)])
			if pos != nil {
				copy(pos[i*tok:(i+m)*tok], b.positionIDs[k*tok:(k+m)*tok])
			}
			for j := range m {
				if am != nil {
					n := int(int32(le.Uint32(b.length[4*(k+j):])))
					dst := am[(i+j)*tok : (i+j+1)*tok]
					copy(dst[:4*n], d.ones[:4*n])
					clear(dst[4*n:])
				}
				so := int(int32(le.Uint32(b.segOffsets[4*(k+j):])))
				copy(sm[8*(i+j):8*(i+j+1)], b.segSample[8*so:8*so+8])
				if src != nil {
					eo := int(int32(le.Uint32(b.segOffsets[4*(k+j+1):])))
					b.sourceIDs(src[(i+j)*tok:(i+j+1)*tok], so, eo)
				}
			}
			i += m
			row += int64(m)
		}
	}
	return i
}

// sourceIDs writes the source of every token of the row whose segments are
// [so, eo) into dst (one row of the source_ids column): each segment's
// source (0 in a version 1 shard) over its tokens, -1 on the padding after
// them. The shard reader checked that the segments tile the row's length
// from token 0 (shard.checkSegments), as ferry.ShardFile.source_ids assumes.
func (b *batchView) sourceIDs(dst []byte, so, eo int) {
	at := 0
	for s := so; s < eo; s++ {
		n := 4 * int(int32(le.Uint32(b.segLength[4*s:])))
		if b.segSource == nil {
			clear(dst[at : at+n])
		} else {
			v := le.Uint32(b.segSource[4*s:])
			for t := at; t < at+n; t += 4 {
				le.PutUint32(dst[t:], v)
			}
		}
		at += n
	}
	for t := at; t < len(dst); t++ {
		dst[t] = 0xff // -1, little-endian
	}
}

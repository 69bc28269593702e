package serve

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/shm"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// ErrCorrupt marks a dataset (manifest or shard file) that breaks the shard
// format contract of docs/shard-format.md.
var ErrCorrupt = errors.New("serve: corrupt dataset")

// ErrNotServed reports a row of a shard the daemon was not asked to serve.
var ErrNotServed = errors.New("serve: shard not served")

// maxManifestSize bounds manifest.json.
const maxManifestSize = 256 << 20

// manifest is the part of manifest.json the daemon needs.
type manifest struct {
	Format      string         `json:"format"`
	Version     int            `json:"version"`
	SeqLen      int            `json:"seq_len"`
	Mode        string         `json:"mode"`
	Ranks       int            `json:"ranks"`
	RowsPerRank int64          `json:"rows_per_rank"`
	BatchRows   int64          `json:"batch_rows"`
	Files       []manifestFile `json:"files"`
}

type manifestFile struct {
	Rank    int             `json:"rank"`
	Path    string          `json:"path"`
	Bytes   int64           `json:"bytes"`
	SHA256  string          `json:"sha256"`
	Rows    int64           `json:"rows"`
	Batches []manifestBatch `json:"batches"`
}

type manifestBatch struct {
	RowStart int64                     `json:"row_start"`
	Rows     int64                     `json:"rows"`
	Buffers  map[string]manifestBuffer `json:"buffers"`
}

type manifestBuffer struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// batchView holds the validated buffers of one record batch of a mapped file.
type batchView struct {
	rows                          int
	inputIDs, labels, positionIDs []byte // rows × L × 4
	length                        []byte // rows × 4
	segOffsets                    []byte // (rows+1) × 4
	segSample                     []byte // segments × 8
}

// shardFile is one mapped shard.
type shardFile struct {
	name    string
	rows    int64
	data    []byte
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
// (default false: sizes, magic and buffer offsets are always checked;
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
// verified copy from an earlier run is reused).
func OpenDataset(ctx context.Context, loc string, opts ...DatasetOption) (_ *Dataset, err error) {
	cfg := datasetConfig{logf: func(string, ...any) {}}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	ranks, cacheDir, verify := cfg.ranks, cfg.cacheDir, cfg.verify
	remote := storage.IsS3(loc)
	mloc := joinLoc(loc, "manifest.json")
	rc, size, err := storage.OpenStream(ctx, mloc)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w (a dataprep output directory has a manifest.json)", mloc, err)
	}
	if size > maxManifestSize {
		rc.Close()
		return nil, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrCorrupt, mloc, size, maxManifestSize)
	}
	raw, err := io.ReadAll(io.LimitReader(rc, maxManifestSize+1))
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", mloc, err)
	}
	m, err := parseManifest(mloc, raw)
	if err != nil {
		return nil, err
	}
	// The shard package's own validation of the manifest, and below of
	// every mapped file against it (Arrow structure, schema metadata,
	// buffer offsets), backs the offsets this package copies from.
	sm, err := shard.DecodeManifest(mloc, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
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
	d := &Dataset{Loc: loc, SeqLen: m.SeqLen, Pack: m.Mode == "pack", Ranks: m.Ranks, BatchRows: m.BatchRows,
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
	for _, r := range ranks {
		mf := &m.Files[r]
		p := joinLoc(loc, mf.Path)
		if remote {
			local := filepath.Join(cacheDir, mf.SHA256+"-"+path.Base(mf.Path))
			start := time.Now()
			fetched, err := fetch(ctx, p, local, mf)
			if err != nil {
				return nil, err
			}
			if fetched {
				cfg.logf("fetched %s (%d bytes) to %s in %.1fs", p, mf.Bytes, local, time.Since(start).Seconds())
			} else {
				cfg.logf("using %s (verified copy of %s)", local, p)
			}
			p = local
		} else if verify {
			if err := checkSHA(p, mf); err != nil {
				return nil, err
			}
		}
		f, err := mapShard(p, m, mf)
		if err != nil {
			return nil, err
		}
		d.files[r] = f
		ar, err := shard.NewMappedReader(p, f.data)
		if err == nil {
			err = sm.VerifyFile(ar, r)
			ar.Close() // does not unmap: the data is ours
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	d.info, err = infoJSON(raw, ranks)
	if err != nil {
		return nil, fmt.Errorf("serve: %s: %w", mloc, err)
	}
	return d, nil
}

func joinLoc(base, name string) string {
	if storage.IsS3(base) {
		return strings.TrimSuffix(base, "/") + "/" + name
	}
	return filepath.Join(base, name)
}

func parseManifest(name string, raw []byte) (*manifest, error) {
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, name, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Format != "ferry-shards":
		return nil, bad("format %q, want \"ferry-shards\"", m.Format)
	case m.Version != 1:
		return nil, bad("version %d, this daemon reads version 1", m.Version)
	case m.SeqLen < 1 || m.SeqLen > maxSeqLen:
		return nil, bad("seq_len %d out of 1..%d", m.SeqLen, maxSeqLen)
	case m.Mode != "pad" && m.Mode != "pack":
		return nil, bad("mode %q, want pad or pack", m.Mode)
	case m.Ranks < 1 || m.Ranks != len(m.Files):
		return nil, bad("ranks %d with %d files", m.Ranks, len(m.Files))
	case m.BatchRows < 1:
		return nil, bad("batch_rows %d", m.BatchRows)
	}
	for i, f := range m.Files {
		if f.Rank != i {
			return nil, bad("files[%d] is rank %d", i, f.Rank)
		}
		if f.Path == "" || path.IsAbs(f.Path) || strings.Contains(f.Path, "..") || strings.ContainsRune(f.Path, '\\') {
			return nil, bad("files[%d].path %q is not a plain file name", i, f.Path)
		}
		if f.Rows != m.RowsPerRank || f.Rows < 0 || f.Rows > 1<<32-1 {
			return nil, bad("files[%d].rows %d, rows_per_rank %d", i, f.Rows, m.RowsPerRank)
		}
	}
	return &m, nil
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
			shm.Unmap(f.data)
			d.files[i] = nil
		}
	}
	return nil
}

func mapShard(p string, m *manifest, mf *manifestFile) (*shardFile, error) {
	fh, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("serve: shard: %w", err)
	}
	defer fh.Close()
	data, err := shm.MapFile(fh)
	if err != nil {
		return nil, fmt.Errorf("serve: shard %s: %w", p, err)
	}
	f := &shardFile{name: p, rows: mf.Rows, data: data}
	if err := f.index(m, mf); err != nil {
		shm.Unmap(data)
		return nil, err
	}
	return f, nil
}

// index validates the file against its manifest entry and slices the buffers
// of every batch, so that filling a slot needs no further checks.
func (f *shardFile) index(m *manifest, mf *manifestFile) error {
	size := int64(len(f.data))
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrCorrupt, f.name, fmt.Sprintf(format, args...))
	}
	if size != mf.Bytes {
		return bad("%d bytes, manifest says %d", size, mf.Bytes)
	}
	if size < 8 || string(f.data[:6]) != "ARROW1" || string(f.data[size-6:]) != "ARROW1" {
		return bad("not an Arrow IPC file (no ARROW1 magic at byte 0 and at the end)")
	}
	L := int64(m.SeqLen)
	var next int64
	for bi, b := range mf.Batches {
		if b.RowStart != next || b.Rows < 1 || b.Rows > m.BatchRows || (b.Rows != m.BatchRows && bi != len(mf.Batches)-1) {
			return bad("batch %d: row_start %d rows %d, want row_start %d and %d rows (fewer only in the last batch)", bi, b.RowStart, b.Rows, next, m.BatchRows)
		}
		next += b.Rows
		buf := func(name string, want int64, exact bool) ([]byte, error) {
			e, ok := b.Buffers[name]
			if !ok {
				return nil, bad("batch %d: buffer %q missing from the manifest", bi, name)
			}
			if e.Offset < 0 || e.Length < 0 || e.Offset%8 != 0 || e.Offset > size || e.Length > size-e.Offset {
				return nil, bad("batch %d: buffer %q at offset %d length %d is outside the %d-byte file or unaligned", bi, name, e.Offset, e.Length, size)
			}
			if e.Length < want {
				return nil, bad("batch %d: buffer %q is %d bytes, want %d", bi, name, e.Length, want)
			}
			return f.data[e.Offset : e.Offset+e.Length], nil
		}
		v := batchView{rows: int(b.Rows)}
		var err error
		if v.inputIDs, err = buf("input_ids", b.Rows*L*4, true); err != nil {
			return err
		}
		if v.labels, err = buf("labels", b.Rows*L*4, true); err != nil {
			return err
		}
		if m.Mode == "pack" {
			if v.positionIDs, err = buf("position_ids", b.Rows*L*4, true); err != nil {
				return err
			}
		}
		if v.length, err = buf("length", b.Rows*4, true); err != nil {
			return err
		}
		if v.segOffsets, err = buf("segments.offsets", (b.Rows+1)*4, true); err != nil {
			return err
		}
		if v.segSample, err = buf("segments.sample", 0, false); err != nil {
			return err
		}
		nseg := int64(len(v.segSample) / 8)
		prev := int64(0)
		for r := int64(0); r <= b.Rows; r++ {
			o := int64(int32(le.Uint32(v.segOffsets[4*r:])))
			if (r == 0 && o != 0) || o < prev || o > nseg || (r > 0 && o == prev) {
				return bad("batch %d: segments offset %d of row %d not increasing within 0..%d", bi, o, b.RowStart+r, nseg)
			}
			prev = o
		}
		for r := int64(0); r < b.Rows; r++ {
			if n := int64(int32(le.Uint32(v.length[4*r:]))); n < 0 || n > L {
				return bad("row %d: length %d out of 0..%d", b.RowStart+r, n, L)
			}
		}
		f.batches = append(f.batches, v)
	}
	if next != mf.Rows {
		return bad("batches hold %d rows, manifest says %d", next, mf.Rows)
	}
	return nil
}

func checkSHA(p string, mf *manifestFile) error {
	fh, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("serve: shard: %w", err)
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return fmt.Errorf("serve: shard %s: %w", p, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != mf.SHA256 {
		return fmt.Errorf("%w: %s: sha256 %s, manifest says %s", ErrCorrupt, p, got, mf.SHA256)
	}
	return nil
}

// fetch copies a remote shard into local, verifying size and SHA-256 on the
// way; an existing verified copy (named by its SHA-256) is reused, and
// fetched reports false then.
func fetch(ctx context.Context, src, local string, mf *manifestFile) (fetched bool, err error) {
	if st, err := os.Stat(local); err == nil && st.Size() == mf.Bytes {
		if checkSHA(local, mf) == nil {
			return false, nil
		}
	}
	rc, size, err := storage.OpenStream(ctx, src)
	if err != nil {
		return false, fmt.Errorf("serve: fetch %s: %w", src, err)
	}
	defer rc.Close()
	if size != mf.Bytes {
		return false, fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, src, size, mf.Bytes)
	}
	w, err := storage.Create(ctx, local, storage.WithOverwrite(true))
	if err != nil {
		return false, fmt.Errorf("serve: fetch %s: %w", src, err)
	}
	defer w.Abort()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), rc); err != nil {
		return false, fmt.Errorf("serve: fetch %s: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != mf.SHA256 {
		return false, fmt.Errorf("%w: %s: sha256 %s, manifest says %s", ErrCorrupt, src, got, mf.SHA256)
	}
	return true, w.Commit()
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
			}
			i += m
			row += int64(m)
		}
	}
	return i
}

package ckpt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/corrupt"
)

var perRankMetadataRE = regexp.MustCompile(`^__[0-9]+\.metadata$`)

// Input formats recognised by Open.
const (
	// FormatDCP is a torch.distributed.checkpoint directory: .metadata plus
	// .distcp files holding torch.save (or safetensors) items.
	FormatDCP = "dcp"
	// FormatSafetensorsShards is a directory of safetensors files as
	// written by torch's HuggingFaceStorageWriter (chunks described by
	// DCP_SHARDING_INFO) or plain full-tensor safetensors files.
	FormatSafetensorsShards = "safetensors-shards"
)

// Checkpoint is an opened, validated checkpoint. Its methods are safe for
// concurrent use; Close releases the files.
type Checkpoint struct {
	src    Source
	Format string
	Meta   *Metadata

	files  map[string]File
	spills []*os.File
}

type openConfig struct {
	parallelism int
	tempDir     string
}

// OpenOption configures Open.
type OpenOption func(*openConfig) error

// WithOpenParallelism sets how many chunk headers are read at once
// (default 16; useful on object stores where each read is a request).
func WithOpenParallelism(n int) OpenOption {
	return func(c *openConfig) error {
		if n < 1 {
			return fmt.Errorf("%w: parallelism %d", ErrConfig, n)
		}
		c.parallelism = n
		return nil
	}
}

// WithTempDir sets where items stored with a stream transform (zstd) are
// decoded to (default os.TempDir()). Decoding to disk keeps memory bounded.
func WithTempDir(dir string) OpenOption {
	return func(c *openConfig) error { c.tempDir = dir; return nil }
}

// OpenDir opens a local checkpoint directory.
func OpenDir(ctx context.Context, dir string, opts ...OpenOption) (*Checkpoint, error) {
	return Open(ctx, DirSource(dir), opts...)
}

// Open reads a checkpoint's metadata, opens its data files, locates every
// chunk's bytes (parsing each torch.save blob header) and checks that the
// chunks tile every tensor exactly: in bounds, no overlap, no gap. Errors
// name the tensor, the chunk and the file.
func Open(ctx context.Context, src Source, opts ...OpenOption) (*Checkpoint, error) {
	cfg := openConfig{parallelism: 16, tempDir: os.TempDir()}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	c := &Checkpoint{src: src, files: map[string]File{}}
	ok := false
	defer func() {
		if !ok {
			c.Close()
		}
	}()
	raw, err := readAll(ctx, src, ".metadata", MaxMetadataSize)
	switch {
	case err == nil:
		c.Format = FormatDCP
		if c.Meta, err = ParseMetadata(raw, src.String()+"/.metadata"); err != nil {
			return nil, err
		}
		if err := c.locateDCP(ctx, &cfg); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		if names, lerr := src.List(ctx); lerr == nil {
			for _, n := range names {
				if perRankMetadataRE.MatchString(n) {
					return nil, fmt.Errorf("%s: %w: per-rank metadata files (%s, torch's no-collectives save) instead of one .metadata", src, ErrUnsupported, n)
				}
			}
		}
		c.Format = FormatSafetensorsShards
		if err := c.openSTShards(ctx); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	for _, it := range c.Meta.Items {
		if it.Kind == KindTensor {
			if err := checkCoverage(it); err != nil {
				return nil, fmt.Errorf("%s: %w", src, err)
			}
		}
	}
	ok = true
	return c, nil
}

// Close closes the checkpoint's files and removes decoded spill files.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	c.files = nil
	for _, f := range c.spills {
		f.Close()
		os.Remove(f.Name())
	}
	c.spills = nil
	return first
}

// Source returns the checkpoint's source.
func (c *Checkpoint) Source() Source { return c.src }

func (c *Checkpoint) file(ctx context.Context, name string) (File, error) {
	if f, ok := c.files[name]; ok {
		return f, nil
	}
	f, err := c.src.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	c.files[name] = f
	return f, nil
}

// locateDCP opens every data file and parses every chunk's blob header.
func (c *Checkpoint) locateDCP(ctx context.Context, cfg *openConfig) error {
	type job struct {
		it *Item
		ci int
	}
	var jobs []job
	for _, it := range c.Meta.Items {
		locs := []*Location{}
		if it.Kind == KindBytes {
			locs = append(locs, it.Bytes)
		}
		for ci := range it.Chunks {
			locs = append(locs, &it.Chunks[ci].Loc)
			if numel(it.Chunks[ci].Sizes) > 0 {
				jobs = append(jobs, job{it, ci})
			}
		}
		for _, l := range locs {
			f, err := c.file(ctx, l.File)
			if err != nil {
				return fmt.Errorf("%s: item %q: %w", c.src, it.Key, err)
			}
			if l.Offset > f.Size() || l.Length > f.Size()-l.Offset {
				return corrupt.New(ErrCorrupt, c.src.String()+"/"+l.File, l.Offset, "item %q: bytes [%d, %d) past end of the %d-byte file", it.Key, l.Offset, l.Offset+l.Length, f.Size())
			}
		}
	}
	var mu sync.Mutex
	stCache := map[string]*STHeader{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(cfg.parallelism)
	for _, j := range jobs {
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err
			}
			ch := &j.it.Chunks[j.ci]
			where := fmt.Sprintf("%s/%s: tensor %q chunk %s", c.src, ch.Loc.File, j.it.Key, fmtBox(ch.Offsets, ch.Sizes))
			f := c.files[ch.Loc.File]
			base := ch.Loc.Offset
			length := ch.Loc.Length
			if len(ch.Loc.Transforms) > 0 {
				sf, err := c.decodeTransforms(f, &ch.Loc, cfg.tempDir, &mu)
				if err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				f, base, length = sf, 0, sf.Size()
			}
			// a SAFETENSORS-serialized item records the blob start as its
			// offset and numel*itemsize as its length: peek past the length
			var er *edgeReader
			var head [9]byte
			if length >= 9 {
				var err error
				if er, err = newEdgeReader(io.NewSectionReader(f, base, length), length); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				copy(head[:], er.head)
			} else if f.Size()-base >= 9 {
				if _, err := f.ReadAt(head[:], base); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			}
			var cd *chunkData
			if looksLikeSafetensors(head[:]) {
				key := ch.Loc.File + "@" + fmt.Sprint(base)
				mu.Lock()
				h := stCache[key]
				mu.Unlock()
				if h == nil {
					var err error
					sec := io.NewSectionReader(f, base, f.Size()-base)
					if h, err = ParseSafetensorsPrefix(sec, f.Size()-base, where); err != nil {
						return err
					}
					mu.Lock()
					stCache[key] = h
					mu.Unlock()
				}
				var err error
				if cd, err = chunkFromST(h, f, base, j.it.Key, ch); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
			} else {
				var r io.ReaderAt = io.NewSectionReader(f, base, length)
				if er != nil {
					r = er
				}
				tb, err := ReadTensorBlob(r, length, where)
				if err != nil {
					return err
				}
				cd = &chunkData{f: f, file: ch.Loc.File, dtype: tb.DType, shape: tb.Shape, stride: tb.Stride,
					offset: base + tb.DataOffset, storOff: tb.StorageOffset, storLen: tb.DataLength / int64(tb.DType.Size())}
				if tb.DType == U8 && j.it.DType != U8 { // UntypedStorage: bytes
					isz := int64(j.it.DType.Size())
					cd.dtype, cd.storLen = j.it.DType, tb.DataLength/isz
				}
			}
			if cd.dtype != j.it.DType {
				return fmt.Errorf("%s: %w: stored dtype %s, metadata says %s", where, ErrCorrupt, cd.dtype, j.it.DType)
			}
			if !equalShape(cd.shape, ch.Sizes) {
				return fmt.Errorf("%s: %w: stored shape %s, metadata says %s", where, ErrCorrupt, fmtShape(cd.shape), fmtShape(ch.Sizes))
			}
			cd.rowMaj = isRowMajor(cd.shape, cd.stride)
			ch.data = cd
			return nil
		})
	}
	return g.Wait()
}

func equalShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// decodeTransforms undoes an item's stream transforms into a temporary file.
func (c *Checkpoint) decodeTransforms(f File, loc *Location, tempDir string, mu *sync.Mutex) (File, error) {
	for _, t := range loc.Transforms {
		if t != "stream.zstd/1" && t != "stream.zstd" {
			return nil, fmt.Errorf("%w: stream transform %q (known: stream.zstd/1)", ErrUnsupported, t)
		}
	}
	if len(loc.Transforms) != 1 {
		return nil, fmt.Errorf("%w: %d stacked stream transforms", ErrUnsupported, len(loc.Transforms))
	}
	dec, err := zstd.NewReader(io.NewSectionReader(f, loc.Offset, loc.Length), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(1<<40))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	tmp, err := os.CreateTemp(tempDir, "ckptmerge-zstd-*")
	if err != nil {
		return nil, err
	}
	mu.Lock()
	c.spills = append(c.spills, tmp)
	mu.Unlock()
	n, err := io.Copy(tmp, dec)
	if err != nil {
		return nil, fmt.Errorf("%w: zstd stream: %v", ErrCorrupt, err)
	}
	name := tmp.Name()
	return &osFile{File: tmp, size: n, reopen: func() (*os.File, error) { return os.Open(name) }}, nil
}

// chunkFromST locates a chunk inside a safetensors blob (DCP's SAFETENSORS
// serialization or HF storage writer shards).
func chunkFromST(h *STHeader, f File, base int64, fqn string, ch *Chunk) (*chunkData, error) {
	for _, t := range h.Tensors {
		if t.Name != fqn {
			continue
		}
		if offs, ok := stSavedOffsets(h, fqn); ok && !equalShape(offs, ch.Offsets) {
			return nil, fmt.Errorf("%w: safetensors blob holds offsets %s for %q", ErrCorrupt, fmtShape(offs), fqn)
		}
		return &chunkData{f: f, dtype: t.DType, shape: t.Shape, stride: rowMajorStrides(t.Shape),
			offset: base + h.DataOffset + t.Begin, storLen: numel(t.Shape)}, nil
	}
	return nil, fmt.Errorf("%w: safetensors blob has no tensor %q", ErrCorrupt, fqn)
}

func rowMajorStrides(shape []int64) []int64 {
	s := make([]int64, len(shape))
	n := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		s[d] = n
		n *= shape[d]
	}
	return s
}

// stSavedOffsets returns a tensor's saved_offsets from DCP_SHARDING_INFO.
func stSavedOffsets(h *STHeader, fqn string) ([]int64, bool) {
	s, ok := h.Metadata["DCP_SHARDING_INFO"]
	if !ok {
		return nil, false
	}
	var info map[string]struct {
		SavedOffsets []int64 `json:"saved_offsets"`
	}
	if json.Unmarshal([]byte(s), &info) != nil {
		return nil, false
	}
	e, ok := info[fqn]
	if !ok || e.SavedOffsets == nil {
		return nil, false
	}
	return e.SavedOffsets, true
}

// openSTShards opens a directory of safetensors files (no .metadata).
func (c *Checkpoint) openSTShards(ctx context.Context) error {
	names, err := c.src.List(ctx)
	if err != nil {
		return err
	}
	var files []string
	for _, n := range names {
		if strings.HasSuffix(n, ".safetensors") {
			files = append(files, n)
		}
	}
	if len(files) == 0 {
		return fmt.Errorf("%s: %w: no .metadata and no .safetensors files", c.src, ErrNotCheckpoint)
	}
	sort.Strings(files)
	md := &Metadata{Class: "safetensors"}
	byKey := map[string]*Item{}
	headers := make([]*STHeader, len(files))
	sharded := false
	for i, name := range files {
		f, err := c.file(ctx, name)
		if err != nil {
			return err
		}
		if headers[i], err = ParseSafetensorsHeader(f, f.Size(), c.src.String()+"/"+name); err != nil {
			return err
		}
		if _, ok := headers[i].Metadata["DCP_SHARDING_INFO"]; ok {
			sharded = true
		}
	}
	for i, name := range files {
		h := headers[i]
		f := c.files[name]
		where := c.src.String() + "/" + name
		if _, ok := h.Metadata["DCP_SHARDING_INFO"]; sharded && !ok {
			continue // not part of the DCP output (e.g. a stray consolidated file)
		}
		for _, t := range h.Tensors {
			offs, ok := stSavedOffsets(h, t.Name)
			if !ok {
				offs = make([]int64, len(t.Shape))
			}
			if len(offs) != len(t.Shape) {
				return fmt.Errorf("%s: %w: tensor %q: saved_offsets %s do not match shape %s", where, ErrCorrupt, t.Name, fmtShape(offs), fmtShape(t.Shape))
			}
			it := byKey[t.Name]
			if it == nil {
				it = &Item{Key: t.Name, DType: t.DType, Shape: make([]int64, len(t.Shape))}
				byKey[t.Name] = it
				md.Items = append(md.Items, it)
			}
			if it.DType != t.DType || len(it.Shape) != len(t.Shape) {
				return fmt.Errorf("%s: %w: tensor %q: %s%s here, %s%s in another file", where, ErrCorrupt, t.Name, t.DType, fmtShape(t.Shape), it.DType, fmtShape(it.Shape))
			}
			for d := range offs {
				if offs[d] < 0 {
					return fmt.Errorf("%s: %w: tensor %q: negative saved_offsets", where, ErrCorrupt, t.Name)
				}
				it.Shape[d] = max(it.Shape[d], offs[d]+t.Shape[d])
			}
			ch := Chunk{Offsets: offs, Sizes: t.Shape, Loc: Location{File: name, Offset: h.DataOffset + t.Begin, Length: t.End - t.Begin}}
			ch.data = &chunkData{f: f, file: name, dtype: t.DType, shape: t.Shape, stride: rowMajorStrides(t.Shape),
				offset: h.DataOffset + t.Begin, storLen: numel(t.Shape), rowMaj: true}
			it.Chunks = append(it.Chunks, ch)
		}
	}
	for _, it := range md.Items {
		if err := checkShape(it.Shape, it.DType); err != nil {
			return fmt.Errorf("%s: %w: tensor %q: %v", c.src, ErrCorrupt, it.Key, err)
		}
	}
	c.Meta = md
	return nil
}

// checkCoverage checks that the non-empty chunks of a tensor lie inside it,
// do not overlap and together cover every element.
func checkCoverage(it *Item) error {
	type box struct {
		ci         int
		off, end   []int64
		lo, hi     int64 // dim-0 extent (0,1 for 0-dim)
		vol        int64
		descriptor string
	}
	var boxes []box
	var total int64
	for ci, ch := range it.Chunks {
		desc := func() string {
			return fmt.Sprintf("tensor %q %s chunk %d %s (file %s)", it.Key, fmtShape(it.Shape), ci, fmtBox(ch.Offsets, ch.Sizes), ch.Loc.File)
		}
		for d := range ch.Sizes {
			if ch.Sizes[d] < 0 || ch.Offsets[d] < 0 || ch.Offsets[d] > it.Shape[d] || ch.Sizes[d] > it.Shape[d]-ch.Offsets[d] {
				return fmt.Errorf("%w: %s lies outside the tensor", ErrCorrupt, desc())
			}
		}
		v := numel(ch.Sizes)
		if v == 0 {
			continue
		}
		end := make([]int64, len(ch.Sizes))
		for d := range end {
			end[d] = ch.Offsets[d] + ch.Sizes[d]
		}
		b := box{ci: ci, off: ch.Offsets, end: end, lo: 0, hi: 1, vol: v, descriptor: desc()}
		if len(end) > 0 {
			b.lo, b.hi = ch.Offsets[0], end[0]
		}
		boxes = append(boxes, b)
		total += v
	}
	sort.SliceStable(boxes, func(i, j int) bool { return boxes[i].lo < boxes[j].lo })
	var active []box
	for _, b := range boxes {
		keep := active[:0]
		for _, a := range active {
			if a.hi > b.lo {
				keep = append(keep, a)
			}
		}
		active = keep
		for _, a := range active {
			overlap := true
			for d := range b.off {
				if a.end[d] <= b.off[d] || b.end[d] <= a.off[d] {
					overlap = false
					break
				}
			}
			if overlap {
				return fmt.Errorf("%w: %s overlaps chunk %d %s", ErrCorrupt, b.descriptor, a.ci, fmtBox(a.off, sub(a.end, a.off)))
			}
		}
		active = append(active, b)
	}
	if want := numel(it.Shape); total != want {
		return fmt.Errorf("%w: tensor %q %s: chunks cover %d of %d elements (gap in coverage; %d chunks: %s)", ErrCorrupt, it.Key, fmtShape(it.Shape), total, want, len(it.Chunks), chunkList(it))
	}
	return nil
}

func sub(a, b []int64) []int64 {
	out := make([]int64, len(a))
	for i := range a {
		out[i] = a[i] - b[i]
	}
	return out
}

func chunkList(it *Item) string {
	var b strings.Builder
	for i, ch := range it.Chunks {
		if i == 8 {
			fmt.Fprintf(&b, " ... (%d more)", len(it.Chunks)-8)
			break
		}
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(fmtBox(ch.Offsets, ch.Sizes))
		b.WriteString("@" + ch.Loc.File)
	}
	return b.String()
}

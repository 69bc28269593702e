package ckpt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Defaults of MergeOptions.
const (
	// earlyFlush: a local output file is fsynced in the background every
	// this many bytes, so that writeback overlaps the copy.
	earlyFlush        = 256 << 20
	DefaultBufferSize = 4 << 20
	// MaxGatherSize bounds the in-memory copy made of a chunk stored with
	// non-row-major strides (a transposed tensor saved as is).
	MaxGatherSize = 256 << 20
)

// ConfigFiles are copied by MergeOptions.ConfigFrom when present.
var ConfigFiles = []string{
	"config.json", "generation_config.json",
	"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
	"tokenizer.model", "vocab.json", "merges.txt", "added_tokens.json",
	"chat_template.jinja", "chat_template.json",
}

// MergeOptions controls Merge.
type MergeOptions struct {
	// Parallelism is the number of copy workers (default GOMAXPROCS,
	// at least 4 so that writes overlap copies, at most 8).
	Parallelism int
	// BufferSize is the size of one copy buffer (default 4 MiB); with
	// direct I/O, the size of one written span (rounded up to 4 KiB).
	// Memory used is at most about 3 x Parallelism x BufferSize.
	BufferSize int
	// Force replaces an existing model in the output directory (old
	// model*.safetensors and the index are removed; the old index first).
	Force bool
	// Verify re-reads every output file, checks its header against the
	// plan and compares every tensor with the source bytes; the result
	// carries per-tensor SHA-256 checksums.
	Verify bool
	// ConfigFrom, when set, is a directory whose ConfigFiles are copied
	// into the output (before the index is written).
	ConfigFrom Source
	// NoDirectIO disables direct I/O for local outputs (O_DIRECT writes
	// of aligned spans, used where the file system supports it).
	NoDirectIO bool
	// NoKernelCopy disables the in-kernel copy_file_range of contiguous
	// chunk ranges into a local output written without direct I/O. Only
	// Linux has the in-kernel copy; elsewhere it is always disabled.
	NoKernelCopy bool
	// WriteMode chooses between positioned writes from several workers
	// and one in-order writer for local outputs (default WriteAuto:
	// in order on FUSE mounts, positioned elsewhere).
	WriteMode WriteMode
	// OnProgress, when set, is called with the number of bytes just
	// written; it must be safe for concurrent use.
	OnProgress func(n int64)
}

// WriteMode says how a local output file is written.
type WriteMode int

const (
	// WriteAuto writes in order (as WriteSequential) where the output
	// directory is on a FUSE mount, and with positioned writes (as
	// WriteParallel) elsewhere.
	WriteAuto WriteMode = iota
	// WriteSequential writes each file front to back through one writer:
	// the copy workers still read and cast in parallel, and one goroutine
	// writes their buffers in file order, so memory stays bounded as on
	// the other paths. It is the path for volumes that refuse writes
	// other than at the end of the file (FUSE mounts of object stores,
	// such as Databricks /Volumes, gcsfuse, mountpoint-s3).
	WriteSequential
	// WriteParallel uses positioned writes from several workers (direct
	// I/O, copy_file_range or buffered) even on a FUSE mount.
	WriteParallel
)

var writeModeNames = [...]string{WriteAuto: "auto", WriteSequential: "sequential", WriteParallel: "parallel"}

func (m WriteMode) String() string {
	if m >= 0 && int(m) < len(writeModeNames) {
		return writeModeNames[m]
	}
	return fmt.Sprintf("WriteMode(%d)", int(m))
}

// ParseWriteMode parses "auto", "sequential" or "parallel"; other strings
// are an error wrapping ErrConfig.
func ParseWriteMode(s string) (WriteMode, error) {
	for m, n := range writeModeNames {
		if s == n {
			return WriteMode(m), nil
		}
	}
	return 0, fmt.Errorf("%w: write mode %q, want auto, sequential or parallel", ErrConfig, s)
}

// kernelCopy reports whether local outputs written without direct I/O
// take in-kernel copies (IOKernel).
func (o *MergeOptions) kernelCopy() bool { return kernelCopySupported && !o.NoKernelCopy }

// FileResult describes one written file.
type FileResult struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Tensors int    `json:"tensors"`
	// IO is the write path taken: IODirect, IOFallback, IOKernel,
	// IOBuffered, IOSequential or IOStreamed.
	IO string `json:"io"`
}

// TensorResult describes one written tensor.
type TensorResult struct {
	Name   string  `json:"name"`
	Source string  `json:"source"`
	DType  DType   `json:"dtype"`
	Shape  []int64 `json:"shape"`
	File   string  `json:"file"`
	SHA256 string  `json:"sha256,omitempty"`
}

// Result summarises a merge.
type Result struct {
	Output      string         `json:"output"`
	Files       []FileResult   `json:"files"`
	Index       string         `json:"index,omitempty"`
	Copied      []string       `json:"copied,omitempty"`
	Tensors     []TensorResult `json:"tensors"`
	TensorBytes int64          `json:"tensor_bytes"`
	Skipped     []Skipped      `json:"skipped,omitempty"`
	Verified    bool           `json:"verified"`
	Seconds     float64        `json:"seconds"`
}

var modelFileRE = regexp.MustCompile(`^model(-[0-9]{5}-of-[0-9]{5})?\.safetensors$`)

// Merge writes the planned output into sink: for each file the header,
// then every tensor's bytes copied from the chunks (in parallel, with
// bounded buffers, honouring storage offsets and strides, casting when
// asked), then Commit; config files; then, for a sharded output, the index,
// last. On any error (or cancellation) the file being written is aborted
// and no index is written.
func Merge(ctx context.Context, ck *Checkpoint, p *Plan, sink Sink, o MergeOptions) (*Result, error) {
	start := time.Now()
	if o.Parallelism <= 0 {
		o.Parallelism = min(max(runtime.GOMAXPROCS(0), 4), 8)
	}
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.BufferSize < 64 {
		o.BufferSize = 64
	}
	existing, err := sink.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sink, err)
	}
	var cfgNames map[string]bool
	if o.ConfigFrom != nil {
		names, err := o.ConfigFrom.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.ConfigFrom, err)
		}
		cfgNames = map[string]bool{}
		for _, n := range names {
			cfgNames[n] = true
		}
	}
	var old []string
	for _, n := range existing {
		if n == IndexName || modelFileRE.MatchString(n) || (cfgNames[n] && slicesContains(ConfigFiles, n)) {
			old = append(old, n)
		}
	}
	if len(old) > 0 && !o.Force {
		return nil, fmt.Errorf("%s: %w: %v (use --force to replace)", sink, ErrExists, old)
	}
	if o.Force {
		for _, n := range existing { // the old index goes first; stale temporaries of killed runs go too
			if n == IndexName || (strings.HasPrefix(n, ".") && strings.Contains(n, tmpMarker)) {
				if err := sink.Remove(ctx, n); err != nil {
					return nil, fmt.Errorf("%s/%s: %w", sink, n, err)
				}
			}
		}
	}
	res := &Result{Output: sink.String(), Skipped: p.Skipped, TensorBytes: p.TotalSize}
	var committed []string
	ok := false
	defer func() {
		if !ok { // leave no part of a failed merge under final names
			for _, n := range committed {
				sink.Remove(context.WithoutCancel(ctx), n)
			}
		}
	}()
	for _, f := range p.Files {
		path, err := writeFile(ctx, f, sink, &o)
		if err != nil {
			return nil, err
		}
		committed = append(committed, f.Name)
		res.Files = append(res.Files, FileResult{Name: f.Name, Size: f.Size, Tensors: len(f.Tensors), IO: path})
	}
	if o.Force { // stale shards of an earlier, differently split output
		keep := map[string]bool{}
		for _, f := range p.Files {
			keep[f.Name] = true
		}
		for _, n := range old {
			if n != IndexName && !keep[n] && modelFileRE.MatchString(n) {
				if err := sink.Remove(ctx, n); err != nil {
					return nil, fmt.Errorf("%s/%s: %w", sink, n, err)
				}
			}
		}
	}
	if o.ConfigFrom != nil {
		copied, err := copyConfig(ctx, o.ConfigFrom, sink, o.Force)
		if err != nil {
			return nil, err
		}
		res.Copied = copied
	}
	var sums map[string]string
	if o.Verify {
		if sums, err = Verify(ctx, ck, p, sink.Reader(), o.Parallelism, o.BufferSize); err != nil {
			return nil, err
		}
		res.Verified = true
	}
	if p.Sharded() {
		if err := writeSmall(ctx, sink, IndexName, p.IndexJSON(), true); err != nil {
			return nil, err
		}
		res.Index = IndexName
	}
	for _, t := range p.Tensors {
		res.Tensors = append(res.Tensors, TensorResult{Name: t.Name, Source: t.Item.Key, DType: t.DType,
			Shape: t.Shape, File: p.Files[t.File].Name, SHA256: sums[t.Name]})
	}
	res.Seconds = time.Since(start).Seconds()
	ok = true
	return res, nil
}

func slicesContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func writeSmall(ctx context.Context, sink Sink, name string, data []byte, overwrite bool) error {
	w, err := sink.Create(ctx, name, int64(len(data)), overwrite)
	if err != nil {
		return fmt.Errorf("%s/%s: %w", sink, name, err)
	}
	if _, err := w.Write(data); err != nil {
		w.Abort()
		return fmt.Errorf("%s/%s: %w", sink, name, err)
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("%s/%s: %w", sink, name, err)
	}
	return nil
}

func copyConfig(ctx context.Context, from Source, sink Sink, overwrite bool) ([]string, error) {
	names, err := from.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	var copied []string
	for _, n := range ConfigFiles {
		if !have[n] {
			continue
		}
		data, err := readAll(ctx, from, n, 1<<30)
		if err != nil {
			return nil, err
		}
		if err := writeSmall(ctx, sink, n, data, overwrite); err != nil {
			return nil, err
		}
		copied = append(copied, n)
	}
	return copied, nil
}

// box is one unit of copy work: a row-major contiguous region of an output
// tensor. Dimensions before k are fixed at prefix, dimension k spans
// [a, b), dimensions after k are complete.
type box struct {
	t      *OutTensor
	shape  []int64 // the tensor's shape ([1] for a 0-dim tensor)
	k      int
	prefix []int64
	a, b   int64
	inner  int64 // elements per index of dimension k
	off    int64 // absolute byte offset in the output file
	n      int64 // elements
}

// boxes calls fn for the copy units of t in output order.
func forBoxes(t *OutTensor, maxElems int64, fn func(box) error) error {
	shape := t.Shape
	if len(shape) == 0 {
		shape = []int64{1}
	}
	total := numel(shape)
	if total == 0 {
		return nil
	}
	k := 0
	for k < len(shape)-1 && numel(shape[k+1:]) > maxElems {
		k++
	}
	inner := numel(shape[k+1:])
	step := max(1, maxElems/inner)
	isz := int64(t.DType.Size())
	prefix := make([]int64, k)
	off := t.Offset
	for {
		for a := int64(0); a < shape[k]; a += step {
			b := min(a+step, shape[k])
			bx := box{t: t, shape: shape, k: k, prefix: append([]int64(nil), prefix...), a: a, b: b, inner: inner, off: off, n: (b - a) * inner}
			if err := fn(bx); err != nil {
				return err
			}
			off += bx.n * isz
		}
		// next prefix
		d := k - 1
		for ; d >= 0; d-- {
			prefix[d]++
			if prefix[d] < shape[d] {
				break
			}
			prefix[d] = 0
		}
		if d < 0 {
			return nil
		}
	}
}

// chunkGeom returns a chunk's offsets and sizes with 0-dim tensors seen as [1].
func chunkGeom(ch *Chunk) (off, size []int64) {
	if len(ch.Sizes) == 0 {
		return []int64{0}, []int64{1}
	}
	return ch.Offsets, ch.Sizes
}

// intersect returns the rows [lo, hi) along dimension bx.k that a chunk at
// off with sizes sz shares with bx, and the chunk-local row-major element
// index where that region starts (it is contiguous in the chunk); ok is
// false when they share nothing.
func intersect(bx box, off, sz []int64) (lo, hi, start int64, ok bool) {
	k := bx.k
	for d := 0; d < k; d++ {
		if bx.prefix[d] < off[d] || bx.prefix[d] >= off[d]+sz[d] {
			return 0, 0, 0, false
		}
	}
	lo, hi = max(bx.a, off[k]), min(bx.b, off[k]+sz[k])
	if lo >= hi {
		return 0, 0, 0, false
	}
	stride := int64(1)
	for d := len(sz) - 1; d >= 0; d-- {
		var idx int64
		switch {
		case d < k:
			idx = bx.prefix[d] - off[d]
		case d == k:
			idx = lo - off[k]
		}
		start += idx * stride
		stride *= sz[d]
	}
	return lo, hi, start, true
}

// fillBox writes the source-dtype bytes of bx into dst (n x itemsize bytes),
// using scratch for chunks whose trailing dimensions are partial.
func fillBox(bx box, dst []byte, scratch *[]byte) error {
	it := bx.t.Item
	isz := int64(it.DType.Size())
	k := bx.k
	g := bx.shape
	for ci := range it.Chunks {
		ch := &it.Chunks[ci]
		if ch.data == nil {
			continue // empty chunk
		}
		off, sz := chunkGeom(ch)
		lo, hi, start, ok := intersect(bx, off, sz)
		if !ok {
			continue
		}
		innerChunk := numel(sz[k+1:])
		count := (hi - lo) * innerChunk
		full := true
		for d := k + 1; d < len(g); d++ {
			if sz[d] != g[d] {
				full = false
				break
			}
		}
		if full {
			dstOff := (lo - bx.a) * bx.inner * isz
			if err := readChunkRange(it, ci, start, count, dst[dstOff:dstOff+count*isz]); err != nil {
				return err
			}
			continue
		}
		if int64(cap(*scratch)) < count*isz {
			*scratch = make([]byte, count*isz)
		}
		src := (*scratch)[:count*isz]
		if err := readChunkRange(it, ci, start, count, src); err != nil {
			return err
		}
		// m: last dimension where the chunk is partial; runs of prod(sz[m:])
		m := len(g) - 1
		for sz[m] == g[m] {
			m--
		}
		run := numel(sz[m:])
		var gstrA, outerA, extA [maxDimsConst]int64
		gstr := gstrA[:len(g)]
		for d, n := len(g)-1, int64(1); d >= 0; d-- {
			gstr[d] = n
			n *= g[d]
		}
		// iterate outer indices over dims k..m-1 of the region
		outer := outerA[:m-k]
		ext := extA[:m-k]
		for d := k; d < m; d++ {
			if d == k {
				ext[0] = hi - lo
			} else {
				ext[d-k] = sz[d]
			}
		}
		var so int64
		for {
			// destination element offset within the box
			var do int64
			if m > k {
				do = (lo - bx.a + outer[0]) * bx.inner
				for d := k + 1; d < m; d++ {
					do += (off[d] + outer[d-k]) * gstr[d]
				}
				do += off[m] * gstr[m]
			} else { // m == k: dim k itself is the partial run (not reachable: full would hold)
				do = (lo - bx.a) * bx.inner
			}
			copy(dst[do*isz:(do+run)*isz], src[so*isz:(so+run)*isz])
			so += run
			d := len(outer) - 1
			for ; d >= 0; d-- {
				outer[d]++
				if outer[d] < ext[d] {
					break
				}
				outer[d] = 0
			}
			if d < 0 {
				break
			}
		}
	}
	return nil
}

// readChunkRange reads count elements starting at chunk-local row-major
// element start into dst.
func readChunkRange(it *Item, ci int, start, count int64, dst []byte) error {
	ch := &it.Chunks[ci]
	cd := ch.data
	isz := int64(cd.dtype.Size())
	if cd.rowMaj {
		pos := cd.start() + start*isz
		n, err := cd.f.ReadAt(dst, pos)
		if n == len(dst) {
			return nil
		}
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: tensor %q chunk %s: read %d bytes at %d: %w", ch.Loc.File, it.Key, fmtBox(ch.Offsets, ch.Sizes), len(dst), pos, err)
	}
	all, err := gatherChunk(it, ci)
	if err != nil {
		return err
	}
	copy(dst, all[start*isz:(start+count)*isz])
	return nil
}

// gatherChunk returns the row-major bytes of a chunk stored with other
// strides, reading its storage span into memory (at most MaxGatherSize).
func gatherChunk(it *Item, ci int) ([]byte, error) {
	ch := &it.Chunks[ci]
	cd := ch.data
	isz := int64(cd.dtype.Size())
	n := numel(cd.shape)
	span := int64(1)
	for d := range cd.shape {
		span += (cd.shape[d] - 1) * cd.stride[d]
	}
	if span*isz > MaxGatherSize || n*isz > MaxGatherSize {
		return nil, fmt.Errorf("%s: %w: tensor %q chunk %s has strides %s over %d bytes (limit %d for non-row-major chunks)",
			ch.Loc.File, ErrUnsupported, it.Key, fmtBox(ch.Offsets, ch.Sizes), fmtShape(cd.stride), span*isz, MaxGatherSize)
	}
	raw := make([]byte, span*isz)
	if _, err := cd.f.ReadAt(raw, cd.start()); err != nil {
		return nil, fmt.Errorf("%s: tensor %q chunk %s: %w", ch.Loc.File, it.Key, fmtBox(ch.Offsets, ch.Sizes), err)
	}
	out := make([]byte, n*isz)
	idx := make([]int64, len(cd.shape))
	for i := int64(0); i < n; i++ {
		var p int64
		for d := range idx {
			p += idx[d] * cd.stride[d]
		}
		copy(out[i*isz:(i+1)*isz], raw[p*isz:(p+1)*isz])
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < cd.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, nil
}

type copyJob struct {
	bx   box
	buf  []byte
	n    int64 // bytes produced
	done chan error
}

// kernelCopier copies byte ranges between local files inside the kernel
// (copy_file_range through os.File.ReadFrom), with descriptors of its own
// so that file offsets are not shared between workers.
type kernelCopier struct {
	dstPath string
	dst     *os.File
	srcs    map[*osFile]*os.File
	failed  bool
}

func (k *kernelCopier) close() {
	if k.dst != nil {
		k.dst.Close()
	}
	for _, f := range k.srcs {
		f.Close()
	}
}

// copy copies n bytes from src at srcOff to the output at dstOff; ok is
// false when this path cannot be used (the caller falls back to buffers).
func (k *kernelCopier) copy(src *osFile, srcOff int64, dstOff, n int64) (ok bool, err error) {
	if k.failed || src.reopen == nil {
		return false, nil
	}
	if k.dst == nil {
		if k.dst, err = os.OpenFile(k.dstPath, os.O_WRONLY, 0); err != nil {
			k.failed = true
			return false, nil
		}
	}
	sf := k.srcs[src]
	if sf == nil {
		if sf, err = src.reopen(); err != nil {
			k.failed = true
			return false, nil
		}
		if k.srcs == nil {
			k.srcs = map[*osFile]*os.File{}
		}
		k.srcs[src] = sf
	}
	if _, err := sf.Seek(srcOff, io.SeekStart); err != nil {
		return true, err
	}
	if _, err := k.dst.Seek(dstOff, io.SeekStart); err != nil {
		return true, err
	}
	m, err := k.dst.ReadFrom(io.LimitReader(sf, n))
	if err == nil && m != n {
		err = fmt.Errorf("copied %d of %d bytes: %w", m, n, io.ErrUnexpectedEOF)
	}
	return true, err
}

// tryKernelCopy copies a box with kernelCopier when every piece of it is a
// contiguous range of a local row-major chunk and no cast is needed.
func tryKernelCopy(bx box, kc *kernelCopier) (bool, error) {
	t := bx.t
	if kc == nil || t.DType != t.Item.DType {
		return false, nil
	}
	type piece struct {
		src          *osFile
		srcOff, dstO int64
		n            int64
	}
	var pieces []piece
	isz := int64(t.DType.Size())
	var covered int64
	err := forPieces(bx, func(ch *Chunk, start, count, dstElem int64, full bool) error {
		of, ok := ch.data.f.(*osFile)
		if !ok || !full || !ch.data.rowMaj {
			return errNoFastPath
		}
		pieces = append(pieces, piece{of, ch.data.start() + start*isz, bx.off + dstElem*isz, count * isz})
		covered += count
		return nil
	})
	if err == errNoFastPath || covered != bx.n {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	for _, p := range pieces {
		ok, err := kc.copy(p.src, p.srcOff, p.dstO, p.n)
		if !ok {
			// no descriptor for the fast path: redo the whole box with
			// buffers (rewriting pieces already copied is harmless)
			return false, nil
		}
		if err != nil {
			return true, err
		}
	}
	return true, nil
}

var errNoFastPath = errors.New("no fast path")

// forPieces calls fn for every chunk piece intersecting bx: the chunk, the
// chunk-local row-major start element and element count of the piece, the
// destination element offset within the box (meaningful when full), and
// whether the piece is contiguous in the box (full trailing dimensions).
func forPieces(bx box, fn func(ch *Chunk, start, count, dstElem int64, full bool) error) error {
	it := bx.t.Item
	k := bx.k
	g := bx.shape
	for ci := range it.Chunks {
		ch := &it.Chunks[ci]
		if ch.data == nil {
			continue
		}
		off, sz := chunkGeom(ch)
		lo, hi, start, ok := intersect(bx, off, sz)
		if !ok {
			continue
		}
		full := true
		for d := k + 1; d < len(g); d++ {
			if sz[d] != g[d] {
				full = false
				break
			}
		}
		if err := fn(ch, start, (hi-lo)*numel(sz[k+1:]), (lo-bx.a)*bx.inner, full); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes one planned file through sink, commits it, and returns
// the write path it took (IODirect, IOKernel, ...).
func writeFile(ctx context.Context, f *OutFile, sink Sink, o *MergeOptions) (path string, err error) {
	out, err := sink.Create(ctx, f.Name, f.Size, o.Force)
	if err != nil {
		return "", fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	defer func() {
		if err != nil {
			out.Abort()
		}
	}()
	lo, _ := out.(LocalOutput)
	sequential := lo != nil && (o.WriteMode == WriteSequential || o.WriteMode == WriteAuto && lo.OnFUSE())
	var dio *os.File
	if lo != nil && !sequential && !o.NoDirectIO {
		dio = openDirect(lo.TempPath())
	}
	switch {
	case sequential:
		// the local file seen only as an io.Writer: one writer, in order
		path, err = IOSequential, writeFileBuffered(ctx, f, struct{ OutputFile }{out}, sink, o)
	case dio != nil:
		path, err = writeFileDirect(ctx, f, lo, dio, fmt.Sprintf("%s/%s", sink, f.Name), o)
		dio.Close()
	case lo != nil && o.kernelCopy():
		path, err = IOKernel, writeFileBuffered(ctx, f, out, sink, o)
	case lo != nil:
		path, err = IOBuffered, writeFileBuffered(ctx, f, out, sink, o)
	default:
		path, err = IOStreamed, writeFileBuffered(ctx, f, out, sink, o)
	}
	if err != nil && lo != nil && lo.OnFUSE() && !sequential && ctx.Err() == nil {
		err = fmt.Errorf("%w (%s is on a FUSE mount, where volumes backed by object stores refuse writes that are not at the end of the file, and write mode %s asked for positioned writes: use write mode sequential, or auto, which picks it there)", err, sink, o.WriteMode)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", err
	}
	if err := out.Commit(); err != nil {
		return "", fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	return path, nil
}

// writeFileBuffered writes f into out from user buffers: positioned writes
// from the copy workers (with in-kernel copies where possible) into a
// local file, or an in-order stream into any other sink. The caller
// commits.
func writeFileBuffered(ctx context.Context, f *OutFile, out OutputFile, sink Sink, o *MergeOptions) error {
	wa, positioned := out.(io.WriterAt)
	if positioned {
		if _, err := wa.WriteAt(f.Header, 0); err != nil {
			return fmt.Errorf("%s/%s: %w", sink, f.Name, err)
		}
	} else if _, err := out.Write(f.Header); err != nil {
		return fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	if o.OnProgress != nil {
		o.OnProgress(int64(len(f.Header)))
	}
	workers := o.Parallelism
	window := 2 * workers
	// every job a worker can hold is in order (at most window) or held by
	// the writer (one): window+1 buffers never run out.
	pool := make(chan []byte, window+1)
	for i := 0; i < window+1; i++ {
		pool <- nil
	}
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan *copyJob)
	order := make(chan *copyJob, window)
	// dispatcher
	g.Go(func() error {
		defer close(jobs)
		defer close(order)
		for _, t := range f.Tensors {
			srcIsz := int64(t.Item.DType.Size())
			maxElems := int64(o.BufferSize) / max(srcIsz, int64(t.DType.Size()))
			err := forBoxes(t, max(maxElems, 1), func(bx box) error {
				j := &copyJob{bx: bx, done: make(chan error, 1)}
				select {
				case order <- j:
				case <-gctx.Done():
					return gctx.Err()
				}
				select {
				case jobs <- j:
				case <-gctx.Done():
					return gctx.Err()
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			var srcBuf, scratch []byte
			var kc *kernelCopier
			if lo, ok := out.(LocalOutput); ok && o.kernelCopy() {
				kc = &kernelCopier{dstPath: lo.TempPath()}
				defer kc.close()
			}
			for j := range jobs {
				j.done <- runJob(gctx, j, pool, &srcBuf, &scratch, wa, kc)
			}
			return nil
		})
	}
	// in-order writer (or error collector for positioned writes)
	lo, _ := out.(LocalOutput)
	flushing := make(chan struct{}, 1) // holds a token while a background fsync runs
	g.Go(func() error {
		var written int64 = int64(len(f.Header))
		var flushed int64
		for j := range order {
			var err error
			select {
			case err = <-j.done:
			case <-gctx.Done():
				return gctx.Err()
			}
			if err != nil {
				return fmt.Errorf("%s/%s: tensor %q: %w", sink, f.Name, j.bx.t.Name, err)
			}
			if !positioned {
				if _, err := out.Write(j.buf); err != nil {
					return fmt.Errorf("%s/%s: write at byte %d: %w", sink, f.Name, written, err)
				}
			}
			written += j.n
			if lo != nil && written-flushed >= earlyFlush {
				// start writeback early so the final fsync has less to do
				flushed = written
				select {
				case flushing <- struct{}{}:
					go func() { lo.File().Sync(); <-flushing }()
				default:
				}
			}
			if o.OnProgress != nil {
				o.OnProgress(j.n)
			}
			pool <- j.buf
		}
		if written != f.Size {
			return fmt.Errorf("%s/%s: wrote %d bytes, planned %d", sink, f.Name, written, f.Size)
		}
		return nil
	})
	err := g.Wait()
	flushing <- struct{}{} // wait for a background fsync before Commit or Abort
	return err
}

func runJob(ctx context.Context, j *copyJob, pool chan []byte, srcBuf, scratch *[]byte, wa io.WriterAt, kc *kernelCopier) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf []byte
	select {
	case buf = <-pool:
	case <-ctx.Done():
		return ctx.Err()
	}
	j.buf = buf // the pool token goes back through the writer
	j.n = j.bx.n * int64(j.bx.t.DType.Size())
	if done, err := tryKernelCopy(j.bx, kc); done {
		if err != nil {
			return fmt.Errorf("copy to byte %d: %w", j.bx.off, err)
		}
		return nil
	}
	bx := j.bx
	t := bx.t
	outLen := bx.n * int64(t.DType.Size())
	if int64(cap(buf)) < outLen {
		buf = make([]byte, outLen)
	}
	buf = buf[:outLen]
	j.buf = buf
	if t.DType == t.Item.DType {
		if err := fillBox(bx, buf, scratch); err != nil {
			return err
		}
	} else {
		inLen := bx.n * int64(t.Item.DType.Size())
		if int64(cap(*srcBuf)) < inLen {
			*srcBuf = make([]byte, inLen)
		}
		src := (*srcBuf)[:inLen]
		if err := fillBox(bx, src, scratch); err != nil {
			return err
		}
		castInto(buf, t.DType, src, t.Item.DType, int(bx.n))
	}
	if wa != nil {
		if _, err := wa.WriteAt(buf, bx.off); err != nil {
			return fmt.Errorf("write at byte %d: %w", bx.off, err)
		}
	}
	return nil
}

// Verify re-reads the written files through out, checks each header is the
// planned one, and compares every tensor's bytes with the source (read and
// cast again). It returns the SHA-256 of every tensor's output bytes.
func Verify(ctx context.Context, ck *Checkpoint, p *Plan, out Source, parallelism, bufSize int) (map[string]string, error) {
	if parallelism <= 0 {
		parallelism = 4
	}
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	files := make([]File, len(p.Files))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, pf := range p.Files {
		f, err := out.Open(ctx, pf.Name)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		files[i] = f
		name := out.String() + "/" + pf.Name
		if f.Size() != pf.Size {
			return nil, fmt.Errorf("verify: %s: %w: %d bytes, planned %d", name, ErrVerify, f.Size(), pf.Size)
		}
		h, err := ParseSafetensorsHeader(f, f.Size(), name)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if h.DataOffset != int64(len(pf.Header)) || len(h.Tensors) != len(pf.Tensors) {
			return nil, fmt.Errorf("verify: %s: %w: header differs from the plan", name, ErrVerify)
		}
		for k, t := range pf.Tensors {
			ht := h.Tensors[k]
			if ht.Name != t.Name || ht.DType != t.DType || !equalShape(ht.Shape, t.Shape) || h.DataOffset+ht.Begin != t.Offset {
				return nil, fmt.Errorf("verify: %s: %w: tensor %q in header is %q %s%s at %d", name, ErrVerify, t.Name, ht.Name, ht.DType, fmtShape(ht.Shape), ht.Begin)
			}
		}
	}
	sums := make(map[string]string, len(p.Tensors))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	ts := append([]*OutTensor(nil), p.Tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Size > ts[j].Size })
	for _, t := range ts {
		g.Go(func() error {
			h := sha256.New()
			var src, cast, got, scratch []byte
			f := files[t.File]
			srcIsz := int64(t.Item.DType.Size())
			maxElems := int64(bufSize) / max(srcIsz, int64(t.DType.Size()))
			err := forBoxes(t, max(maxElems, 1), func(bx box) error {
				if err := gctx.Err(); err != nil {
					return err
				}
				in := grow(&src, bx.n*srcIsz)
				if err := fillBox(bx, in, &scratch); err != nil {
					return err
				}
				want := in
				if t.DType != t.Item.DType {
					want = grow(&cast, bx.n*int64(t.DType.Size()))
					castInto(want, t.DType, in, t.Item.DType, int(bx.n))
				}
				have := grow(&got, int64(len(want)))
				if _, err := f.ReadAt(have, bx.off); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				if string(have) != string(want) {
					return fmt.Errorf("verify: %s/%s: %w: tensor %q differs from the source in bytes [%d, %d)", out, p.Files[t.File].Name, ErrVerify, t.Name, bx.off, bx.off+int64(len(want)))
				}
				h.Write(have)
				return nil
			})
			if err != nil {
				return err
			}
			mu.Lock()
			sums[t.Name] = hex.EncodeToString(h.Sum(nil))
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return sums, nil
}

func grow(b *[]byte, n int64) []byte {
	if int64(cap(*b)) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}

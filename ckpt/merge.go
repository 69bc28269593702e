package ckpt

import (
	"context"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"time"
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

package shard

import (
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Writer writes one shard file: rows are buffered into record batches of
// batch_rows rows and written as Arrow IPC file format to an io.Writer.
// Close writes the footer; it does not close the underlying writer.
// A Writer is not safe for concurrent use. The first error is sticky.
type Writer struct {
	meta      FileMeta
	batchRows int
	schema    *arrow.Schema
	fw        *ipc.FileWriter
	err       error
	closed    bool
	rows      int

	// current batch
	n          int
	ids, labs  []int32
	pos        []int32
	length     []int32
	segOffsets []int32
	segSample  []int64
	segStart   []int32
	segLength  []int32
	segSource  []int32 // version 2 (meta.Sources) only
}

// WriterOption configures a Writer.
type WriterOption func(*Writer) error

// WithBatchRows sets the rows per record batch (default DefaultBatchRows).
func WithBatchRows(n int) WriterOption {
	return func(w *Writer) error {
		if n < 1 || n > MaxBatchRows {
			return fmt.Errorf("%w: batch_rows %d, want 1..%d", ErrConfig, n, MaxBatchRows)
		}
		w.batchRows = n
		return nil
	}
}

// NewWriter returns a Writer of one shard described by meta.
func NewWriter(dst io.Writer, meta FileMeta, opts ...WriterOption) (*Writer, error) {
	if err := meta.validate(); err != nil {
		return nil, err
	}
	w := &Writer{meta: meta, batchRows: DefaultBatchRows}
	for _, o := range opts {
		if err := o(w); err != nil {
			return nil, err
		}
	}
	w.schema = Schema(meta)
	fw, err := ipc.NewFileWriter(dst, ipc.WithSchema(w.schema), ipc.WithAllocator(memory.DefaultAllocator))
	if err != nil {
		return nil, fmt.Errorf("shard: rank %d: %w", meta.Rank, err)
	}
	w.fw = fw
	L := meta.SeqLen
	w.ids = make([]int32, 0, w.batchRows*L)
	w.labs = make([]int32, 0, w.batchRows*L)
	if meta.Mode == ModePack {
		w.pos = make([]int32, 0, w.batchRows*L)
	}
	w.length = make([]int32, 0, w.batchRows)
	w.segOffsets = append(make([]int32, 0, w.batchRows+1), 0)
	return w, nil
}

// Rows returns the rows added so far.
func (w *Writer) Rows() int { return w.rows }

// Add appends one row; its slices are copied.
func (w *Writer) Add(r *Row) error {
	if w.closed {
		return ErrClosed
	}
	if w.err != nil {
		return w.err
	}
	L := w.meta.SeqLen
	if err := checkRow(r, L, w.meta.Mode, w.meta.Sources); err != nil {
		w.err = fmt.Errorf("shard: rank %d row %d: %w", w.meta.Rank, w.rows, err)
		return w.err
	}
	w.ids = append(w.ids, r.InputIDs...)
	w.labs = append(w.labs, r.Labels...)
	if w.meta.Mode == ModePack {
		w.pos = append(w.pos, r.PositionIDs...)
	}
	w.length = append(w.length, r.Length)
	for _, s := range r.Segments {
		w.segSample = append(w.segSample, s.Sample)
		w.segStart = append(w.segStart, s.Start)
		w.segLength = append(w.segLength, s.Length)
		if w.meta.Sources {
			w.segSource = append(w.segSource, s.Source)
		}
	}
	w.segOffsets = append(w.segOffsets, int32(len(w.segSample)))
	w.n++
	w.rows++
	if w.n == w.batchRows {
		if err := w.flush(); err != nil {
			w.err = err
			return err
		}
	}
	return nil
}

func checkRow(r *Row, L int, mode Mode, sources bool) error {
	if len(r.InputIDs) != L || len(r.Labels) != L {
		return fmt.Errorf("%w: input_ids/labels length %d/%d, want %d", ErrConfig, len(r.InputIDs), len(r.Labels), L)
	}
	if mode == ModePack && len(r.PositionIDs) != L {
		return fmt.Errorf("%w: position_ids length %d, want %d", ErrConfig, len(r.PositionIDs), L)
	}
	if mode == ModePad && r.PositionIDs != nil {
		return fmt.Errorf("%w: position_ids in pad mode", ErrConfig)
	}
	if r.Length < 0 || int(r.Length) > L {
		return fmt.Errorf("%w: length %d, want 0..%d", ErrConfig, r.Length, L)
	}
	if err := checkSegments(r.Segments, r.Length, mode); err != nil {
		return err
	}
	return checkSources(r.Segments, sources)
}

// checkSources checks the segments' sources: >= 0, and 0 in a file
// without sources (format version 1).
func checkSources(segs []Segment, sources bool) error {
	for i, s := range segs {
		if s.Source < 0 {
			return fmt.Errorf("%w: segment %d has source %d, want >= 0", ErrConfig, i, s.Source)
		}
		if !sources && s.Source != 0 {
			return fmt.Errorf("%w: segment %d has source %d in a file without sources (format version 1)", ErrConfig, i, s.Source)
		}
	}
	return nil
}

// checkSegments enforces the segment contract: contiguous from 0, in order,
// covering exactly length tokens; exactly one in pad mode.
func checkSegments(segs []Segment, length int32, mode Mode) error {
	if mode == ModePad && len(segs) != 1 {
		return fmt.Errorf("%w: pad mode row has %d segments, want 1", ErrConfig, len(segs))
	}
	if len(segs) == 0 {
		return fmt.Errorf("%w: row has no segments", ErrConfig)
	}
	at := int32(0)
	for i, s := range segs {
		if s.Start != at || s.Length < 1 || s.Sample < 0 {
			return fmt.Errorf("%w: segment %d {sample %d start %d length %d}, want start %d and length >= 1", ErrConfig, i, s.Sample, s.Start, s.Length, at)
		}
		at += s.Length
		if at > length || at < 0 {
			return fmt.Errorf("%w: segments end at %d, beyond length %d", ErrConfig, at, length)
		}
	}
	if at != length {
		return fmt.Errorf("%w: segments cover %d tokens, length is %d", ErrConfig, at, length)
	}
	return nil
}

func int32Data(v []int32) arrow.ArrayData {
	return array.NewData(arrow.PrimitiveTypes.Int32, len(v),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(v))}, nil, 0, 0)
}

func int64Data(v []int64) arrow.ArrayData {
	return array.NewData(arrow.PrimitiveTypes.Int64, len(v),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(v))}, nil, 0, 0)
}

func tokenColumn(v []int32, rows, L int) arrow.Array {
	child := int32Data(v)
	defer child.Release()
	d := array.NewData(tokenListType(L), rows, []*memory.Buffer{nil}, []arrow.ArrayData{child}, 0, 0)
	defer d.Release()
	return array.MakeFromData(d)
}

func (w *Writer) flush() error {
	if w.n == 0 {
		return nil
	}
	L := w.meta.SeqLen
	cols := []arrow.Array{tokenColumn(w.ids, w.n, L), tokenColumn(w.labs, w.n, L)}
	if w.meta.Mode == ModePack {
		cols = append(cols, tokenColumn(w.pos, w.n, L))
	}
	lenData := int32Data(w.length)
	cols = append(cols, array.MakeFromData(lenData))
	lenData.Release()

	kids := []arrow.ArrayData{int64Data(w.segSample), int32Data(w.segStart), int32Data(w.segLength)}
	if w.meta.Sources {
		kids = append(kids, int32Data(w.segSource))
	}
	segType := segmentType(w.meta)
	st := array.NewData(segType, len(w.segSample), []*memory.Buffer{nil}, kids, 0, 0)
	for _, k := range kids {
		k.Release()
	}
	lt := arrow.ListOfNonNullable(segType)
	ld := array.NewData(lt, w.n, []*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int32Traits.CastToBytes(w.segOffsets))}, []arrow.ArrayData{st}, 0, 0)
	st.Release()
	cols = append(cols, array.MakeFromData(ld))
	ld.Release()

	rec := array.NewRecordBatch(w.schema, cols, int64(w.n))
	for _, c := range cols {
		c.Release()
	}
	err := w.fw.Write(rec)
	rec.Release()
	if err != nil {
		return fmt.Errorf("shard: rank %d: write batch: %w", w.meta.Rank, err)
	}
	w.n = 0
	w.ids = w.ids[:0]
	w.labs = w.labs[:0]
	w.pos = w.pos[:0]
	w.length = w.length[:0]
	w.segOffsets = append(w.segOffsets[:0], 0)
	w.segSample = w.segSample[:0]
	w.segStart = w.segStart[:0]
	w.segLength = w.segLength[:0]
	w.segSource = w.segSource[:0]
	return nil
}

// Close writes the last batch and the file footer. It does not close the
// destination writer.
func (w *Writer) Close() error {
	if w.closed {
		return w.err
	}
	w.closed = true
	if w.err != nil {
		_ = w.fw.Close()
		return w.err
	}
	if err := w.flush(); err != nil {
		w.err = err
		_ = w.fw.Close()
		return err
	}
	if err := w.fw.Close(); err != nil {
		w.err = fmt.Errorf("shard: rank %d: close: %w", w.meta.Rank, err)
	}
	return w.err
}

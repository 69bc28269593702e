package shard

import (
	"fmt"
	"os"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/ferryml/ferry/internal/corrupt"
	"github.com/ferryml/ferry/internal/invariants"
	"github.com/ferryml/ferry/internal/mmap"
)

// Limits a Reader enforces on untrusted files.
const (
	// MaxMetadataBytes bounds one IPC message's flatbuffer metadata.
	MaxMetadataBytes = 1 << 20
)

// Batch is one record batch of a shard, viewed in place: every slice
// aliases the mapped file and is valid until the Reader is closed.
type Batch struct {
	RowStart int // index of the batch's first row in the shard
	Rows     int

	InputIDs    []int32 // Rows × seq_len, row-major
	Labels      []int32 // Rows × seq_len
	PositionIDs []int32 // Rows × seq_len; nil in pad mode
	Length      []int32 // Rows
	SegOffsets  []int32 // Rows+1; row i's segments are [SegOffsets[i], SegOffsets[i+1])
	SegSample   []int64
	SegStart    []int32
	SegLength   []int32
	SegSource   []int32 // format version 2 (FileMeta.Sources); nil in version 1

	buffers map[string]BufferRef // absolute offsets, when the reader holds the whole file
}

// BufferRef locates one values buffer in a shard file.
type BufferRef struct {
	Offset int64 `json:"offset"`
	Length int64 `json:"length"`
}

// Reader reads one shard file mapped into memory, without copying.
// It validates the whole file structure when opened. Its methods may be
// called by several goroutines at once, except Close, which must come after
// every other call has returned: slices it returns alias the mapped file
// and are valid until Close. Close releases the mapping once however often
// it is called; Row after Close gives ErrClosed, and with the self-checks
// on (internal/invariants: -race or -tags invariants) Batch and Bytes after
// Close panic.
type Reader struct {
	name    string
	data    []byte
	unmap   func() error
	meta    FileMeta
	batches []Batch
	rows    int
	closed  invariants.CloseOnce
}

// Open maps the shard file at path and validates it. Manifest.OpenFile
// also checks the file against the manifest.
func Open(path string) (*Reader, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	r, err := newReader(path, data)
	if err != nil {
		_ = unmap()
		return nil, err
	}
	r.unmap = unmap
	return r, nil
}

// mapFile maps the whole file at path read-only.
func mapFile(path string) ([]byte, func() error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return mmap.Map(f)
}

// NewMappedReader reads a shard held whole in data (mapped or in memory);
// returned slices alias data. name is used in error messages.
func NewMappedReader(name string, data []byte) (*Reader, error) {
	return newReader(name, data)
}

// Meta returns what the shard states about itself.
func (r *Reader) Meta() FileMeta { return r.meta }

// SeqLen returns the row length.
func (r *Reader) SeqLen() int { return r.meta.SeqLen }

// NumRows returns the number of rows in the shard.
func (r *Reader) NumRows() int { return r.rows }

// NumBatches returns the number of record batches.
func (r *Reader) NumBatches() int { return len(r.batches) }

// Size returns the file size in bytes.
func (r *Reader) Size() int64 { return int64(len(r.data)) }

// Bytes returns the whole file; valid until Close.
func (r *Reader) Bytes() []byte {
	r.closed.Use("shard.Reader.Bytes")
	return r.data
}

// Batch returns batch i (0 ≤ i < NumBatches).
func (r *Reader) Batch(i int) *Batch {
	r.closed.Use("shard.Reader.Batch")
	return &r.batches[i]
}

// Row returns row i (0 ≤ i < NumRows) as views into the mapped file.
// dst.Segments is reused; the token slices alias the file.
func (r *Reader) Row(i int, dst *Row) error {
	if r.closed.Closed() {
		return ErrClosed
	}
	if i < 0 || i >= r.rows {
		return fmt.Errorf("shard: %s: row %d out of range [0, %d)", r.name, i, r.rows)
	}
	lo, hi := 0, len(r.batches)
	for hi-lo > 1 { // last batch with RowStart <= i
		mid := (lo + hi) / 2
		if r.batches[mid].RowStart <= i {
			lo = mid
		} else {
			hi = mid
		}
	}
	r.batches[lo].Row(i-r.batches[lo].RowStart, r.meta.SeqLen, dst)
	return nil
}

// Row fills dst with row i of the batch (views, no copy). L is seq_len.
func (b *Batch) Row(i, L int, dst *Row) {
	dst.InputIDs = b.InputIDs[i*L : (i+1)*L : (i+1)*L]
	dst.Labels = b.Labels[i*L : (i+1)*L : (i+1)*L]
	dst.PositionIDs = nil
	if b.PositionIDs != nil {
		dst.PositionIDs = b.PositionIDs[i*L : (i+1)*L : (i+1)*L]
	}
	dst.Length = b.Length[i]
	dst.Segments = dst.Segments[:0]
	for k := b.SegOffsets[i]; k < b.SegOffsets[i+1]; k++ {
		dst.Segments = append(dst.Segments, b.segment(k))
	}
}

// segment returns segment k of the batch.
func (b *Batch) segment(k int32) Segment {
	s := Segment{Sample: b.SegSample[k], Start: b.SegStart[k], Length: b.SegLength[k]}
	if b.SegSource != nil {
		s.Source = b.SegSource[k]
	}
	return s
}

// Buffers returns the absolute file offsets of the batch's values buffers,
// keyed as in the manifest ("input_ids", "segments.sample", …): every one
// of them, each exactly as long as its column needs (rows × seq_len × 4
// bytes for a token column, and so on). Reader.Bytes()[off : off+len] is
// the same memory as the typed slice (InputIDs, …).
func (b *Batch) Buffers() map[string]BufferRef { return b.buffers }

// Close unmaps the file. Slices obtained from the Reader become invalid.
func (r *Reader) Close() error {
	if !r.closed.Close() {
		return nil
	}
	if r.unmap != nil {
		return r.unmap()
	}
	return nil
}

// badFile is the corruption error of the shard file name (offset unknown).
func badFile(name, format string, args ...any) error {
	return corrupt.New(ErrCorrupt, name, -1, format, args...)
}

func newReader(name string, data []byte) (r *Reader, err error) {
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, badFile(name, "%v", p)
		}
	}()
	if len(data) < 16 || string(data[:6]) != "ARROW1" || string(data[len(data)-6:]) != "ARROW1" {
		return nil, badFile(name, "not an Arrow IPC file (%d bytes, no ARROW1 magic at both ends)", len(data))
	}
	fr, err := ipc.NewMappedFileReader(data,
		ipc.WithMetadataSizeLimit(MaxMetadataBytes),
		ipc.WithBodySizeLimit(int64(len(data))),
		ipc.WithAllocator(&boundedAlloc{name: name, max: MaxMetadataBytes}))
	if err != nil {
		return nil, badFile(name, "%v", err)
	}
	defer fr.Close()
	if fr.NumDictionaries() != 0 {
		return nil, badFile(name, "has %d dictionary batches, want none", fr.NumDictionaries())
	}
	meta, err := metaFromSchema(name, fr.Schema())
	if err != nil {
		return nil, err
	}
	if want := Schema(meta); !want.Equal(fr.Schema()) {
		return nil, badFile(name, "schema %v, want %v", fr.Schema(), want)
	}
	r = &Reader{name: name, data: data, meta: meta}
	nb := fr.NumRecords()
	if nb < 0 || int64(nb) > int64(len(data))/8 {
		return nil, badFile(name, "%d record batches in a file of %d bytes", nb, len(data))
	}
	r.batches = make([]Batch, 0, nb)
	for i := range nb {
		rec, err := fr.RecordBatchAt(i)
		if err != nil {
			return nil, badFile(name, "record batch %d: %v", i, err)
		}
		b, err := r.loadBatch(rec, i)
		rec.Release()
		if err != nil {
			return nil, err
		}
		r.rows += b.Rows
		r.batches = append(r.batches, b)
	}
	return r, nil
}

// boundedAlloc is the allocator a Reader hands arrow-go. A ferry shard's
// columns are uncompressed and are viewed in place, so the reader itself
// allocates next to nothing. A file that claims compressed buffers makes
// arrow-go allocate the "uncompressed size" the file states, an untrusted
// 64-bit number: the Go runtime treats a failed allocation of many GB as a
// fatal error that no recover catches, so the process would die. This
// allocator refuses any request over max with a panic, which newReader's
// recover turns into ErrCorrupt.
type boundedAlloc struct {
	name string
	max  int
}

func (a *boundedAlloc) check(size int) {
	if size < 0 || size > a.max {
		panic(fmt.Sprintf("a buffer of %d bytes is over the reader's limit of %d (compressed columns are not part of the format)", size, a.max))
	}
}

func (a *boundedAlloc) Allocate(size int) []byte {
	a.check(size)
	return memory.DefaultAllocator.Allocate(size)
}

func (a *boundedAlloc) Reallocate(size int, b []byte) []byte {
	a.check(size)
	return memory.DefaultAllocator.Reallocate(size, b)
}

func (a *boundedAlloc) Free(b []byte) { memory.DefaultAllocator.Free(b) }

func metaFromSchema(name string, s *arrow.Schema) (FileMeta, error) {
	md := s.Metadata()
	get := func(k string) (string, error) {
		i := md.FindKey(k)
		if i < 0 {
			return "", badFile(name, "schema metadata %q missing", k)
		}
		return md.Values()[i], nil
	}
	getInt := func(k string) (int, error) {
		v, err := get(k)
		if err != nil {
			return 0, err
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, badFile(name, "schema metadata %q = %q is not an integer", k, v)
		}
		return n, nil
	}
	var m FileMeta
	f, err := get(MetaFormat)
	if err != nil {
		return m, err
	}
	if f != FormatName {
		return m, badFile(name, "format %q, want %q", f, FormatName)
	}
	v, err := getInt(MetaVersion)
	if err != nil {
		return m, err
	}
	if v < FormatVersionNoSources || v > FormatVersion {
		return m, badFile(name, "format version %d, this reader knows %d..%d", v, FormatVersionNoSources, FormatVersion)
	}
	m.Sources = v >= FormatVersion
	if m.Rank, err = getInt(MetaRank); err != nil {
		return m, err
	}
	if m.Ranks, err = getInt(MetaRanks); err != nil {
		return m, err
	}
	if m.SeqLen, err = getInt(MetaSeqLen); err != nil {
		return m, err
	}
	mode, err := get(MetaMode)
	if err != nil {
		return m, err
	}
	m.Mode = Mode(mode)
	lab, err := get(MetaLabels)
	if err != nil {
		return m, err
	}
	m.Labels = Labels(lab)
	if m.TokenizerSHA256, err = get(MetaTokenizer); err != nil {
		return m, err
	}
	if err := m.validate(); err != nil {
		return m, badFile(name, "schema metadata: %v", err)
	}
	return m, nil
}

// values returns the values buffer of an array (index 1) after checking it
// holds at least n elements of size bytes and that the array has no nulls and
// no offset.
func values(name string, col string, d arrow.ArrayData, n, size int) ([]byte, error) {
	if d.NullN() != 0 {
		return nil, badFile(name, "column %s has %d nulls", col, d.NullN())
	}
	if d.Offset() != 0 {
		return nil, badFile(name, "column %s has offset %d", col, d.Offset())
	}
	bufs := d.Buffers()
	if len(bufs) < 2 || bufs[1] == nil {
		if n == 0 {
			return nil, nil
		}
		return nil, badFile(name, "column %s has no values buffer", col)
	}
	b := bufs[1].Bytes()
	if int64(len(b)) < int64(n)*int64(size) {
		return nil, badFile(name, "column %s values buffer is %d bytes, want %d", col, len(b), int64(n)*int64(size))
	}
	return b[:n*size], nil
}

func (r *Reader) loadBatch(rec arrow.RecordBatch, idx int) (Batch, error) {
	name := r.name
	L := r.meta.SeqLen
	rows64 := rec.NumRows()
	if rows64 < 0 || rows64 > int64(len(r.data)) {
		return Batch{}, badFile(name, "batch %d: %d rows", idx, rows64)
	}
	rows := int(rows64)
	if int64(rows)*int64(L)*4 > int64(len(r.data)) {
		return Batch{}, badFile(name, "batch %d: %d rows of %d tokens exceed the file", idx, rows, L)
	}
	b := Batch{RowStart: r.rows, Rows: rows, buffers: map[string]BufferRef{}}
	col := 0
	tokens := func(cname string) ([]int32, error) {
		d := rec.Column(col).Data()
		col++
		if d.Len() != rows || d.NullN() != 0 || d.Offset() != 0 || len(d.Children()) != 1 {
			return nil, badFile(name, "batch %d column %s: length %d nulls %d, want %d rows, no nulls", idx, cname, d.Len(), d.NullN(), rows)
		}
		vb, err := values(name, cname, d.Children()[0], rows*L, 4)
		if err != nil {
			return nil, err
		}
		r.ref(&b, cname, vb)
		return arrow.Int32Traits.CastFromBytes(vb), nil
	}
	var err error
	if b.InputIDs, err = tokens(ColInputIDs); err != nil {
		return b, err
	}
	if b.Labels, err = tokens(ColLabels); err != nil {
		return b, err
	}
	if r.meta.Mode == ModePack {
		if b.PositionIDs, err = tokens(ColPositionIDs); err != nil {
			return b, err
		}
	}
	ld := rec.Column(col).Data()
	col++
	if ld.Len() != rows {
		return b, badFile(name, "batch %d column length: %d values, want %d", idx, ld.Len(), rows)
	}
	lb, err := values(name, ColLength, ld, rows, 4)
	if err != nil {
		return b, err
	}
	r.ref(&b, ColLength, lb)
	b.Length = arrow.Int32Traits.CastFromBytes(lb)

	sd := rec.Column(col).Data()
	if sd.Len() != rows || len(sd.Children()) != 1 {
		return b, badFile(name, "batch %d column segments: %d values, want %d", idx, sd.Len(), rows)
	}
	ob, err := values(name, "segments.offsets", sd, rows+1, 4)
	if err != nil {
		return b, err
	}
	r.ref(&b, "segments.offsets", ob)
	b.SegOffsets = arrow.Int32Traits.CastFromBytes(ob)
	st := sd.Children()[0]
	nseg := st.Len()
	nkids := 3
	if r.meta.Sources {
		nkids = 4
	}
	if st.NullN() != 0 || st.Offset() != 0 || len(st.Children()) != nkids || nseg < 0 {
		return b, badFile(name, "batch %d column segments: bad struct child", idx)
	}
	if b.SegOffsets[0] < 0 || int(b.SegOffsets[rows]) > nseg {
		return b, badFile(name, "batch %d segments offsets [%d, %d] exceed %d segments", idx, b.SegOffsets[0], b.SegOffsets[rows], nseg)
	}
	kids := st.Children()
	for i, cname := range []string{"segments.sample", "segments.start", "segments.length", "segments.source"}[:nkids] {
		if kids[i].Len() != nseg {
			return b, badFile(name, "batch %d column %s: %d values, want %d", idx, cname, kids[i].Len(), nseg)
		}
	}
	sb, err := values(name, "segments.sample", kids[0], nseg, 8)
	if err != nil {
		return b, err
	}
	r.ref(&b, "segments.sample", sb)
	b.SegSample = arrow.Int64Traits.CastFromBytes(sb)
	ssb, err := values(name, "segments.start", kids[1], nseg, 4)
	if err != nil {
		return b, err
	}
	r.ref(&b, "segments.start", ssb)
	b.SegStart = arrow.Int32Traits.CastFromBytes(ssb)
	slb, err := values(name, "segments.length", kids[2], nseg, 4)
	if err != nil {
		return b, err
	}
	r.ref(&b, "segments.length", slb)
	b.SegLength = arrow.Int32Traits.CastFromBytes(slb)
	if r.meta.Sources {
		srb, err := values(name, "segments.source", kids[3], nseg, 4)
		if err != nil {
			return b, err
		}
		r.ref(&b, "segments.source", srb)
		b.SegSource = arrow.Int32Traits.CastFromBytes(srb)
	}

	segs := make([]Segment, 0, 8)
	for i := range rows {
		lo, hi := b.SegOffsets[i], b.SegOffsets[i+1]
		if lo > hi {
			return b, badFile(name, "batch %d row %d: segment offsets %d > %d", idx, i, lo, hi)
		}
		n := b.Length[i]
		if n < 0 || int(n) > L {
			return b, badFile(name, "batch %d row %d: length %d, want 0..%d", idx, i, n, L)
		}
		segs = segs[:0]
		for k := lo; k < hi; k++ {
			segs = append(segs, b.segment(k))
		}
		err := checkSegments(segs, n, r.meta.Mode)
		if err == nil {
			err = checkSources(segs, r.meta.Sources)
		}
		if err != nil {
			return b, badFile(name, "batch %d row %d (row %d of the shard): %v", idx, i, b.RowStart+i, err)
		}
	}
	return b, nil
}

// ref records the absolute offset of buf, a sub-slice of r.data, in the batch.
func (r *Reader) ref(b *Batch, key string, buf []byte) {
	if len(buf) == 0 {
		b.buffers[key] = BufferRef{Offset: 0, Length: 0}
		return
	}
	off := cap(r.data) - cap(buf)
	if off < 0 || off+len(buf) > len(r.data) || &r.data[off] != &buf[0] {
		return // not a view of r.data (cannot happen with the mapped reader)
	}
	b.buffers[key] = BufferRef{Offset: int64(off), Length: int64(len(buf))}
}

package serve

import (
	"fmt"

	"github.com/ferryml/ferry/shard"
)

// Column is one entry of the shared-memory column table: where a column
// lives inside every slot.
type Column struct {
	Offset uint64 // bytes from the slot start; 0 = column absent
	DType  uint8  // DTypeInt32 or DTypeInt64; DTypeNone when absent
	Width  uint32 // elements per row: seq_len for token columns, 1 for per-row columns
}

// Present reports whether the column is in the layout.
func (c Column) Present() bool { return c.Offset != 0 }

// ItemSize returns the size of one element in bytes.
func (c Column) ItemSize() uint64 {
	switch c.DType {
	case DTypeInt32:
		return 4
	case DTypeInt64:
		return 8
	}
	return 0
}

// Layout describes the shared-memory ring of one client. See doc.go.
type Layout struct {
	Slots    uint32
	MaxRows  uint32
	SeqLen   uint32
	Mode     uint32 // ModePad or ModePack
	SlotSize uint64 // bytes per slot, a multiple of SlotAlign
	Columns  [NumColumns]Column
}

// Limits on a layout read from an untrusted header (seq_len: that of the
// shards, 1..shard.MaxSeqLen).
const (
	// MaxShmSize bounds the memfd of one client.
	MaxShmSize = 64 << 30
)

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

// NewLayout computes the ring layout for slots slots of up to maxRows rows of
// seqLen tokens in the given mode, with the optional columns that the HELLO
// flags ask for.
func NewLayout(slots, maxRows, seqLen, mode, flags uint32) (Layout, error) {
	l := Layout{Slots: slots, MaxRows: maxRows, SeqLen: seqLen, Mode: mode}
	if slots < 1 || slots > MaxSlots || maxRows < 1 || maxRows > MaxRows || seqLen < 1 || seqLen > shard.MaxSeqLen || mode > ModePack || flags&^HelloSourceIDs != 0 {
		return l, fmt.Errorf("%w: layout slots=%d max_rows=%d seq_len=%d mode=%d flags=%#x", ErrLimit, slots, maxRows, seqLen, mode, flags)
	}
	off := uint64(SlotHeaderSize)
	add := func(id int, dt uint8, width uint32) {
		off = alignUp(off, ColumnAlign)
		c := Column{Offset: off, DType: dt, Width: width}
		l.Columns[id] = c
		off += uint64(maxRows) * uint64(width) * c.ItemSize()
	}
	add(ColInputIDs, DTypeInt32, seqLen)
	add(ColLabels, DTypeInt32, seqLen)
	if mode == ModePad {
		add(ColAttentionMask, DTypeInt32, seqLen)
	} else {
		add(ColPositionIDs, DTypeInt32, seqLen)
	}
	add(ColLength, DTypeInt32, 1)
	add(ColSample, DTypeInt64, 1)
	if flags&HelloSourceIDs != 0 {
		add(ColSourceIDs, DTypeInt32, seqLen)
	}
	l.SlotSize = alignUp(off, SlotAlign)
	if l.TotalSize() > MaxShmSize {
		return l, fmt.Errorf("%w: ring of %d slots × %d bytes exceeds %d bytes", ErrLimit, slots, l.SlotSize, uint64(MaxShmSize))
	}
	return l, nil
}

// TotalSize is the size of the memfd: the header page and every slot.
func (l Layout) TotalSize() uint64 { return ShmHeaderSize + uint64(l.Slots)*l.SlotSize }

// SlotOffset is the byte offset of slot i in the memfd.
func (l Layout) SlotOffset(i uint32) uint64 { return ShmHeaderSize + uint64(i)*l.SlotSize }

// AppendHeader appends the ShmHeaderSize-byte header page to dst.
func (l Layout) AppendHeader(dst []byte) []byte {
	start := len(dst)
	dst = append(dst, ShmMagic...)
	dst = le.AppendUint32(dst, Version)
	dst = le.AppendUint32(dst, ShmHeaderSize)
	dst = le.AppendUint32(dst, l.Slots)
	dst = le.AppendUint32(dst, l.MaxRows)
	dst = le.AppendUint32(dst, l.SeqLen)
	dst = le.AppendUint32(dst, l.Mode)
	dst = le.AppendUint64(dst, l.SlotSize)
	dst = le.AppendUint64(dst, ShmHeaderSize)
	dst = le.AppendUint64(dst, l.TotalSize())
	dst = le.AppendUint64(dst, 0)
	for _, c := range l.Columns {
		dst = le.AppendUint64(dst, c.Offset)
		dst = append(dst, c.DType, 0, 0, 0)
		dst = le.AppendUint32(dst, c.Width)
	}
	for len(dst)-start < ShmHeaderSize {
		dst = append(dst, 0)
	}
	return dst
}

// ParseHeader decodes and validates a shared-memory header page against the
// size of the memory file it came from. It accepts only what NewLayout would
// produce for the same parameters, so every offset it returns is in range.
func ParseHeader(b []byte, size uint64) (Layout, error) {
	if len(b) < ShmHeaderSize {
		return Layout{}, fmt.Errorf("%w: shm header is %d bytes, want %d", ErrProtocol, len(b), ShmHeaderSize)
	}
	if string(b[:8]) != ShmMagic {
		return Layout{}, fmt.Errorf("%w: shm magic %q at byte 0, want %q", ErrProtocol, b[:8], ShmMagic)
	}
	if v := le.Uint32(b[8:]); v != Version {
		return Layout{}, fmt.Errorf("%w: shm version %d at byte 8, want %d", ErrProtocol, v, Version)
	}
	if hs := le.Uint32(b[12:]); hs != ShmHeaderSize {
		return Layout{}, fmt.Errorf("%w: shm header_size %d at byte 12, want %d", ErrProtocol, hs, ShmHeaderSize)
	}
	var flags uint32 // the optional columns are those with an entry
	if le.Uint64(b[ShmColumnTableOffset+ColSourceIDs*ShmColumnEntrySize:]) != 0 {
		flags |= HelloSourceIDs
	}
	want, err := NewLayout(le.Uint32(b[16:]), le.Uint32(b[20:]), le.Uint32(b[24:]), le.Uint32(b[28:]), flags)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: shm header bytes 16..31: %w", ErrProtocol, err)
	}
	if ss := le.Uint64(b[32:]); ss != want.SlotSize {
		return Layout{}, fmt.Errorf("%w: shm slot_size %d at byte 32, want %d", ErrProtocol, ss, want.SlotSize)
	}
	if so := le.Uint64(b[40:]); so != ShmHeaderSize {
		return Layout{}, fmt.Errorf("%w: shm slots_offset %d at byte 40, want %d", ErrProtocol, so, ShmHeaderSize)
	}
	if ts := le.Uint64(b[48:]); ts != want.TotalSize() || ts > size {
		return Layout{}, fmt.Errorf("%w: shm total_size %d at byte 48, want %d within a %d-byte memfd", ErrProtocol, ts, want.TotalSize(), size)
	}
	if le.Uint64(b[56:]) != 0 {
		return Layout{}, fmt.Errorf("%w: shm reserved bytes 56..63 not zero", ErrProtocol)
	}
	for i := range NumColumns {
		p := b[ShmColumnTableOffset+i*ShmColumnEntrySize:]
		c := Column{Offset: le.Uint64(p), DType: p[8], Width: le.Uint32(p[12:])}
		if c != want.Columns[i] || p[9] != 0 || p[10] != 0 || p[11] != 0 {
			return Layout{}, fmt.Errorf("%w: shm column %d entry at byte %d: %+v, want %+v", ErrProtocol, i, ShmColumnTableOffset+i*ShmColumnEntrySize, c, want.Columns[i])
		}
	}
	for i, c := range b[ShmColumnTableOffset+NumColumns*ShmColumnEntrySize : ShmHeaderSize] {
		if c != 0 {
			return Layout{}, fmt.Errorf("%w: shm reserved byte %d not zero", ErrProtocol, ShmColumnTableOffset+NumColumns*ShmColumnEntrySize+i)
		}
	}
	return want, nil
}

// SlotHeader is the 64-byte header at the start of every slot.
type SlotHeader struct {
	Seq   uint64 // batch number: the n-th batch of the plan (from 0) is in slot n % slots
	Rows  uint32
	State uint32 // SlotEmpty or SlotFilled
}

// PutSlotHeader writes h at the start of slot b.
func PutSlotHeader(b []byte, h SlotHeader) {
	_ = b[SlotHeaderSize-1]
	le.PutUint64(b, h.Seq)
	le.PutUint32(b[8:], h.Rows)
	le.PutUint32(b[12:], h.State)
}

// ReadSlotHeader reads the header at the start of slot b.
func ReadSlotHeader(b []byte) SlotHeader {
	_ = b[SlotHeaderSize-1]
	return SlotHeader{Seq: le.Uint64(b), Rows: le.Uint32(b[8:]), State: le.Uint32(b[12:])}
}

package serve

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Protocol constants. The layout they describe is drawn in doc.go and pinned
// by testdata/protocol.golden.json, which the Python client's tests read too.
const (
	// Version is the protocol and shared-memory layout version.
	Version = 1

	// MsgMagic starts every socket message: "FRYS" in little-endian byte order.
	MsgMagic uint32 = 'F' | 'R'<<8 | 'Y'<<16 | 'S'<<24
	// MsgHeaderSize is the size of the fixed message header.
	MsgHeaderSize = 16
	// MaxMsgSize bounds every message (header + payload) in either direction.
	MaxMsgSize = 128 << 10

	// ShmMagic starts the shared-memory header.
	ShmMagic = "FERRYSHM"
	// ShmHeaderSize is the size of the header page; slots start after it.
	ShmHeaderSize = 4096
	// ShmColumnTableOffset is where the column table starts in the header.
	ShmColumnTableOffset = 64
	// ShmColumnEntrySize is the size of one column table entry.
	ShmColumnEntrySize = 16
	// SlotHeaderSize is the size of the header at the start of every slot.
	SlotHeaderSize = 64
	// SlotAlign is the alignment of slots and of every column inside a slot.
	SlotAlign = 4096
	// ColumnAlign is the alignment of every column inside a slot.
	ColumnAlign = 64

	// RunSize is the size of one run in a PLAN message.
	RunSize = 16
	// MaxRunsPerMsg is the most runs one PLAN message carries.
	MaxRunsPerMsg = (MaxMsgSize - MsgHeaderSize - planFixed) / RunSize
	// MaxRows is the largest max_rows (rows per batch) a client may ask for.
	MaxRows = 1 << 16
	// MaxSlots is the largest number of slots a client may ask for.
	MaxSlots = 1024
	// MaxPlanAhead is the most PLAN messages a client may have queued in the
	// daemon beyond the batches already filled.
	MaxPlanAhead = 64
)

// Message types.
const (
	MsgHello   uint16 = 1 // client → daemon: ask for a ring
	MsgWelcome uint16 = 2 // daemon → client: ring ready; carries memfd + eventfd
	MsgPlan    uint16 = 3 // client → daemon: the next batches to prepare, as runs of rows
	MsgError   uint16 = 4 // daemon → client: fatal error; the daemon closes the connection after it
	// MsgFile and MsgFileData serve model files (weights.go): client →
	// daemon, a FileRequest as JSON; daemon → client, a FileData as JSON
	// with the sealed memfd holding the bytes.
	MsgFile     uint16 = 5
	MsgFileData uint16 = 6
)

// Error codes carried by MsgError.
const (
	CodeBadRequest uint32 = 1 // malformed or out-of-order message
	CodeNotServed  uint32 = 2 // a row of a shard this daemon does not serve
	CodeLimit      uint32 = 3 // slots, rows or memory over the daemon's limits
	CodeShutdown   uint32 = 4 // the daemon is shutting down (SIGTERM)
	CodeIO         uint32 = 5 // the daemon failed to read its data
)

// Column IDs: the index of a column's entry in the shared-memory column table.
const (
	ColInputIDs      = 0 // int32 [max_rows, seq_len]
	ColLabels        = 1 // int32 [max_rows, seq_len]
	ColAttentionMask = 2 // int32 [max_rows, seq_len], pad mode only: 1 for j < length
	ColPositionIDs   = 3 // int32 [max_rows, seq_len], pack mode only
	ColLength        = 4 // int32 [max_rows]
	ColSample        = 5 // int64 [max_rows]: sample of the row's first segment
	ColSourceIDs     = 6 // int32 [max_rows, seq_len], with HelloSourceIDs: each token's source, -1 on padding
	NumColumns       = 8 // table size; ID 7 is reserved (zero entry)
)

// Data types in the column table.
const (
	DTypeNone  uint8 = 0
	DTypeInt32 uint8 = 1
	DTypeInt64 uint8 = 2
)

// ColumnNames are the batch-dict keys of the column IDs, "" for reserved IDs.
var ColumnNames = [NumColumns]string{"input_ids", "labels", "attention_mask", "position_ids", "length", "sample", "source_ids", ""}

// Modes in the shared-memory header.
const (
	ModePad  uint32 = 0
	ModePack uint32 = 1
)

// Slot states in the slot header.
const (
	SlotEmpty  uint32 = 0
	SlotFilled uint32 = 1
)

// Protocol errors, matched with errors.Is.
var (
	// ErrProtocol marks a malformed message or shared-memory header.
	ErrProtocol = errors.New("serve: protocol error")
	// ErrDaemonGone reports that the daemon closed the connection.
	ErrDaemonGone = errors.New("serve: daemon closed the connection")
	// ErrRemote wraps an error reported by the daemon with MsgError.
	ErrRemote = errors.New("serve: daemon error")
	// ErrLimit reports a request over a documented limit.
	ErrLimit = errors.New("serve: over limit")
	// ErrClosed reports use of a closed client or server.
	ErrClosed = errors.New("serve: closed")
	// ErrUnsupported is returned by NewServer and Dial on systems other
	// than Linux: the transport needs memfd, file seals, eventfd and
	// SOCK_SEQPACKET.
	ErrUnsupported = errors.New("serve: ferry-serve needs Linux: memfd/eventfd")
)

var le = binary.LittleEndian

// MsgHeader is the fixed 16-byte header of every message.
type MsgHeader struct {
	Type   uint16
	Flags  uint16
	Length uint32 // payload bytes after the header
}

// AppendMsgHeader appends an encoded header to dst.
func AppendMsgHeader(dst []byte, typ uint16, payloadLen int) []byte {
	dst = le.AppendUint32(dst, MsgMagic)
	dst = le.AppendUint16(dst, typ)
	dst = le.AppendUint16(dst, 0)
	dst = le.AppendUint32(dst, uint32(payloadLen))
	dst = le.AppendUint32(dst, 0)
	return dst
}

// ParseMsg checks the header of one received message and returns it with
// its payload (aliasing msg).
func ParseMsg(msg []byte) (MsgHeader, []byte, error) {
	if len(msg) < MsgHeaderSize {
		return MsgHeader{}, nil, fmt.Errorf("%w: message of %d bytes, want at least %d", ErrProtocol, len(msg), MsgHeaderSize)
	}
	if m := le.Uint32(msg); m != MsgMagic {
		return MsgHeader{}, nil, fmt.Errorf("%w: message magic %#08x at byte 0, want %#08x", ErrProtocol, m, MsgMagic)
	}
	h := MsgHeader{Type: le.Uint16(msg[4:]), Flags: le.Uint16(msg[6:]), Length: le.Uint32(msg[8:])}
	if h.Flags != 0 || le.Uint32(msg[12:]) != 0 {
		return h, nil, fmt.Errorf("%w: message type %d: reserved header bytes 6..7 or 12..15 not zero", ErrProtocol, h.Type)
	}
	if int64(h.Length) != int64(len(msg)-MsgHeaderSize) {
		return h, nil, fmt.Errorf("%w: message type %d: header says %d payload bytes, message has %d", ErrProtocol, h.Type, h.Length, len(msg)-MsgHeaderSize)
	}
	return h, msg[MsgHeaderSize:], nil
}

// Hello is the client's first message.
type Hello struct {
	Version uint32
	Slots   uint32 // ring size: batches prepared ahead + batches held
	MaxRows uint32 // rows of the largest batch the client will ask for
	Rank    int32  // for the daemon's log only; -1 unknown
	Worker  int32  // DataLoader worker id, for the log only; -1 none
	Flags   uint32 // HelloSourceIDs or 0
}

// HELLO flags: columns a client asks for beyond the always-present ones.
const (
	// HelloSourceIDs asks for the source_ids column (ColSourceIDs).
	HelloSourceIDs uint32 = 1
)

const helloSize = 24

// AppendHello appends an encoded MsgHello to dst.
func AppendHello(dst []byte, h Hello) []byte {
	dst = AppendMsgHeader(dst, MsgHello, helloSize)
	dst = le.AppendUint32(dst, h.Version)
	dst = le.AppendUint32(dst, h.Slots)
	dst = le.AppendUint32(dst, h.MaxRows)
	dst = le.AppendUint32(dst, uint32(h.Rank))
	dst = le.AppendUint32(dst, uint32(h.Worker))
	dst = le.AppendUint32(dst, h.Flags)
	return dst
}

// ParseHello decodes a MsgHello payload.
func ParseHello(p []byte) (Hello, error) {
	if len(p) != helloSize {
		return Hello{}, fmt.Errorf("%w: HELLO payload is %d bytes, want %d", ErrProtocol, len(p), helloSize)
	}
	h := Hello{Version: le.Uint32(p), Slots: le.Uint32(p[4:]), MaxRows: le.Uint32(p[8:]),
		Rank: int32(le.Uint32(p[12:])), Worker: int32(le.Uint32(p[16:])), Flags: le.Uint32(p[20:])}
	if h.Version != Version {
		return h, fmt.Errorf("%w: HELLO version %d, this daemon speaks %d", ErrProtocol, h.Version, Version)
	}
	if h.Flags&^HelloSourceIDs != 0 {
		return h, fmt.Errorf("%w: HELLO flags %#x at byte 20, want a combination of %#x", ErrProtocol, h.Flags, HelloSourceIDs)
	}
	if h.Slots < 1 || h.Slots > MaxSlots {
		return h, fmt.Errorf("%w: HELLO slots %d, want 1..%d", ErrLimit, h.Slots, MaxSlots)
	}
	if h.MaxRows < 1 || h.MaxRows > MaxRows {
		return h, fmt.Errorf("%w: HELLO max_rows %d, want 1..%d", ErrLimit, h.MaxRows, MaxRows)
	}
	return h, nil
}

// Welcome is the daemon's answer to Hello. It travels with three descriptors
// (SCM_RIGHTS): the sealed memfd holding the ring, the ready eventfd (the
// daemon adds 1 per filled slot) and the free eventfd (the client adds the
// number of slots it hands back).
type Welcome struct {
	Version uint32
	ShmSize uint64
	Info    []byte // JSON: the manifest without per-batch buffers, plus "served_ranks"
}

const welcomeFixed = 24

// AppendWelcome appends an encoded MsgWelcome to dst.
func AppendWelcome(dst []byte, w Welcome) []byte {
	dst = AppendMsgHeader(dst, MsgWelcome, welcomeFixed+len(w.Info))
	dst = le.AppendUint32(dst, w.Version)
	dst = le.AppendUint32(dst, 0)
	dst = le.AppendUint64(dst, w.ShmSize)
	dst = le.AppendUint32(dst, uint32(len(w.Info)))
	dst = le.AppendUint32(dst, 0)
	return append(dst, w.Info...)
}

// ParseWelcome decodes a MsgWelcome payload; Info aliases p.
func ParseWelcome(p []byte) (Welcome, error) {
	if len(p) < welcomeFixed {
		return Welcome{}, fmt.Errorf("%w: WELCOME payload is %d bytes, want at least %d", ErrProtocol, len(p), welcomeFixed)
	}
	w := Welcome{Version: le.Uint32(p), ShmSize: le.Uint64(p[8:])}
	n := le.Uint32(p[16:])
	if w.Version != Version {
		return w, fmt.Errorf("%w: WELCOME version %d, this client speaks %d", ErrProtocol, w.Version, Version)
	}
	if int64(n) != int64(len(p)-welcomeFixed) {
		return w, fmt.Errorf("%w: WELCOME info length %d at byte 16, payload holds %d", ErrProtocol, n, len(p)-welcomeFixed)
	}
	w.Info = p[welcomeFixed:]
	return w, nil
}

// Run is a run of consecutive rows of one shard: rows Row … Row+Rows−1 of
// shard file File (the file's rank in the manifest; global position p is
// File = p % ranks, Row = p / ranks). A batch is one run, or several when
// all but the last carry RunContinues.
type Run struct {
	File  uint32
	Row   uint32
	Rows  uint32
	Flags uint32 // RunContinues or 0
}

// RunContinues marks a run whose batch continues with the next run.
const RunContinues uint32 = 1

const planFixed = 8

// AppendPlan appends an encoded MsgPlan to dst. It does not allocate when
// dst has room.
func AppendPlan(dst []byte, runs []Run) []byte {
	dst = AppendMsgHeader(dst, MsgPlan, planFixed+RunSize*len(runs))
	dst = le.AppendUint32(dst, uint32(len(runs)))
	dst = le.AppendUint32(dst, 0)
	for _, r := range runs {
		dst = le.AppendUint32(dst, r.File)
		dst = le.AppendUint32(dst, r.Row)
		dst = le.AppendUint32(dst, r.Rows)
		dst = le.AppendUint32(dst, r.Flags)
	}
	return dst
}

// ParsePlan decodes a MsgPlan payload, appending its runs to runs.
func ParsePlan(p []byte, runs []Run) ([]Run, error) {
	if len(p) < planFixed {
		return runs, fmt.Errorf("%w: PLAN payload is %d bytes, want at least %d", ErrProtocol, len(p), planFixed)
	}
	n := le.Uint32(p)
	if le.Uint32(p[4:]) != 0 {
		return runs, fmt.Errorf("%w: PLAN reserved bytes 4..7 not zero", ErrProtocol)
	}
	if int64(n)*RunSize != int64(len(p)-planFixed) {
		return runs, fmt.Errorf("%w: PLAN of %d runs (byte 0) needs %d payload bytes, has %d", ErrProtocol, n, planFixed+int64(n)*RunSize, len(p))
	}
	for i, q := 0, p[planFixed:]; len(q) >= RunSize; i, q = i+1, q[RunSize:] {
		r := Run{File: le.Uint32(q), Row: le.Uint32(q[4:]), Rows: le.Uint32(q[8:]), Flags: le.Uint32(q[12:])}
		if r.Rows == 0 || r.Flags&^RunContinues != 0 {
			return runs, fmt.Errorf("%w: PLAN run %d (byte %d): %d rows, flags %#x; want rows > 0 and flags 0 or 1", ErrProtocol, i, planFixed+i*RunSize, r.Rows, r.Flags)
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// AppendError appends an encoded MsgError to dst.
func AppendError(dst []byte, code uint32, text string) []byte {
	dst = AppendMsgHeader(dst, MsgError, 8+len(text))
	dst = le.AppendUint32(dst, code)
	dst = le.AppendUint32(dst, 0)
	return append(dst, text...)
}

// appendMsg appends a message of type typ carrying payload p.
func appendMsg(dst []byte, typ uint16, p []byte) []byte {
	return append(AppendMsgHeader(dst, typ, len(p)), p...)
}

// ParseError decodes a MsgError payload.
func ParseError(p []byte) (code uint32, text string, err error) {
	if len(p) < 8 {
		return 0, "", fmt.Errorf("%w: ERROR payload is %d bytes, want at least 8", ErrProtocol, len(p))
	}
	return le.Uint32(p), string(p[8:]), nil
}

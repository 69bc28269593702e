package ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/ferryml/ferry/internal/corrupt"
)

// MaxHeaderSize is the largest safetensors header accepted, as in the
// reference Rust reader (100,000,000 bytes).
const MaxHeaderSize = 100_000_000

// STTensor is one tensor entry of a safetensors header.
type STTensor struct {
	Name  string
	DType DType
	Shape []int64
	// Begin and End are byte offsets relative to the data section.
	Begin, End int64
}

// STHeader is a parsed safetensors header.
type STHeader struct {
	Metadata map[string]string
	// Tensors sorted by Begin.
	Tensors []STTensor
	// DataOffset is the absolute offset of the data section (8 + header length).
	DataOffset int64
	// DataSize is the byte size of the data section.
	DataSize int64
}

// ParseSafetensorsHeader reads and validates the header of a safetensors
// file of the given size from r: the length fits the file and the limit,
// the JSON is an object of tensor entries (plus an optional string-to-string
// "__metadata__"), dtypes are known, every data_offsets range matches its
// shape and lies in the file, and the ranges tile the data section with no
// hole and no overlap up to the end of the file.
func ParseSafetensorsHeader(r io.ReaderAt, size int64, name string) (*STHeader, error) {
	return parseSafetensors(r, size, name, false)
}

// ParseSafetensorsPrefix is ParseSafetensorsHeader for a safetensors blob
// at the start of r whose data section ends at its last tensor: bytes after
// it are allowed (in a .distcp file other items may follow).
func ParseSafetensorsPrefix(r io.ReaderAt, size int64, name string) (*STHeader, error) {
	return parseSafetensors(r, size, name, true)
}

// parseSafetensors is the one safetensors header parser: the 8-byte
// length, the JSON, every entry; with prefix the data section ends at the
// furthest data_offsets end, else at the end of the size bytes.
func parseSafetensors(r io.ReaderAt, size int64, name string, prefix bool) (*STHeader, error) {
	bad := func(format string, args ...any) error {
		return corrupt.New(ErrCorrupt, name, -1, format, args...)
	}
	var lb [8]byte
	if size < 8 {
		return nil, bad("%d bytes, too short for a safetensors header", size)
	}
	if _, err := r.ReadAt(lb[:], 0); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	n := binary.LittleEndian.Uint64(lb[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%s: %w: safetensors header of %d bytes, limit %d", name, ErrLimit, n, MaxHeaderSize)
	}
	if n > uint64(size-8) {
		return nil, bad("safetensors header of %d bytes past end of the %d bytes", n, size)
	}
	hb := make([]byte, n)
	if _, err := r.ReadAt(hb, 8); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return parseSTHeaderBytes(hb, size, name, prefix)
}

func parseSTHeaderBytes(hb []byte, size int64, name string, prefix bool) (*STHeader, error) {
	bad := func(format string, args ...any) error {
		return corrupt.New(ErrCorrupt, name, -1, format, args...)
	}
	if !utf8.Valid(hb) {
		return nil, bad("safetensors header is not UTF-8")
	}
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(hb))
	if err := dec.Decode(&raw); err != nil {
		return nil, bad("safetensors header at byte 8: %v", err)
	}
	if raw == nil {
		return nil, bad("safetensors header is not a JSON object")
	}
	if dec.More() {
		return nil, bad("safetensors header: data after the JSON object")
	}
	h := &STHeader{DataOffset: 8 + int64(len(hb)), DataSize: size - 8 - int64(len(hb))}
	var end int64 // with prefix: the furthest data_offsets end
	for k, v := range raw {
		if k == "__metadata__" {
			if err := json.Unmarshal(v, &h.Metadata); err != nil {
				return nil, bad("__metadata__ is not a string-to-string map: %v", err)
			}
			continue
		}
		var e struct {
			DType       string  `json:"dtype"`
			Shape       []int64 `json:"shape"`
			DataOffsets []int64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(v, &e); err != nil {
			return nil, bad("tensor %q: %v", k, err)
		}
		d := DType(e.DType)
		if !d.Valid() {
			return nil, fmt.Errorf("%s: %w: tensor %q: dtype %q", name, ErrUnsupported, k, e.DType)
		}
		if e.Shape == nil || len(e.DataOffsets) != 2 {
			return nil, bad("tensor %q: missing shape or data_offsets", k)
		}
		if err := checkShape(e.Shape, d); err != nil {
			return nil, bad("tensor %q: %v", k, err)
		}
		t := STTensor{Name: k, DType: d, Shape: e.Shape, Begin: e.DataOffsets[0], End: e.DataOffsets[1]}
		if prefix && t.End > end {
			end = t.End
		}
		h.Tensors = append(h.Tensors, t)
	}
	if prefix && end <= h.DataSize {
		h.DataSize = end // the data section ends at the last tensor; other bytes may follow
	}
	for _, t := range h.Tensors {
		if t.Begin < 0 || t.End < t.Begin || t.End > h.DataSize {
			return nil, bad("tensor %q: data_offsets [%d, %d) outside the %d-byte data section", t.Name, t.Begin, t.End, h.DataSize)
		}
		if want := numel(t.Shape) * int64(t.DType.Size()); t.End-t.Begin != want {
			return nil, bad("tensor %q: data_offsets [%d, %d) hold %d bytes, shape %s %s needs %d", t.Name, t.Begin, t.End, t.End-t.Begin, fmtShape(t.Shape), t.DType, want)
		}
	}
	sort.Slice(h.Tensors, func(i, j int) bool {
		a, b := h.Tensors[i], h.Tensors[j]
		if a.Begin != b.Begin {
			return a.Begin < b.Begin
		}
		return a.End < b.End
	})
	var at int64
	for _, t := range h.Tensors {
		if t.Begin != at {
			return nil, bad("tensor %q starts at data byte %d, want %d (hole or overlap)", t.Name, t.Begin, at)
		}
		at = t.End
	}
	if at != h.DataSize {
		return nil, bad("tensors end at data byte %d, the data section has %d bytes", at, h.DataSize)
	}
	return h, nil
}

// headerEntry is one tensor in a header being written.
type headerEntry struct {
	Name  string
	DType DType
	Shape []int64
	Begin int64
	End   int64
}

// encodeHeader builds a safetensors header exactly as the safetensors
// library writes it: the 8-byte length, then compact JSON with
// "__metadata__" first, entries in the given order with keys dtype, shape,
// data_offsets, non-ASCII written raw, control characters escaped like
// serde_json/Python json, padded with spaces to a multiple of 8.
func encodeHeader(meta [][2]string, entries []headerEntry) []byte {
	b := make([]byte, 8, 64+len(entries)*96)
	b = append(b, '{')
	first := true
	if len(meta) > 0 {
		b = appendJSONString(b, "__metadata__")
		b = append(b, ":{"...)
		for i, kv := range meta {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, kv[0])
			b = append(b, ':')
			b = appendJSONString(b, kv[1])
		}
		b = append(b, '}')
		first = false
	}
	for _, e := range entries {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = appendJSONString(b, e.Name)
		b = append(b, `:{"dtype":`...)
		b = appendJSONString(b, string(e.DType))
		b = append(b, `,"shape":[`...)
		for i, d := range e.Shape {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, d, 10)
		}
		b = append(b, `],"data_offsets":[`...)
		b = strconv.AppendInt(b, e.Begin, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, e.End, 10)
		b = append(b, "]}"...)
	}
	b = append(b, '}')
	for (len(b)-8)%8 != 0 {
		b = append(b, ' ')
	}
	binary.LittleEndian.PutUint64(b, uint64(len(b)-8))
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as Python's json.dumps(ensure_ascii=False) and
// serde_json do.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			b = append(b, '\\', '"')
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&15])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

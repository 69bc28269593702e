package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/storage"
)

// Errors, matched with errors.Is.
var (
	// ErrSyntax marks malformed JSON or an unreadable Parquet file; the
	// rest of the input (JSON array, Parquet) or the line (JSON Lines) is lost.
	ErrSyntax = errors.New("dataset: syntax error")
	// ErrField marks a record whose JSON is well formed but that lacks a
	// required field or has a field of the wrong type.
	ErrField = errors.New("dataset: bad field")
	// ErrUTF8 marks a string that is not valid UTF-8 (or holds an unpaired
	// surrogate escape).
	ErrUTF8 = errors.New("dataset: invalid UTF-8")
	// ErrEmpty marks an input with no records at all.
	ErrEmpty = errors.New("dataset: no records")
	// ErrFormat marks an input that is none of the supported formats.
	ErrFormat = errors.New("dataset: unsupported input format")
	// ErrLimit marks an input beyond a documented limit.
	ErrLimit = errors.New("dataset: limit exceeded")
	// ErrSplit marks a JSON Lines byte range whose last record runs past
	// the range's end (see Plan): the file cannot be split there.
	ErrSplit = errors.New("dataset: a record crosses the split of a JSON Lines file")
)

// Format is an input format.
type Format string

// Formats, detected from the content (never from the file name).
const (
	JSONArray Format = "json"
	JSONLines Format = "jsonl"
	Parquet   Format = "parquet"
)

// Record is one Alpaca record. Input is "" when the key is absent.
type Record struct {
	Instruction, Input, Output string
}

// RecordError locates a bad record. Index is the 0-based record number
// (JSON: element of the array or non-blank line; Parquet: row; a byte range
// of JSON Lines read by ReadPieces: counted from the range's start); Offset
// is the byte offset in the decompressed input (-1 for Parquet); Line is
// 1-based (0 for Parquet and for a byte range that does not start the file).
type RecordError struct {
	File   string
	Index  int64
	Offset int64
	Line   int64
	Field  string // the offending field, when there is one
	Err    error
}

func (e *RecordError) Error() string {
	where := fmt.Sprintf("record %d", e.Index)
	switch {
	case e.Offset >= 0 && e.Line > 0:
		where += fmt.Sprintf(" (byte %d, line %d)", e.Offset, e.Line)
	case e.Offset >= 0:
		where += fmt.Sprintf(" (byte %d)", e.Offset)
	}
	return fmt.Sprintf("%s: %s: %v", e.File, where, e.Err)
}

func (e *RecordError) Unwrap() error { return e.Err }

// Options configure Read.
type Options struct {
	// OnBad is called for each record-level error (ErrField, ErrUTF8, and
	// a malformed line of JSON Lines). Returning nil skips the record and
	// goes on; returning an error stops Read with it. Nil means stop at the
	// first bad record.
	OnBad func(*RecordError) error
	// MaxBytes bounds the decompressed input size (default 64 GiB).
	MaxBytes int64
}

// Results is what a read found: records of type R (Record, Conversation).
type Results[R any] struct {
	Records  []R
	Samples  []int64 // Samples[i] is the record index of Records[i] in the input
	Skipped  int64
	Format   Format
	Bytes    int64 // decompressed input bytes
	RawBytes int64 // input bytes as stored
}

// Result is what Read found.
type Result = Results[Record]

// Read reads every record of loc (a path or s3:// URL): a JSON array, JSON
// Lines (whatever the name), or Parquet with string or large_string
// columns instruction, output and optionally input (other columns are
// ignored), each optionally gzip- or zstd-compressed (detected from the
// magic bytes). The whole input is held in memory while it is parsed.
func Read(ctx context.Context, loc string, opt Options) (*Result, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 30
	}
	rc, size, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := readAll(rc, size, opt.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	return Parse(loc, raw, opt)
}

func readAll(r io.Reader, size, limit int64) ([]byte, error) {
	if size > limit {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrLimit, size, limit)
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(size, 0)+512))
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrLimit, limit)
	}
	return buf.Bytes(), nil
}

// Parse is Read for an input already in memory; name is used in errors.
func Parse(name string, raw []byte, opt Options) (*Result, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 30
	}
	data, err := decompress(raw, opt.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res := &Result{Bytes: int64(len(data)), RawBytes: int64(len(raw))}
	bad := res.badRecords(opt)
	if len(data) >= 4 && string(data[:4]) == "PAR1" {
		res.Format = Parquet
		err = parseParquet(name, data, res, bad)
	} else {
		err = parseJSON(name, data, res, bad)
	}
	if err != nil {
		return nil, err
	}
	if len(res.Records) == 0 && res.Skipped == 0 {
		return nil, fmt.Errorf("%w: %s has no records", ErrEmpty, name)
	}
	return res, nil
}

// badRecords returns the handler of a bad record: opt.OnBad (by default,
// stop with the record's error); a record it lets pass is counted in
// res.Skipped.
func (res *Results[R]) badRecords(opt Options) func(*RecordError) error {
	onBad := opt.OnBad
	if onBad == nil {
		onBad = func(e *RecordError) error { return e }
	}
	return func(e *RecordError) error {
		if err := onBad(e); err != nil {
			return err
		}
		res.Skipped++
		return nil
	}
}

func decompress(raw []byte, limit int64) ([]byte, error) {
	zr, kind, closeZ, err := decompressor(bytes.NewReader(raw), raw, limit)
	if err != nil {
		return nil, err
	}
	if kind == "" {
		return raw, nil
	}
	defer closeZ()
	out, err := readAll(zr, int64(len(raw))*4, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", kind, err)
	}
	return out, nil
}

// decompressor returns a reader of r's contents decompressed, chosen by
// the magic number at the start of head (r's first bytes, still to be
// read from r): gzip or zstd (kind names it; close releases the decoder),
// else r itself (kind "").
func decompressor(r io.Reader, head []byte, limit int64) (zr io.Reader, kind string, close func(), err error) {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		gz, err := gzip.NewReader(r)
		if err != nil {
			return nil, "", nil, fmt.Errorf("gzip: %w", err)
		}
		return gz, "gzip", func() { gz.Close() }, nil
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		zd, err := zstd.NewReader(r, zstd.WithDecoderMaxMemory(uint64(min(limit, 1<<40))), zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, "", nil, fmt.Errorf("zstd: %w", err)
		}
		return zd, "zstd", zd.Close, nil
	}
	return r, "", func() {}, nil
}

// lineAt returns the 1-based line of byte offset off.
func lineAt(data []byte, off int) int64 {
	off = min(max(off, 0), len(data))
	return int64(bytes.Count(data[:off], []byte{'\n'})) + 1
}

func parseJSON(name string, data []byte, res *Result, bad func(*RecordError) error) error {
	return parseJSONRange(name, data, len(data), 0, res, bad)
}

// parseJSONRange parses data as parseJSON does, except that JSON Lines
// records are read only while they start before limit (the bytes from
// limit on are lookahead that belongs to the next range) and that error
// offsets are reported plus base (data's offset in its file).
func parseJSONRange(name string, data []byte, limit int, base int64, res *Result, bad func(*RecordError) error) error {
	s := &jsonScanner{data: data}
	if base == 0 && bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		s.pos = 3
	}
	s.ws()
	line := func(off int) int64 {
		if base > 0 {
			return 0 // unknown: the lines before the range were not read
		}
		return lineAt(data, off)
	}
	syntax := func(idx int64, err error) error {
		var se *syntaxError
		off := s.pos
		msg := err.Error()
		if errors.As(err, &se) {
			off, msg = se.off, se.msg
		}
		return &RecordError{File: name, Index: idx, Offset: base + int64(off), Line: line(off), Err: fmt.Errorf("%w: %s", ErrSyntax, msg)}
	}
	if s.pos >= limit {
		if base > 0 || limit < len(data) {
			res.Format = JSONLines
			return nil // a range of blank lines
		}
		return fmt.Errorf("%w: %s is empty", ErrEmpty, name)
	}
	var idx int64
	add := func(start int, rec Record, fe *fieldError) error {
		if fe != nil {
			return bad(&RecordError{File: name, Index: idx, Offset: base + int64(start), Line: line(start), Field: fe.field, Err: fe})
		}
		res.Records = append(res.Records, rec)
		res.Samples = append(res.Samples, idx)
		return nil
	}
	switch data[s.pos] {
	case '[':
		res.Format = JSONArray
		s.pos++
		s.ws()
		if s.pos < len(data) && data[s.pos] == ']' {
			s.pos++
		} else {
			for {
				s.ws()
				start := s.pos
				var rec Record
				fe, err := s.object(&rec)
				if err != nil {
					return syntax(idx, err)
				}
				if err := add(start, rec, fe); err != nil {
					return err
				}
				idx++
				s.ws()
				if s.pos >= len(data) {
					return syntax(idx, s.errf(s.pos, "unexpected end of input, want ',' or ']' (is the array cut short?)"))
				}
				if data[s.pos] == ']' {
					s.pos++
					break
				}
				if data[s.pos] != ',' {
					return syntax(idx, s.errf(s.pos, "found %s after a record, want ',' or ']'", s.found()))
				}
				s.pos++
				s.ws()
				if s.pos < len(data) && data[s.pos] == ']' {
					return syntax(idx, s.errf(s.pos, "trailing comma before ']'"))
				}
			}
		}
		s.ws()
		if s.pos < len(data) {
			return syntax(idx, s.errf(s.pos, "found %s after the closing ']'", s.found()))
		}
		return nil
	case '{':
		res.Format = JSONLines
		// lastStart, lastEnd: where the last record (or bad line) began
		// and where it ended, before the blank bytes after it.
		lastStart, lastEnd := s.pos, s.pos
		for s.pos < limit {
			start := s.pos
			lastStart = start
			var rec Record
			fe, err := s.object(&rec)
			if err == nil {
				// the rest of the line must be blank
				for s.pos < len(data) && data[s.pos] != '\n' {
					if c := data[s.pos]; c != ' ' && c != '\t' && c != '\r' {
						err = s.errf(s.pos, "found %s after the record on its line (JSON Lines holds one object per line)", s.found())
						break
					}
					s.pos++
				}
			}
			if err != nil {
				e := syntax(idx, err)
				if err := bad(e.(*RecordError)); err != nil {
					return err
				}
				// resynchronize at the next line
				if nl := bytes.IndexByte(data[start:], '\n'); nl >= 0 && start+nl+1 > s.pos {
					s.pos = start + nl + 1
				} else if nl := bytes.IndexByte(data[s.pos:], '\n'); nl >= 0 {
					s.pos += nl + 1
				} else {
					s.pos = len(data)
				}
				idx++
				lastEnd = s.pos
				s.ws()
				continue
			}
			if err := add(start, rec, fe); err != nil {
				return err
			}
			idx++
			lastEnd = s.pos
			s.ws()
		}
		if lastEnd > limit && limit < len(data) {
			// The last record (or the bad line skipped) runs past the end
			// of the range: the next range would not start where a whole
			// read goes on.
			return fmt.Errorf("%w: %s: the record at byte %d (record %d of the range) crosses the range end at byte %d",
				ErrSplit, name, base+int64(lastStart), idx-1, base+int64(limit))
		}
		return nil
	}
	return fmt.Errorf("%w: %s starts with %s: want a JSON array ('['), JSON Lines ('{') or Parquet", ErrFormat, name, s.found())
}

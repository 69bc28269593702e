package dataset

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strings"

	"github.com/ferryml/ferry/internal/storage"
)

// Piece is what one part of a split input reads of one file: the whole
// file, or the byte range [Off, End) of a plain JSON Lines file that starts
// and ends between records.
type Piece struct {
	File string `json:"file"`
	Size int64  `json:"size"` // the whole file's size in bytes, as stored
	Off  int64  `json:"off"`
	End  int64  `json:"end"`
}

// Whole reports whether p is its whole file.
func (p Piece) Whole() bool { return p.Off == 0 && p.End == p.Size }

// Split cut search: a cut is looked for in windows of this size, and a
// boundary's blank run (before or after the newline) is at most maxBlank
// bytes.
const (
	splitWindow = 1 << 20
	maxBlank    = 256
)

// Share returns the pieces that part (0-based) of parts reads of files
// (in order, with their sizes in bytes as stored), and the sizes.
//
// The rule: the files, in order, are laid end to end; cut k (k = 1..parts-1)
// is wanted at byte floor(k·total/parts) of that sequence. A cut that falls
// inside a file moves:
//   - in a plain (uncompressed) JSON Lines file, forward to the first
//     record boundary at or after it: a byte just after a newline, where
//     the last non-blank byte before is '}' and the first non-blank byte
//     after is '{' (at most 256 blank bytes either side), which in valid
//     JSON can only be the gap between two top-level records; to the end
//     of the file when there is none;
//   - in any other file (JSON array, Parquet, gzip or zstd), to the nearer
//     end of the file (the end on a tie), so the file is read whole by
//     one part.
//
// Part I reads [cut I, cut I+1). Every part computes its two cuts the same
// way from the same files and sizes, so the shares tile the input without
// gaps or overlaps; a share may be empty. Cuts only move forward with k, so
// the shares are contiguous and in order.
func Share(ctx context.Context, files []string, part, parts int) ([]Piece, []int64, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, nil, fmt.Errorf("dataset: part %d of %d", part, parts)
	}
	sizes := make([]int64, len(files))
	start := make([]int64, len(files)+1)
	for i, f := range files {
		in, err := storage.Stat(ctx, f)
		if err != nil {
			return nil, nil, err
		}
		sizes[i] = in.Size
		start[i+1] = start[i] + in.Size
	}
	total := start[len(files)]
	cut := func(k int) (int64, error) {
		if k <= 0 {
			return 0, nil
		}
		if k >= parts {
			return total, nil
		}
		h, l := bits.Mul64(uint64(total), uint64(k))
		q, _ := bits.Div64(h, l, uint64(parts)) // k < parts: no overflow
		o := int64(q)
		// the file that holds byte o strictly inside
		f, _ := slices.BinarySearch(start, o)
		if f < len(start) && start[f] == o {
			return o, nil
		}
		f-- // start[f] < o < start[f+1]
		s, e := start[f], start[f+1]
		b, err := boundary(ctx, files[f], sizes[f], o-s)
		if err != nil {
			return 0, err
		}
		if b < 0 { // not splittable: the nearer end
			if o-s < e-o {
				return s, nil
			}
			return e, nil
		}
		return s + b, nil
	}
	lo, err := cut(part)
	if err != nil {
		return nil, nil, err
	}
	hi, err := cut(part + 1)
	if err != nil {
		return nil, nil, err
	}
	last := part == parts-1
	var pieces []Piece
	for i, f := range files {
		s, e := start[i], start[i+1]
		if s == e { // an empty file belongs to the part whose range holds its start
			if s >= lo && (s < hi || last) {
				pieces = append(pieces, Piece{File: f, Size: 0})
			}
			continue
		}
		a, b := max(s, lo), min(e, hi)
		if a < b {
			pieces = append(pieces, Piece{File: f, Size: sizes[i], Off: a - s, End: b - s})
		}
	}
	return pieces, sizes, nil
}

// boundary returns the first record boundary at or after off of a plain
// JSON Lines file (size: its size) or size when there is none, and -1 when
// the file is not plain JSON Lines.
func boundary(ctx context.Context, file string, size, off int64) (int64, error) {
	r, err := storage.Open(ctx, file)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	head := make([]byte, min(size, 4096))
	if _, err := r.ReadAt(head, 0); err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	if !plainJSONLines(head) {
		return -1, nil
	}
	for w := off; w < size; w += splitWindow {
		lo := max(w-maxBlank-1, 0)
		hi := min(w+splitWindow+maxBlank+1, size)
		buf := make([]byte, hi-lo)
		if _, err := r.ReadAt(buf, lo); err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%s: %w", file, err)
		}
		for b := w; b < min(w+splitWindow, size); b++ {
			if isBoundary(buf, int(b-lo)) {
				return b, nil
			}
		}
	}
	return size, nil
}

// isBoundary reports whether byte i of buf (which holds at least maxBlank+1
// bytes either side of i, or the file's start/end) starts a record of JSON
// Lines that follows another.
func isBoundary(buf []byte, i int) bool {
	if i <= 0 || i >= len(buf) || buf[i-1] != '\n' {
		return false
	}
	blank := func(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }
	j := i - 1
	for j >= 0 && i-1-j <= maxBlank && blank(buf[j]) {
		j--
	}
	if j < 0 || i-1-j > maxBlank || buf[j] != '}' {
		return false
	}
	k := i
	for k < len(buf) && k-i <= maxBlank && blank(buf[k]) {
		k++
	}
	return k < len(buf) && k-i <= maxBlank && buf[k] == '{'
}

// plainJSONLines reports whether head (a file's first bytes) is JSON Lines
// that is not compressed.
func plainJSONLines(head []byte) bool {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b,
		len(head) >= 4 && string(head[:4]) == "PAR1",
		len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		return false
	}
	head = bytes.TrimPrefix(head, []byte("\xef\xbb\xbf"))
	head = bytes.TrimLeft(head, " \t\r\n")
	return len(head) > 0 && head[0] == '{'
}

// PieceResult is what ReadPieces found in one piece.
type PieceResult struct {
	Piece
	Format  Format `json:"format"`
	Records int64  `json:"records"` // records read, skipped ones included
	Skipped int64  `json:"skipped"`
}

// ReadPieces reads the records of pieces, in order, as one input (as
// ReadFiles does for whole files): samples number the records across the
// pieces from 0. A whole piece is read as Read reads a file; a byte range
// is read as JSON Lines, with the first byte after it as lookahead, and
// ErrSplit when its last record runs past its end.
func ReadPieces(ctx context.Context, pieces []Piece, opt Options) (*Result, []PieceResult, error) {
	return readPieces(ctx, pieces, func(p Piece) (*Result, error) {
		if p.Whole() {
			return Read(ctx, p.File, opt)
		}
		return readRange(ctx, p, opt)
	})
}

// readPieces reads pieces in order with read and joins what it found as one
// input: samples number the records across the pieces from 0, and the
// format is the pieces' formats joined with "+" (each named once). It also
// returns each piece's counts.
func readPieces[R any](ctx context.Context, pieces []Piece, read func(Piece) (*Results[R], error)) (*Results[R], []PieceResult, error) {
	all := &Results[R]{}
	var formats []string
	per := make([]PieceResult, len(pieces))
	for i, p := range pieces {
		if err := ctx.Err(); err != nil {
			return nil, nil, context.Cause(ctx)
		}
		res, err := read(p)
		if err != nil {
			return nil, nil, err
		}
		base := int64(len(all.Records)) + all.Skipped
		all.Records = append(all.Records, res.Records...)
		all.Samples = appendShifted(all.Samples, res.Samples, base)
		all.Skipped += res.Skipped
		all.Bytes += res.Bytes
		all.RawBytes += res.RawBytes
		per[i] = PieceResult{Piece: p, Format: res.Format, Records: int64(len(res.Records)) + res.Skipped, Skipped: res.Skipped}
		if !slices.Contains(formats, string(res.Format)) {
			formats = append(formats, string(res.Format))
		}
	}
	all.Format = Format(strings.Join(formats, "+"))
	return all, per, nil
}

// appendShifted appends base+s for each s of samples to dst.
func appendShifted(dst, samples []int64, base int64) []int64 {
	for _, s := range samples {
		dst = append(dst, base+s)
	}
	return dst
}

// readPieceBytes reads the byte range p of a file (and, with lookahead,
// the byte after it when there is one), after checking the range against
// opt.MaxBytes and the file's size against the one the split was planned
// for.
func readPieceBytes(ctx context.Context, p Piece, opt Options, lookahead bool) ([]byte, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 30
	}
	if p.Off < 0 || p.End > p.Size || p.Off >= p.End {
		return nil, fmt.Errorf("%s: bad byte range [%d, %d) of %d bytes", p.File, p.Off, p.End, p.Size)
	}
	if p.End-p.Off > opt.MaxBytes {
		return nil, fmt.Errorf("%s: %w: range of %d bytes, at most %d", p.File, ErrLimit, p.End-p.Off, opt.MaxBytes)
	}
	r, err := storage.Open(ctx, p.File)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if r.Size() != p.Size {
		return nil, fmt.Errorf("%s: %d bytes, the split was planned for %d", p.File, r.Size(), p.Size)
	}
	end := p.End
	if lookahead && end < p.Size {
		end++ // one byte of lookahead: the next range's first record
	}
	data := make([]byte, end-p.Off)
	if _, err := r.ReadAt(data, p.Off); err != nil && !(errors.Is(err, io.EOF) && p.End == p.Size) {
		return nil, fmt.Errorf("%s: %w", p.File, err)
	}
	return data, nil
}

// readRange reads the JSON Lines records of the byte range p.
func readRange(ctx context.Context, p Piece, opt Options) (*Result, error) {
	data, err := readPieceBytes(ctx, p, opt, true)
	if err != nil {
		return nil, err
	}
	res := &Result{Bytes: p.End - p.Off, RawBytes: p.End - p.Off}
	bad := res.badRecords(opt)
	if err := parseJSONRange(p.File, data, int(p.End-p.Off), p.Off, res, bad); err != nil {
		return nil, err
	}
	if res.Format != JSONLines {
		return nil, fmt.Errorf("%w: %s: byte range [%d, %d) is not JSON Lines", ErrFormat, p.File, p.Off, p.End)
	}
	return res, nil
}

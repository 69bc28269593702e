package prep

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/tokenize"
)

// IDs is the ids-out contract of dataprep tokenize: JSONL {"text": ...}
// lines (or Alpaca records, formatted with the encoder's template) in, one
// {"ids": [...]} line per text out, in input order, as HF's reference tool
// bench/anchors/hf_tokenize.py writes them, so that the two can be diffed.
type IDs struct {
	Enc     *encode.Encoder // the encoder: special tokens, truncation, padding
	Threads int             // tokenizer goroutines (>= 1)
	Name    string          // the input's name in errors
	Batch   int             // JSONL lines read and encoded per batch (>= 1)
	Alpaca  bool            // the input is Alpaca records (JSON array or JSON Lines)
}

// IDsStats is what an IDs pass read and did.
type IDsStats struct {
	Lines, Bytes, Tokens int64
	Read                 time.Duration // reading and formatting Alpaca records
	Encode               time.Duration // in the tokenizer, summed over the batches (wall)
}

// lineChunk is the number of lines a goroutine decodes or formats at a time.
const lineChunk = 32

// Write reads the texts from in and writes their ids to w (nil: discard,
// only the stats are kept).
func (p *IDs) Write(ctx context.Context, in io.Reader, w io.Writer) (*IDsStats, error) {
	var bw *bufio.Writer
	if w != nil {
		bw = bufio.NewWriterSize(w, 1<<20)
	}
	st := &idsPass{IDs: p}
	t1 := time.Now()
	if p.Alpaca {
		data, err := io.ReadAll(in)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		texts, err := p.AlpacaTexts(data)
		if err != nil {
			return nil, err
		}
		st.read = time.Since(t1)
		if err := st.run(ctx, texts, nil, 1, bw); err != nil {
			return nil, err
		}
	} else {
		br := bufio.NewReaderSize(in, 1<<20)
		lineNo := 1
		for {
			lines, n, eof, err := readLineBatch(br, p.Batch, 8<<20)
			if err != nil {
				return nil, fmt.Errorf("%s: line %d: %w", p.Name, lineNo+n, err)
			}
			if len(lines) > 0 {
				if err := st.run(ctx, nil, lines, lineNo, bw); err != nil {
					return nil, err
				}
			}
			lineNo += n
			if eof {
				break
			}
		}
	}
	if bw != nil {
		if err := bw.Flush(); err != nil {
			return nil, fmt.Errorf("writing output: %w", err)
		}
	}
	return &IDsStats{Lines: st.lines, Bytes: st.bytes, Tokens: st.tokens, Read: st.read, Encode: time.Duration(st.encode.Load())}, nil
}

// idsPass is the state of one Write.
type idsPass struct {
	*IDs
	read                 time.Duration
	lines, bytes, tokens int64
	encode               atomic.Int64 // nanoseconds in encode
	arenas               encode.Arenas
}

// readLineBatch reads up to maxLines lines or about maxBytes bytes. Blank lines
// are kept (and rejected later, with their number); the last line may lack
// its newline. n is the number of lines consumed.
func readLineBatch(br *bufio.Reader, maxLines, maxBytes int) (lines [][]byte, n int, eof bool, err error) {
	size := 0
	for len(lines) < maxLines && size < maxBytes {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			line = bytes.TrimSuffix(line, []byte("\n"))
			line = bytes.TrimSuffix(line, []byte("\r"))
			lines = append(lines, line)
			size += len(line)
			n++
		}
		if err == io.EOF {
			return lines, n, true, nil
		}
		if err != nil {
			return lines, n, false, err
		}
	}
	return lines, n, false, nil
}

// run encodes texts (or JSONL lines to decode first; firstLine numbers
// them) and writes the ids to w (nil: discard). Decoding the JSON, encoding
// and formatting the output are three parallel phases, so that the encode
// time is the tokenizer's alone, as hf_tokenize.py times encode_batch.
func (p *idsPass) run(ctx context.Context, texts []string, lines [][]byte, firstLine int, w *bufio.Writer) error {
	n := len(texts)
	if lines != nil {
		n = len(lines)
		var err error
		if texts, err = p.DecodeLines(ctx, lines, firstLine); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The ids of the batch before are written (or counted) and dropped:
	// their memory takes this batch's.
	p.arenas.Reuse()
	start := time.Now()
	ids, err := p.Enc.EncodeTexts(ctx, texts, p.Threads, &p.arenas)
	p.encode.Add(int64(time.Since(start)))
	if err != nil {
		return err
	}
	for i := range texts {
		p.lines++
		p.bytes += int64(len(texts[i]))
		p.tokens += int64(len(ids[i]))
	}
	if w == nil {
		return nil
	}
	out := make([][]byte, n)
	if err := encode.Parallel(ctx, n, p.Threads, lineChunk, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			out[i] = AppendIDsLine(nil, ids[i])
		}
		return nil
	}); err != nil {
		return err
	}
	for _, b := range out {
		if _, err := w.Write(b); err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
	}
	return nil
}

// DecodeLines decodes JSONL {"text": ...} lines in parallel; firstLine is
// the first one's number in errors.
func (p *IDs) DecodeLines(ctx context.Context, lines [][]byte, firstLine int) ([]string, error) {
	texts := make([]string, len(lines))
	errs := make([]error, len(lines))
	// Errors are kept by line, so that the first bad line is reported
	// whatever the number of goroutines.
	err := encode.Parallel(ctx, len(lines), p.Threads, lineChunk, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			var rec struct {
				Text *string `json:"text"`
			}
			line := lines[i]
			if !utf8.Valid(line) { // replace as Node's UTF-8 decoder does, not per byte as encoding/json
				line = []byte(tokenize.ValidUTF8(string(line)))
			}
			if err := json.Unmarshal(line, &rec); err != nil {
				errs[i] = fmt.Errorf("%s: line %d: %v", p.Name, firstLine+i, err)
			} else if rec.Text == nil {
				errs[i] = fmt.Errorf("%s: line %d: no \"text\" string", p.Name, firstLine+i)
			} else {
				texts[i] = *rec.Text
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return texts, nil
}

// AlpacaTexts reads Alpaca records (a JSON array or JSON Lines, as
// internal/dataset reads them for a run) and formats them with the
// encoder's template. Invalid UTF-8 is replaced first, as the reference
// tool's decoder does; an input without records gives no texts.
func (p *IDs) AlpacaTexts(data []byte) ([]string, error) {
	if !utf8.Valid(data) {
		data = []byte(tokenize.ValidUTF8(string(data)))
	}
	res, err := dataset.Parse(p.Name, data, dataset.Options{})
	if errors.Is(err, dataset.ErrEmpty) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return p.Enc.Texts(res.Records), nil
}

// AppendIDsLine appends {"ids":[...]}\n as JSON.stringify writes it.
func AppendIDsLine(b []byte, ids []int32) []byte {
	b = append(b, `{"ids":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(id), 10)
	}
	return append(b, "]}\n"...)
}

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/dataset"
)

// tokenizerSpec is one of the seeds' tokenizers, with the EOS of the base
// model the seed fine-tunes (the fixture tokenizer_config.json files are
// the Instruct ones, so the EOS is explicit).
type tokenizerSpec struct {
	name string // directory under testdata/tokenizers
	eos  string
}

var seedTokenizers = []tokenizerSpec{
	{"qwen2.5", "<|endoftext|>"},    // Qwen2.5-3B (Ray Train seed): eos = pad
	{"llama3.1", "<|end_of_text|>"}, // Llama-3.1-8B (torchrun FSDP seed): no pad, pad = eos
}

// familyTokenizers are the other tokenizer families the tokenizer jobs
// measure (SentencePiece-style, then byte-level with other Split patterns),
// each with its EOS (from its tokenizer_config.json where there is one).
var familyTokenizers = []tokenizerSpec{
	{"tinyllama", "</s>"},
	{"llama2", "</s>"},
	{"mistral-v0.3", "</s>"},
	{"phi3", "<|endoftext|>"},
	{"deepseek-r1", "<｜end▁of▁sentence｜>"},
	{"phi4", "<|im_end|>"},
	{"olmo2", "<|endoftext|>"},
	{"smollm2", "<|endoftext|>"},
	{"mistral-nemo", "</s>"},
	{"gpt-oss", "<|return|>"},
}

// openZstd returns the decompressed contents of a .zst file.
func readZstd(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer d.Close()
	b, err := io.ReadAll(d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// tokenizerDir decompresses a fixture tokenizer into the work dir (HF
// tokenizers reads only plain tokenizer.json) and returns the directory;
// both sides load the same uncompressed file.
func (e *env) tokenizerDir(name string) (string, error) {
	src := filepath.Join("testdata/tokenizers", name)
	dst := filepath.Join(e.c.work, "tok", name)
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	b, err := readZstd(filepath.Join(src, "tokenizer.json.zst"))
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dst, "tokenizer.json"), b, 0o644); err != nil {
		return "", err
	}
	if cfg, err := os.ReadFile(filepath.Join(src, "tokenizer_config.json")); err == nil {
		if err := os.WriteFile(filepath.Join(dst, "tokenizer_config.json"), cfg, 0o644); err != nil {
			return "", err
		}
	}
	return dst, nil
}

// record is one Alpaca record.
type record struct {
	Instruction string `json:"instruction"`
	Input       string `json:"input"`
	Output      string `json:"output"`
}

// alpaca is the seeds' prompt (both seed workloads use this template).
var alpaca = dataset.Alpaca()

// format formats r with the seeds' prompt.
func (r record) format(eos string) string {
	b, _ := alpaca.Append(nil, &dataset.Record{Instruction: r.Instruction, Input: r.Input, Output: r.Output}, "", eos)
	return string(b)
}

// parseAlpaca reads a JSON array or JSON Lines of Alpaca records.
func parseAlpaca(name string, b []byte) ([]record, error) {
	b = bytes.TrimSpace(b)
	var recs []record
	if bytes.HasPrefix(b, []byte("[")) {
		if err := json.Unmarshal(b, &recs); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, 64<<20)
		for n := 1; sc.Scan(); n++ {
			line := bytes.TrimSpace(sc.Bytes())
			if len(line) == 0 {
				continue
			}
			var r record
			if err := json.Unmarshal(line, &r); err != nil {
				return nil, fmt.Errorf("%s: line %d: %w", name, n, err)
			}
			recs = append(recs, r)
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("%s: no records", name)
	}
	return recs, nil
}

// alpacaSource is the Alpaca data the tokenizer and dataprep jobs use.
type alpacaSource struct {
	recs []record
	path string // a file dataprep can read as is ("" = write one)
	desc string
}

const demoAlpaca = "testdata/alpaca/alpaca_en_demo.json.zst"

func (e *env) alpaca() (*alpacaSource, error) {
	if e.c.alpaca != "" {
		b, err := os.ReadFile(e.c.alpaca)
		if err != nil {
			return nil, err
		}
		recs, err := parseAlpaca(e.c.alpaca, b)
		if err != nil {
			return nil, err
		}
		return &alpacaSource{recs: recs, path: e.c.alpaca,
			desc: fmt.Sprintf("%s (%d records, %.1f MB)", e.c.alpaca, len(recs), float64(len(b))/1e6)}, nil
	}
	b, err := readZstd(demoAlpaca)
	if err != nil {
		return nil, err
	}
	recs, err := parseAlpaca(demoAlpaca, b)
	if err != nil {
		return nil, err
	}
	return &alpacaSource{recs: recs, desc: fmt.Sprintf("%s (%d records, LLaMA-Factory's Alpaca sample)", demoAlpaca, len(recs))}, nil
}

// writeTexts writes the formatted prompts as JSONL {"text": ...}, cycling
// through the records until at least minBytes of text are written (and
// every record at least once). It returns the path, lines and text bytes.
func (e *env) writeTexts(name string, recs []record, eos string, minBytes int64) (string, int, int64, error) {
	path := filepath.Join(e.c.work, "in", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", 0, 0, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	var n int
	var textBytes int64
	for i := 0; i < len(recs) || textBytes < minBytes; i++ {
		t := recs[i%len(recs)].format(eos)
		if err := enc.Encode(struct {
			Text string `json:"text"`
		}{t}); err != nil {
			return "", 0, 0, err
		}
		n++
		textBytes += int64(len(t))
	}
	return path, n, textBytes, os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeRecords writes n records (cycling) as a JSON array, for dataprep.
func (e *env) writeRecords(name string, recs []record, n int) (string, error) {
	path := filepath.Join(e.c.work, "in", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	out := make([]record, n)
	for i := range out {
		out[i] = recs[i%len(recs)]
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return "", err
	}
	return path, os.WriteFile(path, buf.Bytes(), 0o644)
}

// corpus writes the hard tokenizer corpus (JSONL {"text"}), whole, or its
// first lines up to maxBytes when maxBytes > 0. It returns the path, lines
// and text bytes.
func (e *env) corpus(maxBytes int64) (string, int, int64, error) {
	b, err := readZstd("testdata/tokenizers/corpus-dev.jsonl.zst")
	if err != nil {
		return "", 0, 0, err
	}
	name := "corpus-dev.jsonl"
	if maxBytes > 0 {
		name = fmt.Sprintf("corpus-dev-%dk.jsonl", maxBytes>>10)
	}
	path := filepath.Join(e.c.work, "in", name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", 0, 0, err
	}
	var out bytes.Buffer
	var lines int
	var textBytes int64
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i+1], b[i+1:]
		} else {
			b = nil
		}
		var v struct{ Text *string }
		if err := json.Unmarshal(line, &v); err != nil || v.Text == nil {
			return "", 0, 0, fmt.Errorf("corpus-dev.jsonl line %d: not a {\"text\"} object", lines+1)
		}
		if maxBytes > 0 && lines > 0 && textBytes+int64(len(*v.Text)) > maxBytes {
			break
		}
		out.Write(line)
		lines++
		textBytes += int64(len(*v.Text))
	}
	return path, lines, textBytes, os.WriteFile(path, out.Bytes(), 0o644)
}

// compareIDs checks that two JSONL files of {"ids": [...]} hold the same
// IDs line by line; anchor names the second file's tokenizer in the message.
func compareIDs(ferryOut, anchorOut, anchor string) (string, error) {
	fa, err := os.Open(ferryOut)
	if err != nil {
		return "", err
	}
	defer fa.Close()
	fb, err := os.Open(anchorOut)
	if err != nil {
		return "", err
	}
	defer fb.Close()
	sa, sb := bufio.NewScanner(fa), bufio.NewScanner(fb)
	sa.Buffer(nil, 256<<20)
	sb.Buffer(nil, 256<<20)
	var n, tokens int
	for {
		okA, okB := nextIDs(sa), nextIDs(sb)
		if !okA || !okB {
			if okA != okB {
				return fmt.Sprintf("line counts differ after %d lines", n), errors.New("outputs have different line counts")
			}
			break
		}
		n++
		a, errA := parseIDs(sa.Bytes())
		b, errB := parseIDs(sb.Bytes())
		if errA != nil {
			return "", fmt.Errorf("%s line %d: %w", ferryOut, n, errA)
		}
		if errB != nil {
			return "", fmt.Errorf("%s line %d: %w", anchorOut, n, errB)
		}
		if d := firstDiff(a, b); d >= 0 {
			msg := fmt.Sprintf("line %d differs at token %d: ferry %s, %s %s", n, d, window(a, d), anchor, window(b, d))
			return msg, errors.New(msg)
		}
		tokens += len(a)
	}
	for _, s := range []*bufio.Scanner{sa, sb} {
		if err := s.Err(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("token IDs identical to %s on all %d lines (%d tokens)", anchor, n, tokens), nil
}

// nextIDs advances to the next {"ids"...} line, skipping a bench line.
func nextIDs(s *bufio.Scanner) bool {
	for s.Scan() {
		line := bytes.TrimSpace(s.Bytes())
		if len(line) == 0 || bytes.HasPrefix(line, []byte(`{"bench"`)) {
			continue
		}
		return true
	}
	return false
}

func parseIDs(line []byte) ([]int64, error) {
	var v struct{ IDs *[]int64 }
	if err := json.Unmarshal(line, &v); err != nil {
		return nil, err
	}
	if v.IDs == nil {
		return nil, errors.New(`no "ids" array`)
	}
	return *v.IDs, nil
}

func firstDiff(a, b []int64) int {
	for i := 0; i < min(len(a), len(b)); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

func window(ids []int64, at int) string {
	lo, hi := max(at-2, 0), min(at+3, len(ids))
	parts := make([]string, 0, hi-lo+2)
	if lo > 0 {
		parts = append(parts, "…")
	}
	for _, x := range ids[lo:hi] {
		parts = append(parts, fmt.Sprint(x))
	}
	if hi < len(ids) {
		parts = append(parts, "…")
	}
	return "[" + strings.Join(parts, " ") + "]"
}

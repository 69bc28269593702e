package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/invariants"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/internal/testutil/tokgolden"
)

var tokDir = filepath.Join("..", "..", "testdata", "tokenizers")

// firstLines returns the first n lines of a compressed JSONL fixture.
func firstLines(t *testing.T, name string, n int) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(tokDir, name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader
	if strings.HasSuffix(name, ".zst") {
		d, err := zstd.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r = d
	} else {
		g, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		r = g
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 16<<20)
	var out []string
	for len(out) < n && sc.Scan() {
		out = append(out, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestRunTokenizeMatchesHF(t *testing.T) {
	const n = 400
	in := strings.Join(firstLines(t, "corpus-dev.jsonl.zst", n), "\n") + "\n"
	for _, tc := range []struct {
		model   string
		special bool
		args    []string
	}{
		{"llama3.1", true, nil},
		{"llama3.1", false, []string{"--no-special"}},
		{"qwen2.5", true, []string{"--threads", "1"}},
	} {
		if invariants.Race && tc.model != "qwen2.5" {
			continue
		}
		t.Run(tc.model+strings.Join(tc.args, ""), func(t *testing.T) {
			golden, err := tokgolden.IDs(tokDir, tc.model, tc.special)
			if err != nil {
				t.Fatal(err)
			}
			var w []byte
			for _, ids := range golden[:n] {
				w = prep.AppendIDsLine(w, ids)
			}
			want := string(w)
			var out, errb bytes.Buffer
			args := append([]string{"--tokenizer", filepath.Join(tokDir, tc.model)}, tc.args...)
			if err := runTokenize(context.Background(), args, strings.NewReader(in), &out, &errb); err != nil {
				t.Fatalf("%v\n%s", err, errb.String())
			}
			if out.String() != want {
				t.Errorf("output differs from HF tokenizers (got %d bytes, want %d)", out.Len(), len(want))
			}
		})
	}
}

// TestRunTokenizeFile: ids to --out from a file with CRLF, an empty text and
// no final newline (the {"bench"} line of the old --bench-line is bench/tokenize
// ids's, tested there).
func TestRunTokenizeFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte("{\"text\":\"Hello world\"}\r\n{\"text\":\"\"}\n{\"text\":\"a\\u00e9\"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(dir, "out.jsonl")
	var stdout, stderr bytes.Buffer
	args := []string{"--tokenizer", filepath.Join(tokDir, "llama3.1"), "--out", outPath, in}
	if err := runTokenize(context.Background(), args, nil, &stdout, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	got, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	// Hello=9906, " world"=1917, "a"=64, "é"=978 (HF tokenizers 0.23.2).
	want := "{\"ids\":[128000,9906,1917]}\n{\"ids\":[128000]}\n{\"ids\":[128000,64,978]}\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing (the ids went to --out)", stdout.String())
	}
}

func TestRunTokenizeAlpacaPad(t *testing.T) {
	in := `[{"instruction": "Say hi", "input": "", "output": "hi"}, {"instruction": "Add", "input": "1 2", "output": "3"}]`
	var out, errb bytes.Buffer
	args := []string{"--tokenizer", filepath.Join(tokDir, "qwen2.5"), "--alpaca", "--eos", "<|im_end|>", "--max-length", "12", "--pad"}
	if err := runTokenize(context.Background(), args, strings.NewReader(in), &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	for i, l := range lines {
		var v struct{ IDs []int32 }
		if err := json.Unmarshal([]byte(l), &v); err != nil {
			t.Fatal(err)
		}
		if len(v.IDs) != 12 {
			t.Errorf("line %d: %d ids, want 12", i, len(v.IDs))
		}
	}
	// "### Instruction:\nSay hi\n\n### Response:\nhi<|im_end|>" is 13 tokens with
	// Qwen; the first is "###" = 14374.
	var v struct{ IDs []int32 }
	json.Unmarshal([]byte(lines[0]), &v)
	if v.IDs[0] != 14374 {
		t.Errorf("first id %d, want 14374", v.IDs[0])
	}
}

func TestRunTokenizeErrors(t *testing.T) {
	// A small tokenizer: these cases are about the command, not the model.
	qwen := filepath.Join("..", "..", "tokenize", "testdata", "synthetic", "gpt2")
	for _, tc := range []struct {
		name      string
		args      []string
		in        string
		wantUsage bool
		wantMsg   string
	}{
		{"no tokenizer", nil, "", true, "--tokenizer is required"},
		{"unknown flag", []string{"--tokenizer", qwen, "--bogus"}, "", true, "bogus"},
		{"two inputs", []string{"--tokenizer", qwen, "a", "b"}, "", true, "more than one"},
		{"pad without length", []string{"--tokenizer", qwen, "--pad"}, "", true, "--pad needs --max-length"},
		{"alpaca without eos", []string{"--tokenizer", qwen, "--alpaca"}, "", true, "--alpaca needs --eos"},
		{"missing tokenizer", []string{"--tokenizer", "/nonexistent"}, "", false, "nonexistent"},
		{"bad json", []string{"--tokenizer", qwen}, "{\"text\":\"a\"}\n{\"text\":\n", false, "stdin: line 2"},
		{"no text", []string{"--tokenizer", qwen}, "{\"text\":\"a\"}\n{\"txt\":\"b\"}\n", false, "line 2: no \"text\""},
		{"blank line", []string{"--tokenizer", qwen}, "{\"text\":\"a\"}\n\n{\"text\":\"b\"}\n", false, "line 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runTokenize(context.Background(), tc.args, strings.NewReader(tc.in), &out, &errb)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, cli.ErrUsage) != tc.wantUsage {
				t.Errorf("usage error = %v, want %v (%v)", !tc.wantUsage, tc.wantUsage, err)
			}
			if !strings.Contains(err.Error(), tc.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tc.wantMsg)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// TestRunIDs: the ids of a file go to -out, and stdout gets one {"bench"}
// line counting its lines, bytes and tokens (what dataprep tokenize
// --bench-line printed before it moved here).
func TestRunIDs(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte("{\"text\":\"Hello world\"}\r\n{\"text\":\"\"}\n{\"text\":\"a\\u00e9\"}"), 0o644); err != nil {
		t.Fatal(err)
	}
	outPath := filepath.Join(dir, "out.jsonl")
	var stdout, stderr bytes.Buffer
	args := []string{"-tokenizer", filepath.Join("..", "..", "testdata", "tokenizers", "llama3.1"), "-out", outPath, in}
	if err := runIDs(context.Background(), args, nil, &stdout, &stderr); err != nil {
		t.Fatal(err, stderr.String())
	}
	got, err := os.ReadFile(outPath)
	if err != nil {
		t.Fatal(err)
	}
	// Hello=9906, " world"=1917, "a"=64, "é"=978, as HF tokenizers encodes them.
	want := "{\"ids\":[128000,9906,1917]}\n{\"ids\":[128000]}\n{\"ids\":[128000,64,978]}\n"
	if string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var bl struct {
		Bench struct {
			Lines  int64   `json:"lines"`
			Bytes  int64   `json:"bytes"`
			Tokens int64   `json:"tokens"`
			MBs    float64 `json:"encode_mb_per_s"`
		} `json:"bench"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &bl); err != nil {
		t.Fatalf("bench line %q: %v", stdout.String(), err)
	}
	if bl.Bench.Lines != 3 || bl.Bench.Bytes != 14 || bl.Bench.Tokens != 7 || bl.Bench.MBs <= 0 {
		t.Errorf("bench line %+v, want 3 lines, 14 bytes, 7 tokens", bl.Bench)
	}
}

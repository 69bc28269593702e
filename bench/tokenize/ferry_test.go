package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/tokenize"
)

// TestRunFerry: the ferry-only timing (moved here from dataprep tokenize
// --bench) prints hf_tokenize.py --bench's JSON.
func TestRunFerry(t *testing.T) {
	in := "{\"text\":\"Hello world\"}\n{\"text\":\"a\\u00e9\"}\n"
	var out, errb bytes.Buffer
	args := []string{"-tokenizer", filepath.Join("..", "..", "tokenize", "testdata", "synthetic", "gpt2"), "-runs", "3", "-threads", "2"}
	if err := runFerry(context.Background(), args, strings.NewReader(in), &out, &errb); err != nil {
		t.Fatal(err, errb.String())
	}
	var v struct {
		Lines  int       `json:"lines"`
		Bytes  int64     `json:"bytes"`
		Tokens int64     `json:"tokens"`
		Runs   []float64 `json:"runs_s"`
		MBs    float64   `json:"MB_per_s"`
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil {
		t.Fatalf("%q: %v", out.String(), err)
	}
	tok, err := tokenize.Load(args[1])
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(tok.Encode("Hello world", true)) + len(tok.Encode("a\u00e9", true)))
	if v.Lines != 2 || v.Bytes != 14 || v.Tokens != want || len(v.Runs) != 3 || v.MBs <= 0 {
		t.Errorf("bench result %+v, want 2 lines, 14 bytes, %d tokens, 3 runs", v, want)
	}
}

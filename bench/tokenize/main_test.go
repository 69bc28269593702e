package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/procstat"
)

func TestInputs(t *testing.T) {
	t.Chdir("../..") // the driver runs from the repository root
	texts, err := alpacaTexts("<|eos|>", 1)
	if err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, s := range texts {
		size += len(s)
		if !strings.HasPrefix(s, "### Instruction:\n") || !strings.Contains(s, "\n\n### Response:\n") || !strings.HasSuffix(s, "<|eos|>") {
			t.Fatalf("not a seed-formatted prompt: %q", s)
		}
	}
	if size < 1e6 || size > 2e6 {
		t.Errorf("alpaca input is %d bytes, want about 1 MB", size)
	}
	all, err := corpusTexts(false)
	if err != nil {
		t.Fatal(err)
	}
	quarter, err := corpusTexts(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 7439 || len(quarter) != 1860 {
		t.Errorf("corpus: %d lines, quick %d; want 7439 and 1860", len(all), len(quarter))
	}
	dir, err := unpackTokenizer("llama3.1", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir + "/tokenizer.json"); err != nil || fi.Size() != 9085657 {
		t.Errorf("unpacked tokenizer.json: %v, %v", fi, err)
	}
	if m := procstat.Median([]float64{3, 1, 2, 10}); m != 2 {
		t.Errorf("median = %v, want 2 (the lower middle)", m)
	}
}

// TestLoadCommand: `load` prints a bench line that timedJSON reads, with the
// compiled cache where FERRY_TOKENIZER_CACHE says (written on the first run).
func TestLoadCommand(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("FERRY_TOKENIZER_CACHE", cache)
	for range 2 {
		var out, errOut strings.Builder
		if err := runLoad([]string{"-tokenizer", "../../testdata/tokenizers/qwen2.5"}, &out, &errOut); err != nil {
			t.Fatal(err, errOut.String())
		}
		var v struct {
			Bench map[string]float64 `json:"bench"`
		}
		if err := json.Unmarshal([]byte(out.String()), &v); err != nil || v.Bench["load_s"] <= 0 || v.Bench["load_cpu_s"] < 0 {
			t.Fatalf("load printed %q (%v)", out.String(), err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "*.ferrytok")); len(m) != 1 {
		t.Errorf("compiled cache holds %q, want one file", m)
	}
	if err := runLoad(nil, io.Discard, io.Discard); err == nil {
		t.Error("load without -tokenizer: no error")
	}
}

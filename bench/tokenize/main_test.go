package main

import (
	"os"
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

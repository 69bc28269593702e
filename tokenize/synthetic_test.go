package tokenize

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestSyntheticExact compares with HF tokenizers 0.23.2 on tokenizers that
// use the GPT-2 regex, add_prefix_space, NFKC, the regexp2 fallback, BOS+EOS
// templates and added tokens with lstrip/rstrip/single_word/normalized.
func TestSyntheticExact(t *testing.T) {
	dir := filepath.Join("testdata", "synthetic")
	var texts []string
	for _, r := range readJSONL[struct {
		Text string `json:"text"`
	}](t, filepath.Join(dir, "input.jsonl.zst")) {
		texts = append(texts, r.Text)
	}
	for _, model := range []string{"gpt2", "regex"} {
		tok, err := Load(filepath.Join(dir, model))
		if err != nil {
			t.Fatal(err)
		}
		for _, special := range []bool{true, false} {
			name := "ids-special.jsonl.zst"
			if !special {
				name = "ids-nospecial.jsonl.zst"
			}
			t.Run(fmt.Sprintf("%s/special=%v", model, special), func(t *testing.T) {
				want := readJSONL[struct {
					IDs []int32 `json:"ids"`
				}](t, filepath.Join(dir, model, name))
				if len(want) != len(texts) {
					t.Fatalf("%d golden lines, %d texts", len(want), len(texts))
				}
				bad := 0
				for i, x := range texts {
					if i < 1200 && i%corpusStep(1, 8) != 0 { // the probes after line 1200 always run
						continue
					}
					got := tok.Encode(x, special)
					if !slices.Equal(got, want[i].IDs) {
						bad++
						if bad <= 8 {
							t.Errorf("line %d %q:\n got %v\nwant %v", i+1, trunc(x), trunc32(got), trunc32(want[i].IDs))
						}
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d lines differ", bad, len(texts))
				}
			})
		}
	}
}

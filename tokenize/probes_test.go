package tokenize

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
)

// TestProbesExact compares with HF tokenizers on 9,000 random probe strings.
func TestProbesExact(t *testing.T) {
	dir := filepath.Join("testdata", "probes")
	var texts []string
	for _, r := range readJSONL[struct {
		Text string `json:"text"`
	}](t, filepath.Join(dir, "input.jsonl.zst")) {
		texts = append(texts, r.Text)
	}
	for _, model := range models {
		for _, special := range []bool{true, false} {
			name := model + "-ids-special.jsonl.zst"
			if !special {
				name = model + "-ids-nospecial.jsonl.zst"
			}
			t.Run(fmt.Sprintf("%s/special=%v", model, special), func(t *testing.T) {
				t.Parallel()
				tok := loadModel(t, model)
				want := readJSONL[struct {
					IDs []int32 `json:"ids"`
				}](t, filepath.Join(dir, name))
				if len(want) != len(texts) {
					t.Fatalf("%d golden lines, %d texts", len(want), len(texts))
				}
				bad := 0
				for i := 0; i < len(texts); i += corpusStep(1, 8) {
					if got := tok.Encode(texts[i], special); !slices.Equal(got, want[i].IDs) {
						if bad++; bad <= 5 {
							t.Errorf("line %d %+q:\n got %v\nwant %v", i+1, trunc(texts[i]), got, want[i].IDs)
						}
					}
				}
				if bad > 0 {
					t.Errorf("%d lines differ", bad)
				}
			})
		}
	}
}

package tokenize

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestCorpusExact checks every line of corpus-dev against the ids of HF
// tokenizers, for every tokenizer family, with and without special tokens.
func TestCorpusExact(t *testing.T) {
	texts := corpusTexts(t)
	for _, model := range families {
		for _, special := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/special=%v", model, special), func(t *testing.T) {
				t.Parallel()
				tok := loadModel(t, model)
				want := goldenIDs(t, model, special)
				if len(want) != len(texts) {
					t.Fatalf("%d golden lines for %d corpus lines", len(want), len(texts))
				}
				var idx []int
				var sample []string
				for i := 0; i < len(texts); i += corpusStep(1, 16) {
					idx = append(idx, i)
					sample = append(sample, texts[i])
				}
				got := tok.EncodeBatch(sample, special, 0)
				bad := 0
				for k, i := range idx {
					if !slices.Equal(got[k], want[i]) {
						bad++
						if bad <= 5 {
							t.Errorf("line %d %q:\n got %v\nwant %v", i+1, trunc(texts[i]), trunc32(got[k]), trunc32(want[i]))
						}
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d lines differ", bad, len(idx))
				}
			})
		}
	}
}

// TestCorpusRoundTrip checks Decode(Encode(x)) == x (NFC(x) for Qwen).
func TestCorpusRoundTrip(t *testing.T) {
	texts := corpusTexts(t)
	for _, model := range models {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			tok := loadModel(t, model)
			bad := 0
			for i := 0; i < len(texts); i += corpusStep(1, 16) {
				x := texts[i]
				want := x
				if len(tok.norms) > 0 {
					want = tok.normalize(x)
					if nfc := norm.NFC.String(x); nfc != want && !strings.Contains(x, "\U00011935") {
						t.Errorf("line %d: normalize differs from NFC", i+1)
					}
				}
				got := tok.Decode(tok.Encode(x, false), false)
				if got != want {
					bad++
					if bad <= 5 {
						t.Errorf("line %d: Decode(Encode(x)) = %q, want %q", i+1, trunc(got), trunc(want))
					}
				}
			}
			if bad > 0 {
				t.Errorf("%d of %d lines differ", bad, len(texts))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

func trunc32(s []int32) []int32 {
	if len(s) > 60 {
		return s[:60]
	}
	return s
}

// decodeGoldens reads corpus-dev.<model>.decode.jsonl.zst: what HF's decode
// gives for the lines where it is not the line itself, keyed by line (from 1)
// and add_special_tokens.
func decodeGoldens(t testing.TB, model string) map[[2]int]string {
	t.Helper()
	out := map[[2]int]string{}
	for _, r := range readJSONL[struct {
		Line    int    `json:"line"`
		Special bool   `json:"special"`
		Text    string `json:"text"`
	}](t, filepath.Join(fixtures, "corpus-dev."+model+".decode.jsonl.zst")) {
		k := 0
		if r.Special {
			k = 1
		}
		out[[2]int{r.Line, k}] = r.Text
	}
	return out
}

// TestCorpusDecode checks Decode against HF's decode on every corpus line:
// decode(ids, skip_special_tokens=false) of the ids without special tokens,
// and decode(ids, skip_special_tokens=true) of the ids with them.
func TestCorpusDecode(t *testing.T) {
	texts := corpusTexts(t)
	for _, model := range families[len(models):] {
		t.Run(model, func(t *testing.T) {
			t.Parallel()
			tok := loadModel(t, model)
			want := decodeGoldens(t, model)
			for k, special := range []bool{false, true} {
				ids := goldenIDs(t, model, special)
				bad, differ := 0, 0
				for i := 0; i < len(texts); i += corpusStep(1, 16) {
					w, ok := want[[2]int{i + 1, k}]
					if !ok {
						w = texts[i]
					} else {
						differ++
					}
					if got := tok.Decode(ids[i], special); got != w {
						bad++
						if bad <= 5 {
							t.Errorf("special=%v line %d: Decode = %q, want %q", special, i+1, trunc(got), trunc(w))
						}
					}
				}
				if bad > 0 {
					t.Errorf("special=%v: %d of %d lines differ", special, bad, len(texts))
				}
				t.Logf("special=%v: %d lines where HF's decode is not the text", special, differ)
			}
		})
	}
}

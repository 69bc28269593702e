package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// TestCorpusExact checks every line of corpus-dev against the ids of HF
// tokenizers 0.23.2, for both tokenizers, with and without special tokens.
func TestCorpusExact(t *testing.T) {
	texts := corpusTexts(t)
	for _, model := range models {
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

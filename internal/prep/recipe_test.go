package prep

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseRecipe: any bytes give a recipe that satisfies ParseRecipe's
// rules or an ErrConfig naming the file, never a panic.
func FuzzParseRecipe(f *testing.F) {
	for _, s := range []string{
		"sources:\n  - name: a\n    inputs: [x.json]\n    weight: 0.7\n  - name: b\n    inputs: s3://b/y.jsonl\n    repeat: 2.5\n",
		"tokens: 100\nsources:\n  - {name: a, inputs: [x], weight: 1, format: chat, labels: all}\n",
		`{"sources": [{"name": "a", "inputs": ["x"], "weight": 1, "max_records": 3}]}`,
		"sources: []\n", "- a\n", "sources:\n  - name: [a\n", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRecipe("recipe.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "recipe.yaml") {
				t.Fatalf("error %v: want ErrConfig naming recipe.yaml", err)
			}
			return
		}
		if len(r.Sources) == 0 {
			t.Fatal("a recipe without sources")
		}
		for _, s := range r.Sources {
			if s.Name == "" || len(s.Inputs) == 0 || (s.Weight == nil) == (s.Repeat == nil) || s.Line < 1 {
				t.Fatalf("source %+v breaks the rules", s)
			}
			if w := s.Weight; w != nil && !(*w > 0) {
				t.Fatalf("weight %v", *w)
			}
			if q := s.Repeat; q != nil && !(*q > 0) {
				t.Fatalf("repeat %v", *q)
			}
		}
	})
}

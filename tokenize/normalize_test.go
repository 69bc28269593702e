package tokenize

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

var normForms = []struct {
	name string
	f    norm.Form
}{{"NFC", norm.NFC}, {"NFD", norm.NFD}, {"NFKC", norm.NFKC}, {"NFKD", norm.NFKD}}

// TestLongMarkRunsExact compares with HF tokenizers on strings with runs of
// 31 to 130 combining marks of mixed classes (testdata/longmarks), where
// golang.org/x/text's stream-safe NFC inserted U+034F.
func TestLongMarkRunsExact(t *testing.T) {
	dir := filepath.Join("testdata", "longmarks")
	var texts []string
	for _, r := range readJSONL[struct {
		Text string `json:"text"`
	}](t, filepath.Join(dir, "input.jsonl")) {
		texts = append(texts, r.Text)
	}
	if len(texts) < 40 {
		t.Fatalf("%d texts", len(texts))
	}
	for _, model := range models {
		for _, special := range []bool{true, false} {
			name := model + "-ids-special.jsonl"
			if !special {
				name = model + "-ids-nospecial.jsonl"
			}
			t.Run(fmt.Sprintf("%s/special=%v", model, special), func(t *testing.T) {
				tok := loadModel(t, model)
				want := readJSONL[struct {
					IDs []int32 `json:"ids"`
				}](t, filepath.Join(dir, name))
				if len(want) != len(texts) {
					t.Fatalf("%d golden lines, %d texts", len(want), len(texts))
				}
				for i, x := range texts {
					if got := tok.Encode(x, special); !slices.Equal(got, want[i].IDs) {
						t.Errorf("line %d %+q:\n got %v\nwant %v", i+1, x, got, want[i].IDs)
					}
				}
			})
		}
	}
}

// TestLongMarkRunsAlpaca: the three records of the real Stanford Alpaca
// that differed from HF before the fix.
func TestLongMarkRunsAlpaca(t *testing.T) {
	recs := readJSONL[struct {
		Record int     `json:"record"`
		Model  string  `json:"model"`
		Text   string  `json:"text"`
		IDs    []int32 `json:"ids"`
	}](t, filepath.Join("testdata", "longmarks", "alpaca-stanford.jsonl"))
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	for _, r := range recs {
		if got := loadModel(t, r.Model).Encode(r.Text, true); !slices.Equal(got, r.IDs) {
			t.Errorf("%s record %d:\n got %v\nwant %v", r.Model, r.Record, got, r.IDs)
		}
	}
}

// TestLongMarkRunNoCGJ is the reported case: Qwen2.5 on " " + 40 x U+0326
// gave 137 237 (U+034F, inserted by the stream-safe text format).
func TestLongMarkRunNoCGJ(t *testing.T) {
	tok := loadModel(t, "qwen2.5")
	ids := tok.Encode(" "+strings.Repeat("\u0326", 40), false)
	for i := 0; i+1 < len(ids); i++ {
		if ids[i] == 137 && ids[i+1] == 237 {
			t.Fatalf("ids %v contain U+034F (137 237)", ids)
		}
	}
	if got := tok.Decode(ids, false); got != " "+strings.Repeat("\u0326", 40) {
		t.Fatalf("decode: %+q", got)
	}
}

func TestNormalizeUnboundedCases(t *testing.T) {
	r := strings.Repeat
	tests := []struct {
		f       norm.Form
		in, out string
	}{
		// Sorted as one run: U+0301 (230) after all U+0326 (220), then
		// composed with e across them (nothing between blocks it).
		{norm.NFC, "e" + r("\u0326", 30) + "\u0301", "\u00e9" + r("\u0326", 30)},
		{norm.NFC, "e" + r("\u0301\u0326", 20), "\u00e9" + r("\u0326", 20) + r("\u0301", 19)},
		{norm.NFD, "\u00e9" + r("\u0326", 40), "e" + r("\u0326", 40) + "\u0301"},
		{norm.NFC, "c" + r("\u0301", 35) + "\u0327", "\u1e09" + r("\u0301", 34)},
		{norm.NFKC, "\ufb01" + r("\u0326", 31) + "\u0301", "f\u00ed" + r("\u0326", 31)},
		{norm.NFKD, "\u1e09" + r("\u0326", 31), "c\u0327" + r("\u0326", 31) + "\u0301"},
		// A CGJ in the text stays and blocks, as in x/text.
		{norm.NFC, "a" + r("\u0326", 31) + "\u034f\u0301", "a" + r("\u0326", 31) + "\u034f\u0301"},
		// Hangul: decomposed and composed algorithmically around the run.
		{norm.NFD, "\uac01" + r("\u0326", 31), "\u1100\u1161\u11a8" + r("\u0326", 31)},
		{norm.NFC, "\u1100\u1161" + r("\u0326", 31), "\uac00" + r("\u0326", 31)},
		// Invalid UTF-8 bytes pass through and block.
		{norm.NFC, "e\xff" + r("\u0326", 31) + "\u0301", "e\xff" + r("\u0326", 31) + "\u0301"},
	}
	for i, tt := range tests {
		if got := normalizeForm(tt.f, tt.in); got != tt.out {
			t.Errorf("%d: got %+q, want %+q", i, got, tt.out)
		}
	}
}

// TestNormalizeUnboundedEveryRune holds normalizeUnbounded to
// golang.org/x/text on every code point that decomposes, composes or is a
// non-starter in some form (and every 61st other one), alone, after "a" and
// before U+0301, before U+0326 U+0301 and after U+1100, in all four forms (no
// long runs, so they must agree).
func TestNormalizeUnboundedEveryRune(t *testing.T) {
	for _, nf := range normForms {
		t.Run(nf.name, func(t *testing.T) {
			t.Parallel()
			bad := 0
			for r := rune(0); r <= utf8.MaxRune; r += rune(corpusStep(1, 7)) {
				if r >= 0xD800 && r < 0xE000 {
					continue
				}
				c := string(r)
				if !normInteresting(c) && r%61 != 0 {
					continue
				}
				for _, s := range []string{c, "a" + c + "\u0301", c + "\u0326\u0301", "\u1100" + c} {
					if got, want := normalizeUnbounded(nf.f, s), nf.f.String(s); got != want {
						if bad++; bad <= 5 {
							t.Errorf("%U in %+q: got %+q, want %+q", r, s, got, want)
						}
					}
				}
			}
		})
	}
}

func normInteresting(c string) bool {
	for _, nf := range normForms {
		p := nf.f.PropertiesString(c)
		if p.Decomposition() != nil || p.CCC() != 0 || !p.BoundaryBefore() || !p.BoundaryAfter() {
			return true
		}
	}
	r, _ := utf8.DecodeRuneInString(c)
	return r >= 0xAC00 && r <= 0xD7A3
}

// FuzzNormalizeUnbounded: on any input where golang.org/x/text inserts no
// CGJ (no run of more than 30 non-starters), normalizeUnbounded agrees with
// it; where it does, the result has no more CGJ than the input and is stable.
func FuzzNormalizeUnbounded(f *testing.F) {
	f.Add("e\u0326\u0301\u0327", uint8(0))
	f.Add("\uac00\u11a8 \u1e09\u0323\u0302", uint8(1))
	f.Add("\ufb01\u2460\u00e9\xff", uint8(2))
	f.Add(" "+strings.Repeat("\u0326\u0301\u0327", 15), uint8(3))
	f.Fuzz(func(t *testing.T, s string, form uint8) {
		nf := normForms[form%4]
		got, want := normalizeUnbounded(nf.f, s), nf.f.String(s)
		if strings.Count(want, cgj) == strings.Count(s, cgj) {
			if got != want {
				t.Fatalf("%s %+q: got %+q, x/text %+q", nf.name, s, got, want)
			}
			return
		}
		if strings.Count(got, cgj) != strings.Count(s, cgj) {
			t.Fatalf("%s %+q: got %+q: CGJ count changed", nf.name, s, got)
		}
		if again := normalizeUnbounded(nf.f, got); again != got {
			t.Fatalf("%s %+q: not stable: %+q then %+q", nf.name, s, got, again)
		}
	})
}

// FuzzNormalizeForm: normalizeForm, which has x/text quick-check only the
// runs of non-ASCII bytes of a text (normalIslands), is x/text's form of the
// whole text where x/text inserts no CGJ, and normalizeUnbounded's where it
// does.
func FuzzNormalizeForm(f *testing.F) {
	f.Add("Give three tips e\u0301 and \u00e9.", uint8(0))
	f.Add("ab\u1100\u1161\u11a8 c", uint8(0))
	f.Add("x\ufb01\u0326\u0301", uint8(2))
	f.Add("abc"+strings.Repeat("\u0326\u0301", 20), uint8(1))
	f.Add("ok e\xff\u0301", uint8(3))
	f.Fuzz(func(t *testing.T, s string, form uint8) {
		nf := normForms[form%4]
		want := nf.f.String(s)
		if strings.Count(want, cgj) != strings.Count(s, cgj) {
			want = normalizeUnbounded(nf.f, s)
		}
		if got := normalizeForm(nf.f, s); got != want {
			t.Fatalf("%s %+q: got %+q, want %+q", nf.name, s, got, want)
		}
	})
}

package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// scanPatterns are the hand-written scanners and the Split regexes they
// stand for (DeepSeek: three Splits applied in turn).
var scanPatterns = []struct {
	kind     scanKind
	patterns []string
}{
	{scanLlama3, []string{PatternLlama3}},
	{scanQwen2, []string{PatternQwen2}},
	{scanGPT2, []string{PatternGPT2}},
	{scanO200k, []string{PatternO200k}},
	{scanTekken, []string{PatternTekken}},
	{scanDeepSeek, []string{PatternDeepSeekDigits, PatternDeepSeekCJK, PatternDeepSeek}},
	{scanDigitsGPT2, []string{"digits", PatternGPT2}}, // Digits(individual_digits), then GPT-2's
}

func scanAll(kind scanKind, s string) []string {
	return appendScanPieces(nil, kind, s)
}

var fallbacks = sync.OnceValue(func() map[scanKind][]*regexSplitter {
	m := map[scanKind][]*regexSplitter{}
	for _, p := range scanPatterns {
		for _, pat := range p.patterns {
			if pat == "digits" {
				m[p.kind] = append(m[p.kind], nil)
				continue
			}
			re, err := newRegexSplitter(pat, false, true)
			if err != nil {
				panic(err)
			}
			m[p.kind] = append(m[p.kind], re)
		}
	}
	return m
})

func regexAll(kind scanKind, s string) []string {
	pieces := []string{s}
	for _, re := range fallbacks()[kind] {
		var next []string
		for _, p := range pieces {
			if re == nil { // HF's Digits: the reference is appendDigitPieces
				next = appendDigitPieces(next, p, true)
				continue
			}
			for _, sp := range re.appendSpans(nil, p) {
				next = append(next, p[sp.start:sp.end])
			}
		}
		pieces = next
	}
	if s == "" {
		return nil
	}
	return pieces
}

func TestScanTable(t *testing.T) {
	for _, tc := range []struct {
		kind scanKind
		in   string
		want []string
	}{
		{scanLlama3, "Hello world", []string{"Hello", " world"}},
		{scanLlama3, "it's I'LL 'ſ 'Re", []string{"it", "'s", " I", "'LL", " '", "ſ", " '", "Re"}},
		{scanLlama3, "'ſx", []string{"'ſ", "x"}},
		{scanGPT2, "'ſx 'S", []string{"'", "ſx", " '", "S"}},
		{scanLlama3, "1234567", []string{"123", "456", "7"}},
		{scanQwen2, "123", []string{"1", "2", "3"}},
		{scanGPT2, "a 123 b", []string{"a", " 123", " b"}},
		{scanLlama3, "a   b", []string{"a", "  ", " b"}},
		{scanLlama3, "a  \n\n b", []string{"a", "  \n\n", " b"}},
		{scanLlama3, "x \t \n y  ", []string{"x", " \t \n", " y", "  "}},
		{scanLlama3, "a\r\nb", []string{"a", "\r\n", "b"}},
		{scanLlama3, "?!\n\nx", []string{"?!\n\n", "x"}},
		{scanLlama3, " ?? x", []string{" ??", " x"}},
		{scanLlama3, "\u3000\u3000x", []string{"\u3000", "\u3000x"}},
		{scanLlama3, "\u00a0x", []string{"\u00a0x"}},
		{scanLlama3, "\nx", []string{"\n", "x"}},
		{scanLlama3, "é\u0301", []string{"é", "\u0301"}},
		{scanLlama3, "a\xffb", []string{"a", "\xffb"}},
		{scanGPT2, "a  \n b", []string{"a", "  \n", " b"}},
		{scanGPT2, "x\u2028y", []string{"x", "\u2028", "y"}},
		{scanO200k, "HelloWorld it's HTTPServer ABC's 1234567", []string{"Hello", "World", " it's", " HTTPServer", " ABC's", " ", "123", "456", "7"}},
		{scanO200k, "a/b\n//\n x", []string{"a", "/b", "\n", "//\n", " x"}},
		{scanO200k, "e\u0301\u0301X\u0301", []string{"e\u0301\u0301", "X\u0301"}},
		{scanTekken, "HelloWorld it's 12", []string{"Hello", "World", " it", "'s", " ", "1", "2"}},
		{scanDeepSeek, "12345東京abc,def 日本語。x\x00\x00y", []string{"123", "45", "東京", "abc", ",def", " ", "日本語", "。", "x", "\x00", "\x00y"}},
		{scanDigitsGPT2, "abc 123 x1y \u0663\u00bd", []string{"abc", " ", "1", "2", "3", " x", "1", "y", " ", "\u0663", "\u00bd"}},
		{scanDeepSeek, "カタ・カナ\r\n\r\n  ok!?\n", []string{"カタ", "・", "カナ", "\r\n\r\n", " ", " ok", "!?\n"}},
	} {
		if got := scanAll(tc.kind, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("kind %d %q: got %q, want %q", tc.kind, tc.in, got, tc.want)
		}
		if got := regexAll(tc.kind, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("regexp2 kind %d %q: got %q, want %q", tc.kind, tc.in, got, tc.want)
		}
	}
}

// TestScanMatchesRegexpCorpus runs the scanners and the regexp2 fallback on
// corpus-dev lines (every 8th; regexp2 is slow) and wants the same pieces.
func TestScanMatchesRegexpCorpus(t *testing.T) {
	texts := corpusTexts(t)
	for _, p := range scanPatterns {
		t.Run(fmt.Sprint(p.kind), func(t *testing.T) {
			t.Parallel()
			bad := 0
			for i := 0; i < len(texts); i += corpusStep(8, 64) {
				got, want := scanAll(p.kind, texts[i]), regexAll(p.kind, texts[i])
				if !slices.Equal(got, want) {
					if bad++; bad <= 3 {
						t.Errorf("line %d: scanner %q\nregexp2 %q", i+1, got, want)
					}
				}
			}
		})
	}
}

// FuzzScanner is the differential fuzz test of the hand-written scanners
// against the regexp2 fallback, on arbitrary bytes (invalid UTF-8 included).
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		"Hello world", "it's I'LL 'ſ 'Re", "1234567 ١٢٣", "a  \n\n b  ", "\r\n\r", "?!\n\nx",
		"\u3000\u3000x\u00a0\u0085\u2028\u2029\v\f", "a\xffb\xe2\x82", "\xf0\x9f\x98", "<|im_end|>",
		"e\u0301 \u1100\u1161 𐵊𐵋", "\t \t \t x", "''s 're've", "x  ", " ", "",
		"HTTPServer ABC's ǅx \u02b0\u0301a", "東京123カタ・カナ,x", "a/b\n//", "\x00\u200d\ue000x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 4096 {
			s = s[:4096]
		}
		for _, p := range scanPatterns {
			got, want := scanAll(p.kind, s), regexAll(p.kind, s)
			if !slices.Equal(got, want) {
				t.Fatalf("pattern %d on %q:\nscanner %q\nregexp2 %q", p.kind, s, got, want)
			}
			if strings.Join(got, "") != s {
				t.Fatalf("pieces do not tile the input")
			}
		}
	})
}

func TestRewritePattern(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr bool
	}{
		{`\p{L}+`, false},
		{`[^\s\p{L}]`, false},
		{`\S+`, false},
		{`[\S]`, true},
		{`\p{Lu}[\p{Ll}\p{M}]\P{S}`, false},
		{`\p{Greek}`, true},
		{`\p{Lu`, true},
		{`\pL`, true},
		{`(?i:abc)`, false},
		{`(?i:a+)`, true},
		{`(?i:`, true},
		{`[]a]`, false},
	} {
		_, err := rewritePattern(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("rewritePattern(%q): err = %v, want error %v", tc.in, err, tc.wantErr)
		}
	}
}

// TestASCIILetters checks the eight-bytes-at-a-time letter run against a
// byte loop, with every byte value at every position of a word.
func TestASCIILetters(t *testing.T) {
	slow := func(s string, i int) int {
		for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= 'A' && s[i] <= 'Z') {
			i++
		}
		return i
	}
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 20; pos++ {
			b := []byte("abcdefghijklmnopQRSTUVWXYZ")
			b[pos] = byte(c)
			for start := 0; start < 3; start++ {
				s := string(b)
				if got, want := asciiLetters(s, start), slow(s, start); got != want {
					t.Fatalf("asciiLetters(%q, %d) = %d, want %d", s, start, got, want)
				}
			}
		}
	}
}

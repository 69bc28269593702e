package tokenize

import (
	"unicode/utf8"

	"github.com/ferryml/ferry/tokenize/internal/uclass"
)

// The Split regexes of o200k-style (gpt-oss), Tekken (Mistral-NeMo) and
// DeepSeek-V3 tokenizers, which name general categories (\p{Lu}, \p{M},
// \p{P}...) besides \p{L} and \p{N}.
const (
	// PatternO200k is the Split regex of gpt-oss (o200k_base / o200k_harmony).
	PatternO200k = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternTekken is the Split regex of Mistral-NeMo (Tekken).
	PatternTekken = `[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternDeepSeekDigits, PatternDeepSeekCJK and PatternDeepSeek are the
	// three Split regexes of DeepSeek-V3 and R1, applied in this order.
	PatternDeepSeekDigits = `\p{N}{1,3}`
	PatternDeepSeekCJK    = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	PatternDeepSeek       = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

// charInfo returns the class, category and byte width of the character at
// s[i]; an invalid UTF-8 byte is one U+FFFD, as regexp2 and HF see it.
func charInfo(s string, i int) (uclass.Class, uclass.Category, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return uclass.ASCII[c], uclass.ASCIICat[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return uclass.Of(r), uclass.Cat(r), n
}

// upperish is [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}], lowerish [\p{Ll}\p{Lm}\p{Lo}\p{M}].
func upperish(c uclass.Category) bool {
	return c == uclass.CatUpper || c == uclass.CatTitle || c == uclass.CatModifier || c == uclass.CatOtherLetter || c == uclass.CatMark
}

func lowerish(c uclass.Category) bool {
	return c == uclass.CatLower || c == uclass.CatModifier || c == uclass.CatOtherLetter || c == uclass.CatMark
}

// catRun returns the end of the run of characters at s[i:] whose category
// satisfies in.
func catRun(s string, i int, in func(uclass.Category) bool) int {
	for i < len(s) {
		_, c, n := charInfo(s, i)
		if !in(c) {
			return i
		}
		i += n
	}
	return i
}

// scanO200kNext returns the length of the first pre-token of s under
// PatternO200k (contractions, \p{N}{1,3}) or PatternTekken (neither: \p{N}).
func scanO200kNext(s string, contractions bool) int {
	c0 := s[0]
	// Fast path: an ASCII lower-case run, with an optional leading space or
	// upper-case letter, ended by ASCII that is not a letter or apostrophe.
	{
		i := 0
		if c0 == ' ' || c0 >= 'A' && c0 <= 'Z' {
			i = 1
		}
		j := i
		for j < len(s) && s[j] >= 'a' && s[j] <= 'z' {
			j++
		}
		if j > i && (j == len(s) || s[j] < utf8.RuneSelf && s[j] != '\'' && asciiLetterSpace[s[j]] != 1) {
			return j
		}
	}
	cls, _, w := charInfo(s, 0)
	if n := o200kWord(s, cls, w, contractions); n > 0 {
		return n
	}
	if cls == uclass.Number {
		if !contractions {
			return w
		}
		i := w
		for k := 0; k < 2 && i < len(s); k++ {
			c, n := classAt(s, i)
			if c != uclass.Number {
				break
			}
			i += n
		}
		return i
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n/]*
	start := -1
	if cls == uclass.Other {
		start = w
	} else if c0 == ' ' && len(s) > 1 {
		if c2, w2 := classAt(s, 1); c2 == uclass.Other {
			start = 1 + w2
		}
	}
	if start >= 0 {
		i := run(s, start, uclass.Other)
		for i < len(s) && (s[i] == '\r' || s[i] == '\n' || s[i] == '/') {
			i++
		}
		return i
	}
	return spaces(s, true)
}

// o200kWord matches the two letter alternatives at the start of s, as the
// backtracking engine does, or returns 0:
//
//	P? U* L+ C?  then  P? U+ L* C?
//
// with P = [^\r\n\p{L}\p{N}] (marks included: they are not \p{L}), U and L
// the upperish and lowerish sets, C a contraction (when contractions).
func o200kWord(s string, cls0 uclass.Class, w0 int, contractions bool) int {
	canP := cls0 != uclass.Letter && cls0 != uclass.Number && s[0] != '\r' && s[0] != '\n'
	tail := func(e int) int {
		if contractions && e < len(s) && s[e] == '\'' {
			e += contraction(s[e:], true)
		}
		return e
	}
	// P? U* L+ C?: for each choice of P (taken first), U* gives back one
	// character at a time until L+ can start.
	for p := 1; p >= 0; p-- {
		i0 := 0
		if p == 1 {
			if !canP {
				continue
			}
			i0 = w0
		}
		j := catRun(s, i0, upperish)
		for {
			if j < len(s) {
				if _, c, _ := charInfo(s, j); lowerish(c) {
					return tail(catRun(s, j, lowerish))
				}
			}
			if j == i0 {
				break
			}
			_, n := utf8.DecodeLastRuneInString(s[i0:j])
			j -= n
		}
	}
	// P? U+ L* C?: L* and C? never fail, so the first U+ that starts wins.
	for p := 1; p >= 0; p-- {
		i0 := 0
		if p == 1 {
			if !canP {
				continue
			}
			i0 = w0
		}
		if j := catRun(s, i0, upperish); j > i0 {
			return tail(catRun(s, j, lowerish))
		}
	}
	return 0
}

// isDeepSeekCJK is [\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff].
func isDeepSeekCJK(r rune) bool {
	return r >= 0x4e00 && r <= 0x9fa5 || r >= 0x3040 && r <= 0x30ff
}

// scanDeepSeekOuter returns the length of the first piece of s after
// DeepSeek's first two Splits: up to three \p{N}, a run of CJK and kana, or
// the text up to the next of either. Each piece is then split by
// scanDeepSeekNext, which sees it as the whole text.
func scanDeepSeekOuter(s string) int {
	cls, w := classAt(s, 0)
	if cls == uclass.Number {
		i := w
		for k := 0; k < 2 && i < len(s); k++ {
			c, n := classAt(s, i)
			if c != uclass.Number {
				break
			}
			i += n
		}
		return i
	}
	r, _ := utf8.DecodeRuneInString(s)
	cjk := isDeepSeekCJK(r)
	i := w
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if cjk || uclass.ASCII[c] == uclass.Number {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if isDeepSeekCJK(r) != cjk || !cjk && uclass.Of(r) == uclass.Number {
			return i
		}
		i += n
	}
	return i
}

// isDeepSeekPunct is [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~].
var isDeepSeekPunct = func() (t [256]bool) {
	for _, c := range "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~" {
		t[c] = true
	}
	return
}()

func isPS(c uclass.Category) bool { return c == uclass.CatPunct || c == uclass.CatSymbol }

func isLM(cls uclass.Class, c uclass.Category) bool {
	return cls == uclass.Letter || c == uclass.CatMark
}

// deepSeekMatch returns the length of the match of PatternDeepSeek at the
// start of s, or 0 when no alternative matches there.
func deepSeekMatch(s string) int {
	c0 := s[0]
	// [!"#...~][A-Za-z]+
	if isDeepSeekPunct[c0] && len(s) > 1 && asciiLetterSpace[s[1]] == 1 {
		i := 2
		for i < len(s) && asciiLetterSpace[s[i]] == 1 {
			i++
		}
		return i
	}
	cls, cat, w := charInfo(s, 0)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : a mark may be the optional
	// character or the run's first; the run ends at the same place.
	lmRun := func(i int) int {
		for i < len(s) {
			c, k, n := charInfo(s, i)
			if !isLM(c, k) {
				break
			}
			i += n
		}
		return i
	}
	if isLM(cls, cat) {
		return lmRun(w)
	}
	if c0 != '\r' && c0 != '\n' && !isPS(cat) && w < len(s) {
		if c2, k2, w2 := charInfo(s, w); isLM(c2, k2) {
			return lmRun(w + w2)
		}
	}
	//  ?[\p{P}\p{S}]+[\r\n]*
	start := -1
	if isPS(cat) {
		start = w
	} else if c0 == ' ' && len(s) > 1 {
		if _, k2, w2 := charInfo(s, 1); isPS(k2) {
			start = 1 + w2
		}
	}
	if start >= 0 {
		i := start
		for i < len(s) {
			_, k, n := charInfo(s, i)
			if !isPS(k) {
				break
			}
			i += n
		}
		for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
			i++
		}
		return i
	}
	if cls == uclass.Space {
		return spaces(s, true)
	}
	return 0
}

// scanDeepSeekNext returns the length of the first pre-token of s (one piece of
// scanDeepSeekOuter) under PatternDeepSeek: a match, or the text up to the
// next place where one starts (the regex does not match everywhere:
// controls, format characters and unassigned code points are left between
// matches, and Isolated keeps them as pieces).
func scanDeepSeekNext(s string) int {
	if n := deepSeekMatch(s); n > 0 {
		return n
	}
	_, _, i := charInfo(s, 0)
	for i < len(s) && deepSeekMatch(s[i:]) == 0 {
		_, _, n := charInfo(s, i)
		i += n
	}
	return i
}

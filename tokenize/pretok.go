package tokenize

import (
	"fmt"
	"math/bits"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/dlclark/regexp2"

	"github.com/ferryml/ferry/tokenize/internal/uclass"
)

// The Split regexes that have a hand-written scanner. They are matched by
// exact string equality against the "Regex" of a Split pre-tokenizer (or the
// implicit regex of ByteLevel with use_regex=true).
const (
	// PatternLlama3 is the Split regex of Llama-3, 3.1, 3.2 and 3.3.
	PatternLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternQwen2 is the Split regex of Qwen2, Qwen2.5 and Qwen3.
	PatternQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// PatternGPT2 is the regex of the ByteLevel pre-tokenizer (use_regex=true), as in GPT-2.
	PatternGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
)

// scanKind names a hand-written scanner.
type scanKind uint8

const (
	scanNone scanKind = iota
	scanLlama3
	scanQwen2
	scanGPT2
	scanO200k
	scanTekken
	scanDeepSeek      // DeepSeek's three Splits in one (see scanDeepSeekOuter)
	scanDeepSeekInner // the third of them, within a piece of the first two
	scanDigitsGPT2    // Digits(individual_digits) then ByteLevel's regex (SmolLM2)
)

// innerScan returns, for a scanner made of two levels, the scanner run
// within each piece of the outer one; otherwise scanNone.
func innerScan(k scanKind) scanKind {
	switch k {
	case scanDeepSeek:
		return scanDeepSeekInner
	case scanDigitsGPT2:
		return scanGPT2
	}
	return scanNone
}

func scanKindOf(pattern string) scanKind {
	switch pattern {
	case PatternLlama3:
		return scanLlama3
	case PatternQwen2:
		return scanQwen2
	case PatternGPT2:
		return scanGPT2
	case PatternO200k:
		return scanO200k
	case PatternTekken:
		return scanTekken
	}
	return scanNone
}

// classAt returns the class and byte width of the character at s[i]. An
// invalid UTF-8 byte counts as one character of class Other, as U+FFFD would.
func classAt(s string, i int) (uclass.Class, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return uclass.ASCII[c], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	return uclass.Of(r), n
}

// run returns the end of the run of characters of class want starting at i.
func run(s string, i int, want uclass.Class) int {
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if uclass.ASCII[c] != want {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if uclass.Of(r) != want {
			return i
		}
		i += n
	}
	return i
}

// contraction returns the length of a contraction ('s 't 're 've 'm 'll 'd)
// at the start of s, which begins with an apostrophe, or 0. With fold, the
// letters match case-insensitively as Oniguruma folds them: s also matches
// U+017F LATIN SMALL LETTER LONG S.
func contraction(s string, fold bool) int {
	if len(s) < 2 {
		return 0
	}
	c := s[1]
	if fold && c >= 'A' && c <= 'Z' {
		c += 'a' - 'A'
	}
	switch c {
	case 's', 't', 'm', 'd':
		return 2
	case 'r', 'v', 'l':
		if len(s) < 3 {
			return 0
		}
		want := byte('e')
		if c == 'l' {
			want = 'l'
		}
		c2 := s[2]
		if fold && c2 >= 'A' && c2 <= 'Z' {
			c2 += 'a' - 'A'
		}
		if c2 == want {
			return 3
		}
	case 0xC5: // U+017F is C5 BF
		if fold && len(s) >= 3 && s[2] == 0xBF {
			return 3
		}
	}
	return 0
}

// asciiLetterSpace is 1 for ASCII letters, 2 for the space, else 0.
var asciiLetterSpace = func() (t [256]uint8) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = 1, 1
	}
	t[' '] = 2
	return
}()

// asciiLetters returns the end of the run of ASCII letters at s[i:], eight
// bytes at a time: with the 0x20 bit set, a letter is a byte in 'a'..'z'.
func asciiLetters(s string, i int) int {
	const hi = 0x8080808080808080
	for i+8 <= len(s) {
		w := load64(s, i)
		if w&hi != 0 {
			break
		}
		// All bytes < 0x80, so the additions do not carry between bytes: the
		// high bit of x+0x1f is set for bytes >= 'a', of x+0x05 for bytes > 'z'.
		x := w | 0x2020202020202020
		m := (x + 0x1f1f1f1f1f1f1f1f) &^ (x + 0x0505050505050505) & hi
		if m != hi {
			return i + bits.TrailingZeros64(^m&hi)/8
		}
		i += 8
	}
	for i < len(s) && asciiLetterSpace[s[i]] == 1 {
		i++
	}
	return i
}

// scan returns the byte length of the first pre-token of s (len(s) > 0) under
// the regex of kind, which must not be scanNone. These regexes match at every
// position, so the pre-tokens tile the text: there are no gaps.
func scan(kind scanKind, s string) int {
	switch kind {
	case scanGPT2:
		return scanGPT2Next(s)
	case scanO200k:
		return scanO200kNext(s, true)
	case scanTekken:
		return scanO200kNext(s, false)
	case scanDeepSeek:
		return scanDeepSeekOuter(s) // not a pre-token: see innerScan
	case scanDigitsGPT2:
		return scanDigitsOuter(s) // not a pre-token: see innerScan
	case scanDeepSeekInner:
		return scanDeepSeekNext(s)
	}
	c0 := s[0]
	// Fast path: an ASCII letter run, with an optional leading space.
	if i := int(asciiLetterSpace[c0]); i != 0 {
		if i == 2 { // a space: must be followed by a letter
			if len(s) < 2 || asciiLetterSpace[s[1]] != 1 {
				goto general
			}
		}
		i = asciiLetters(s, i)
		if i == len(s) || s[i] < utf8.RuneSelf {
			return i
		}
		return run(s, i, uclass.Letter)
	}
general:
	// (?i:'s|'t|'re|'ve|'m|'ll|'d)
	if c0 == '\'' {
		if n := contraction(s, true); n > 0 {
			return n
		}
	}
	cls, w := classAt(s, 0)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if cls == uclass.Letter {
		return run(s, w, uclass.Letter)
	}
	if cls != uclass.Number && c0 != '\r' && c0 != '\n' && w < len(s) {
		if c2, w2 := classAt(s, w); c2 == uclass.Letter {
			return run(s, w+w2, uclass.Letter)
		}
	}
	// \p{N}{1,3} (Llama-3) or \p{N} (Qwen2)
	if cls == uclass.Number {
		if kind == scanQwen2 {
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
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
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
		for i < len(s) && (s[i] == '\r' || s[i] == '\n') {
			i++
		}
		return i
	}
	// cls == Space from here on.
	return spaces(s, true)
}

// spaces matches the white-space alternatives at the start of s, which
// begins with white space: \s*[\r\n]+ (when nl), then \s+(?!\S), then \s+.
func spaces(s string, nl bool) int {
	i, last, afterNL := 0, 0, 0
	for i < len(s) {
		c, n := classAt(s, i)
		if c != uclass.Space {
			break
		}
		if s[i] == '\r' || s[i] == '\n' {
			afterNL = i + 1
		}
		last = i
		i += n
	}
	if nl && afterNL > 0 {
		return afterNL // \s*[\r\n]+
	}
	if i == len(s) || last == 0 {
		return i // \s+(?!\S) at the end of the text, or \s+ of one character
	}
	return last // \s+(?!\S) leaves the last white space for the next token
}

func scanGPT2Next(s string) int {
	c0 := s[0]
	if c0 == '\'' {
		if n := contraction(s, false); n > 0 {
			return n
		}
	}
	cls, w := classAt(s, 0)
	if cls != uclass.Space {
		return run(s, w, cls)
	}
	if c0 == ' ' && len(s) > 1 {
		if c2, w2 := classAt(s, 1); c2 != uclass.Space {
			return run(s, 1+w2, c2)
		}
	}
	return spaces(s, false)
}

// span is a pre-token: text[start:end].
type span struct{ start, end int }

// regexSplitter is the general Split pre-tokenizer: a backtracking regex
// (regexp2) whose \p{L}, \p{N}, \s and \S are rewritten to the Unicode 16
// classes of HF tokenizers, and whose (?i:...) groups of ASCII literals are
// rewritten to the case folds of Oniguruma.
type regexSplitter struct {
	re          *regexp2.Regexp
	isolated    bool // Isolated, else Removed
	keepMatches bool // Removed with invert: only the matches are pieces
}

func newRegexSplitter(pattern string, literal, isolated bool) (*regexSplitter, error) {
	var expr string
	if literal {
		expr = regexp2.Escape(pattern)
	} else {
		var err error
		if expr, err = rewritePattern(pattern); err != nil {
			return nil, err
		}
	}
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, err
	}
	return &regexSplitter{re: re, isolated: isolated}, nil
}

// appendSpans appends the pieces of s to dst. Invalid UTF-8 bytes are one
// character each, matched as U+FFFD.
func (r *regexSplitter) appendSpans(dst []span, s string) []span {
	runes := make([]rune, 0, len(s))
	offs := make([]int, 0, len(s)+1)
	for i := 0; i < len(s); {
		c, n := utf8.DecodeRuneInString(s[i:])
		runes = append(runes, c)
		offs = append(offs, i)
		i += n
	}
	offs = append(offs, len(s))
	var matches []span
	m, err := r.re.FindRunesMatch(runes)
	for err == nil && m != nil {
		matches = append(matches, span{offs[m.Index], offs[m.Index+m.Length]})
		m, err = r.re.FindNextMatch(m)
	}
	if err != nil { // only a timeout, which is never set
		panic(err)
	}
	// Isolated: matches and the text between them are pieces. Removed: only
	// the text between matches.
	if r.keepMatches {
		for _, m := range matches {
			if m.end > m.start {
				dst = append(dst, m)
			}
		}
		return dst
	}
	prev := 0
	for _, m := range matches {
		if m.start > prev {
			dst = append(dst, span{prev, m.start})
		}
		if r.isolated && m.end > m.start {
			dst = append(dst, m)
		}
		prev = m.end
	}
	if prev < len(s) {
		dst = append(dst, span{prev, len(s)})
	}
	return dst
}

// classSets holds the regexp2 class bodies of the \p{..} names the Split
// regexes use, with the code points HF's Oniguruma puts in them, and of \s.
var classSets = sync.OnceValue(func() map[string]string {
	var b [4 + uclass.NumCategories]strings.Builder
	lo := make([]rune, len(b))
	for i := range lo {
		lo[i] = -1
	}
	// class k: 0-3 the uclass.Class values, 4+c the categories.
	flush := func(k int, hi rune) {
		writeClassRune(&b[k], lo[k])
		if hi > lo[k] {
			b[k].WriteByte('-')
			writeClassRune(&b[k], hi)
		}
		lo[k] = -1
	}
	var prev [2]int
	prev[0], prev[1] = -1, -1
	for r := rune(0); r <= 0x110000; r++ {
		cur := [2]int{-1, -1}
		if r < 0x110000 && (r < 0xD800 || r > 0xDFFF) {
			cur[0] = int(uclass.Of(r))
			cur[1] = 4 + int(uclass.Cat(r))
		}
		for j := range cur {
			if cur[j] == prev[j] {
				continue
			}
			if prev[j] >= 0 && lo[prev[j]] >= 0 {
				flush(prev[j], r-1)
			}
			if cur[j] >= 0 {
				lo[cur[j]] = r
			}
			prev[j] = cur[j]
		}
	}
	sets := map[string]string{
		"L": b[uclass.Letter].String(), "N": b[uclass.Number].String(), "s": b[uclass.Space].String(),
	}
	for name, c := range map[string]uclass.Category{"Lu": uclass.CatUpper, "Ll": uclass.CatLower, "Lt": uclass.CatTitle,
		"Lm": uclass.CatModifier, "Lo": uclass.CatOtherLetter, "M": uclass.CatMark, "P": uclass.CatPunct, "S": uclass.CatSymbol} {
		sets[name] = b[4+int(c)].String()
	}
	return sets
})

func writeClassRune(b *strings.Builder, r rune) {
	switch {
	case r < 0x20 || r == 0x7f:
		fmt.Fprintf(b, `\x%02x`, r)
	case strings.ContainsRune(`\]^-[`, r):
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		b.WriteRune(r)
	}
}

// rewritePattern rewrites an Oniguruma pattern into an equivalent regexp2
// pattern (see regexSplitter).
func rewritePattern(p string) (string, error) {
	sets := classSets()
	var out strings.Builder
	inClass := false
	for i := 0; i < len(p); {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			esc := p[i+1]
			var set string
			var neg bool
			n := 2
			switch {
			case (esc == 'p' || esc == 'P') && i+2 < len(p) && p[i+2] == '{':
				end := strings.IndexByte(p[i:], '}')
				var ok bool
				if end > 0 {
					set, ok = sets[p[i+3:i+end]]
				}
				if !ok {
					return "", fmt.Errorf("the Unicode class %q is not supported", p[i:min(len(p), i+8)])
				}
				n, neg = end+1, esc == 'P'
			case esc == 's':
				set = sets["s"]
			case esc == 'S':
				set, neg = sets["s"], true
			case esc == 'p' || esc == 'P':
				return "", fmt.Errorf("the Unicode class %q is not supported", p[i:min(len(p), i+8)])
			}
			switch {
			case set == "":
				out.WriteString(p[i : i+n])
			case inClass && neg:
				return "", fmt.Errorf("negated class %q inside brackets is not supported", p[i:i+n])
			case inClass:
				out.WriteString(set)
			case neg:
				out.WriteString("[^" + set + "]")
			default:
				out.WriteString("[" + set + "]")
			}
			i += n
		case inClass:
			if c == ']' {
				inClass = false
			}
			out.WriteByte(c)
			i++
		case c == '[':
			inClass = true
			out.WriteByte(c)
			i++
			if i < len(p) && p[i] == '^' {
				out.WriteByte('^')
				i++
			}
			if i < len(p) && p[i] == ']' { // a literal ] first in the class
				out.WriteString(`\]`)
				i++
			}
		case strings.HasPrefix(p[i:], "(?i:"):
			end := strings.IndexByte(p[i:], ')')
			body := ""
			if end > 0 {
				body = p[i+4 : i+end]
			}
			if end < 0 || strings.ContainsAny(body, `\[]().*+?{}^$`) {
				return "", fmt.Errorf("case-insensitive group %q is not supported", p[i:])
			}
			out.WriteString("(?:")
			for _, r := range body {
				switch {
				case r == 's' || r == 'S':
					out.WriteString("[sS\u017f]")
				case r == 'k' || r == 'K':
					out.WriteString("[kK\u212a]")
				case r >= 'a' && r <= 'z':
					out.WriteString("[" + string(r) + string(r-'a'+'A') + "]")
				case r >= 'A' && r <= 'Z':
					out.WriteString("[" + string(r) + string(r-'A'+'a') + "]")
				case r > 0x7f:
					return "", fmt.Errorf("case-insensitive group %q is not supported", p[i:])
				default:
					out.WriteRune(r)
				}
			}
			out.WriteByte(')')
			i += end + 1
		default:
			out.WriteByte(c)
			i++
		}
	}
	return out.String(), nil
}

// appendDigitPieces is HF's Digits pre-tokenizer: runs of numeric
// characters (Rust's char::is_numeric) are pieces apart from the rest, each
// numeric character alone with individual.
func appendDigitPieces(dst []string, s string, individual bool) []string {
	start := 0
	prevNum := false
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		num := uclass.IsNumeric(r)
		if i > start && (num != prevNum || num && individual) {
			dst = append(dst, s[start:i])
			start = i
		}
		prevNum = num
		i += n
	}
	if start < len(s) {
		dst = append(dst, s[start:])
	}
	return dst
}

// appendScanPieces appends the pre-tokens of s under the scanner k.
func appendScanPieces(dst []string, k scanKind, s string) []string {
	for len(s) > 0 {
		n := scan(k, s)
		if in := innerScan(k); in != scanNone {
			dst = appendScanPieces(dst, in, s[:n])
		} else {
			dst = append(dst, s[:n])
		}
		s = s[n:]
	}
	return dst
}

// scanDigitsOuter returns the length of the first piece of s under HF's
// Digits pre-tokenizer with individual_digits: one numeric character, or the
// text up to the next.
func scanDigitsOuter(s string) int {
	r, n := utf8.DecodeRuneInString(s)
	if uclass.IsNumeric(r) {
		return n
	}
	i := n
	for i < len(s) {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= '0' && c <= '9' {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if uclass.IsNumeric(r) {
			return i
		}
		i += n
	}
	return i
}

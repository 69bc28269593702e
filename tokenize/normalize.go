package tokenize

import (
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/ferryml/ferry/tokenize/internal/classify"
)

// cgj is U+034F COMBINING GRAPHEME JOINER. golang.org/x/text writes the
// Unicode "stream-safe text format" (UAX #15): after 30 consecutive
// non-starters it inserts a CGJ and starts a new reordering segment. HF
// tokenizers (Rust's unicode-normalization crate) does not: it sorts the
// whole run of non-starters by canonical combining class and composes across
// it, however long it is.
const cgj = "\u034f"

// normalizeForm is f.String(s) without the stream-safe CGJ insertion, the
// way Rust's unicode-normalization crate normalizes. Text already in form f
// (nearly all) is returned as it is after x/text has checked only its runs
// of non-ASCII bytes (normalIslands); the rest costs one f.String and a
// byte search when no run of more than 30 non-starters is in it.
func normalizeForm(f norm.Form, s string) string {
	if normalIslands(f, s) {
		return s
	}
	out := f.String(s)
	if !strings.Contains(out, cgj) || strings.Count(out, cgj) == strings.Count(s, cgj) {
		// A CGJ has no decomposition and never composes, so f keeps every
		// CGJ of s; more in out means f inserted some.
		return out
	}
	return normalizeUnbounded(f, s)
}

// normalIslands reports whether s is in form f, having x/text check only
// each run of non-ASCII bytes with the ASCII byte before it (by its quick
// check, which may answer no where it cannot tell: IsNormalString would
// allocate). ASCII bytes are starters with no decomposition in any form;
// one blocks the composition of what follows it with what precedes it, and
// none composes with a character before it, so only the last ASCII byte
// before a run can change with it (a letter and the marks after it). x/text
// checks ASCII a byte at a time; most non-ASCII text to tokenize is mostly
// ASCII (and valid: appendEncode has made it so).
func normalIslands(f norm.Form, s string) bool {
	for i := classify.ASCIILen(s); i < len(s); {
		j := i + 1
		for j < len(s) && s[j] >= utf8.RuneSelf {
			j++
		}
		// (Invalid UTF-8 is left to the whole text's f.String: x/text
		// reads it by what follows.)
		if run := s[max(i-1, 0):j]; !utf8.ValidString(run) || f.QuickSpanString(run) != len(run) {
			return false
		}
		i = j + classify.ASCIILen(s[j:])
	}
	return true
}

// normChar is one character of a string being normalized: a rune, or an
// invalid UTF-8 byte b stored as -1-b, which is a starter that never
// composes and is written back as it was.
type normChar struct {
	r   rune
	ccc uint8
}

// normalizeUnbounded normalizes s to f with the UAX #15 algorithm and no
// limit on the length of a run of non-starters: full decomposition
// (canonical, or compatibility for NFKC/NFKD), a stable sort of each run of
// non-starters by canonical combining class, and for NFC/NFKC canonical
// composition. The character data come from golang.org/x/text.
func normalizeUnbounded(f norm.Form, s string) string {
	dec := norm.NFD
	if f == norm.NFKC || f == norm.NFKD {
		dec = norm.NFKD
	}
	cs := make([]normChar, 0, len(s))
	var one [utf8.UTFMax]byte
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			cs = append(cs, normChar{r: -1 - rune(s[i])})
			i++
			continue
		}
		if d, ok := decomposeHangul(r); ok {
			for _, h := range d {
				cs = append(cs, normChar{r: h})
			}
		} else if d := dec.PropertiesString(s[i:]).Decomposition(); d != nil {
			for _, h := range string(d) {
				cs = append(cs, normChar{r: h, ccc: cccOf(h, one[:])})
			}
		} else {
			cs = append(cs, normChar{r: r, ccc: cccOf(r, one[:])})
		}
		i += n
	}
	// Canonical ordering: each maximal run of non-starters, stably by ccc.
	for i := 0; i < len(cs); {
		if cs[i].ccc == 0 {
			i++
			continue
		}
		j := i + 1
		for j < len(cs) && cs[j].ccc != 0 {
			j++
		}
		slices.SortStableFunc(cs[i:j], func(a, b normChar) int { return int(a.ccc) - int(b.ccc) })
		i = j
	}
	if f == norm.NFC || f == norm.NFKC {
		cs = compose(cs)
	}
	b := make([]byte, 0, len(s)+len(s)/2)
	for _, c := range cs {
		if c.r < 0 {
			b = append(b, byte(-1-c.r))
		} else {
			b = utf8.AppendRune(b, c.r)
		}
	}
	return string(b)
}

func cccOf(r rune, buf []byte) uint8 {
	n := utf8.EncodeRune(buf, r)
	return norm.NFD.Properties(buf[:n]).CCC()
}

// compose is the canonical composition algorithm of UAX #15 on a decomposed,
// canonically ordered string: a character C combines with the last starter
// L before it when nothing between them blocks it (a character between them
// blocks C when its ccc is 0 or not below C's) and <L, C> has a primary
// composite.
func compose(cs []normChar) []normChar {
	out := cs[:0]
	starter := -1 // index in out of the last starter
	var last uint8
	for _, c := range cs {
		if starter >= 0 && (len(out)-1 == starter || last < c.ccc) {
			if p, ok := composePair(out[starter].r, c.r); ok {
				out[starter].r = p
				continue
			}
		}
		if c.ccc == 0 {
			starter = len(out)
		}
		last = c.ccc
		out = append(out, c)
	}
	return out
}

// composePair is the primary composite of <a, b>, asked of
// golang.org/x/text: NFC of the pair is one rune exactly when it has one (a
// is a starter, possibly composed already with marks of lower or equal ccc
// than b, so NFC cannot reorder b before any of them).
func composePair(a, b rune) (rune, bool) {
	if a < 0 || b < 0 {
		return 0, false
	}
	var buf [2 * utf8.UTFMax]byte
	n := utf8.EncodeRune(buf[:], b)
	if norm.NFC.Properties(buf[:n]).BoundaryBefore() {
		return 0, false // b never combines with a character before it
	}
	m := utf8.EncodeRune(buf[:], a)
	m += utf8.EncodeRune(buf[m:], b)
	p := norm.NFC.Bytes(buf[:m])
	r, size := utf8.DecodeRune(p)
	if size != len(p) || r == utf8.RuneError {
		return 0, false
	}
	return r, true
}

// decomposeHangul is the algorithmic canonical decomposition of a precomposed
// Hangul syllable (UAX #15, "Hangul"); the jamo are starters.
func decomposeHangul(r rune) ([]rune, bool) {
	const sBase, lBase, vBase, tBase = 0xAC00, 0x1100, 0x1161, 0x11A7
	const vCount, tCount, sCount = 21, 28, 11172
	i := r - sBase
	if i < 0 || i >= sCount {
		return nil, false
	}
	l, v, t := lBase+i/(vCount*tCount), vBase+(i%(vCount*tCount))/tCount, tBase+i%tCount
	if t == tBase {
		return []rune{l, v}, true
	}
	return []rune{l, v, t}, true
}

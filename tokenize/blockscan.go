package tokenize

import (
	"math/bits"
	"strings"

	"github.com/ferryml/ferry/tokenize/internal/classify"
)

// A block scanner for the split regexes of the byte-level families over
// ASCII text: PatternQwen2, PatternLlama3, PatternGPT2 (with SmolLM2's
// individual digits too), PatternO200k, PatternTekken and DeepSeek-V3's
// three Splits. It
// classifies 64 bytes at a time (internal/classify: AVX2 compares where the
// machine has them, else SWAR, eight bytes per uint64) into
// masks of letters, digits, white space, newlines and so on, and derives the
// pre-token starts of the whole block with 64-bit mask arithmetic, so that
// an encode loop finds each pre-token's end with one TrailingZeros instead
// of running scan's per-character branches.
//
// The encode loop uses it where the classifier is AVX2 (blockScanKind):
// 64 bytes cost about 15 ns there against about 95 ns in SWAR, and
// BenchmarkPreTokens finds the boundaries of the seven patterns at 430-600
// MB/cpu-s against scan's 110-265 on the Alpaca demo. With the SWAR
// classifier the block scanner is no faster than scan, so scan stays the
// pure-Go path.
//
// Over ASCII, whether a pre-token starts at byte i depends only on the
// classes of the bytes at i-2, i-1, i and i+1 (L letter, D digit, S white
// space other than a newline, NL \r or \n, P any other printable byte), and
// on contractions, as the regex's alternatives give it. For Qwen2 and
// Llama-3 (qwenRules; the other patterns' rules are at gpt2Rules,
// o200kRules and qwenRules' DeepSeek):
//
//	L:  after D or NL; after P when i-2 is P or ' ' (that P then ended a
//	    punctuation run and is not the prefix of [^\r\n\p{L}\p{N}]?\p{L}+);
//	    and at the end of a contraction ('s 't 're 've 'm 'll 'd).
//	D:  always (Qwen2); Llama-3: at a run's start and every third digit.
//	P:  unless after P (one run) or ' ' (" ?[^\s\p{L}\p{N}]+").
//	NL: after L or D (after P it ends the run "[\r\n]*"; after white space
//	    it belongs to "\s*[\r\n]+").
//	S:  after L, D or P, or before a non-white-space byte (\s+(?!\S) leaves
//	    the last one to the next pre-token); after S and before white space
//	    never.
//
// What these rules do not decide is marked "unknown", and the caller runs
// the exact scanner (scanPreToken) from the last known start instead: a block or
// neighbour with a non-ASCII or control byte, S after NL before white space
// (it starts a pre-token only when no newline follows in the run), and a
// Llama-3 digit run that began in an earlier block. TestBlockScan and
// FuzzBlockScan check the starts of every pattern against scan's.

// blockScanner finds the pre-token ends of one text. The zero value is not
// usable: see reset.
type blockScanner struct {
	s       string
	kind    scanKind
	base    int    // start of the block that starts and unknown describe; -1 none
	starts  uint64 // bit i: a pre-token starts at s[base+i]
	unknown uint64 // bit i: whether one starts there is not known

	// run holds the starts and unknowns of runN blocks from runBase,
	// computed together (fill): load takes a block's from it, and
	// appendBlocks' inner loop goes on through them.
	runBase, runN int
	run           [runBlocks][2]uint64
}

// runBlocks is how many blocks' masks a blockScanner computes at a time:
// 1 KiB of text, more than most prompts.
const runBlocks = 16

// blockScanKind reports whether the encode loop uses the block scanner for
// scanner k: for the kinds it has rules for, where the classifier is SIMD.
// With the pure-Go classifier (about 2 ns a byte) scan is faster.
func blockScanKind(k scanKind) bool { return classify.SIMD && hasBlockRules(k) }

// hasBlockRules reports whether the block scanner has rules for k.
func hasBlockRules(k scanKind) bool {
	switch k {
	case scanQwen2, scanLlama3, scanDeepSeek, scanGPT2, scanDigitsGPT2, scanO200k, scanTekken:
		return true
	}
	return false
}

// reset makes b the block scanner of s for k (hasBlockRules). A state
// keeps one, so that appendBlocks does not clear its run for each text.
func (b *blockScanner) reset(s string, k scanKind) {
	b.s, b.kind, b.base, b.runBase, b.runN = s, k, -1, -1, 0
}

// next returns the end of the pre-token that starts at s[pos] (pos < len(s),
// and pos a pre-token start). The common case, the end known in pos's
// block, inlines; nextSlow does the rest.
func (b *blockScanner) next(pos int) int {
	m := (b.starts | b.unknown) &^ (2<<(pos&63) - 1)
	if pos&^63 == b.base && m != 0 && b.unknown&(m&-m) == 0 {
		return b.base + bits.TrailingZeros64(m)
	}
	return b.nextSlow(pos)
}

func (b *blockScanner) nextSlow(pos int) int {
	base := pos &^ 63
	if base != b.base {
		b.load(base)
	}
	// The bits above pos in its block, then the following blocks.
	m := (b.starts | b.unknown) &^ (2<<(pos&63) - 1)
	if m == 0 {
		return b.past(pos)
	}
	i := bits.TrailingZeros64(m)
	if b.unknown>>i&1 != 0 {
		return pos + scanPreToken(b.kind, b.s[pos:])
	}
	return b.base + i
}

// past returns the end of the pre-token that starts at s[pos] when it runs
// past pos's block: the first start of the blocks after, which it loads
// (the first may be loaded already), or the end of s; scanPreToken's where
// an unknown comes first.
func (b *blockScanner) past(pos int) int {
	for base := pos&^63 + 64; base < len(b.s); base += 64 {
		if base != b.base {
			b.load(base)
		}
		if m := b.starts | b.unknown; m != 0 {
			i := bits.TrailingZeros64(m)
			if b.unknown>>i&1 != 0 {
				return pos + scanPreToken(b.kind, b.s[pos:])
			}
			return base + i
		}
	}
	return len(b.s)
}

// scanPreToken returns the length of the pre-token at the start of s, which
// starts one: for a scanner of two levels (innerScan), the inner scanner's
// within the outer piece. Neither regex looks behind, so the pre-tokens from
// any start on do not depend on the text before it.
func scanPreToken(k scanKind, s string) int {
	if in := innerScan(k); in != scanNone {
		return scan(in, s[:scan(k, s)])
	}
	return scan(k, s)
}

// prevB is the mask of the byte before each byte: in for byte 0 (0 or 1).
func prevB(m, in uint64) uint64 { return m<<1 | in }

// nextB is the mask of the byte after each byte: in for byte 63.
func nextB(m, in uint64) uint64 { return m>>1 | in<<63 }

// Class bits of a single byte (for the bytes around a block).
const (
	cL = 1 << iota
	cD
	cS // white space other than a newline: ' ' and \t
	cNL
	cP
	cX  // non-ASCII, a control byte other than \t \r \n, or DEL: not handled
	cSP // ' ' (with cS)
	cLo // a lower-case letter (with cL)
)

var byteClass = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c >= 0x80 || c == 0x7f || c < 0x20 && c != '\t' && c != '\n' && c != '\r':
			t[c] = cX
		case c >= 'a' && c <= 'z':
			t[c] = cL | cLo
		case c >= 'A' && c <= 'Z':
			t[c] = cL
		case c >= '0' && c <= '9':
			t[c] = cD
		case c == ' ':
			t[c] = cS | cSP
		case c == '\t':
			t[c] = cS
		case c == '\n' || c == '\r':
			t[c] = cNL
		default:
			t[c] = cP
		}
	}
	return
}()

// load sets starts and unknown to those of the block at base (a multiple of
// 64, before the end of s), from run, which it fills from base when base's
// block is not in it.
func (b *blockScanner) load(base int) {
	i := (base - b.runBase) >> 6
	if base < b.runBase || i >= b.runN {
		b.fill(base)
		i = 0
	}
	b.base, b.starts, b.unknown = base, b.run[i][0], b.run[i][1]
}

// fill computes run for the blocks from base, up to runBlocks of them.
func (b *blockScanner) fill(base int) {
	b.runBase = base
	n := 0
	for ; n < runBlocks && base < len(b.s); n, base = n+1, base+64 {
		b.run[n][0], b.run[n][1] = b.masks(base)
	}
	b.runN = n
	if b.runBase == 0 {
		b.run[0][0] |= 1 // the text's start
	}
}

// masks computes the starts and unknowns of the block at base (a multiple
// of 64, before the end of s). In the text's last block, unless it ends at
// the block's end, the bit past the text's last byte is a start: the
// text's end.
func (b *blockScanner) masks(base int) (uint64, uint64) {
	s := b.s
	n := min(64, len(s)-base)
	var c classify.Masks
	if n == 64 {
		c.FromString(s, base)
	} else {
		// Past the end reads as white space, which is what the rules need
		// there (\s+(?!\S) runs to the end of the text); those bits are
		// cleared below.
		buf := spaceBlock
		copy(buf[:], s[base:])
		c.FromArray(&buf)
	}
	// The classes of the two bytes before the block and of the one after.
	nb := neighbours{next: cS} // the end of the text reads as white space
	if base >= 1 {
		nb.c1 = byteClass[s[base-1]]
	}
	if base >= 2 {
		nb.c2 = byteClass[s[base-2]]
	}
	if base+64 < len(s) {
		nb.next = byteClass[s[base+64]]
	}
	var t, unknown uint64
	switch b.kind {
	case scanGPT2, scanDigitsGPT2:
		t, unknown = b.gpt2Rules(base, &c, nb)
	default:
		t, unknown = b.qwenRules(base, &c, nb)
	}
	if n < 64 {
		// The text's end ends its last pre-token: the bit past its last
		// byte is set as a start's, which next returns as the end and
		// appendBlocks' inner loop takes as one.
		valid := uint64(1)<<n - 1
		return t&valid | 1<<n, unknown & valid
	}
	return t, unknown
}

// spaceBlock is 64 spaces: the start of load's copy of a last, partial block.
var spaceBlock = [64]byte([]byte(strings.Repeat(" ", 64)))

// neighbours are the classes of the bytes around a block: c1 and c2 the one
// and two before it (0 at the start of the text), next the one after.
type neighbours struct{ c1, c2, next uint8 }

// prev is the mask of the byte before each byte, in class cls.
func (nb neighbours) prev(m uint64, cls uint8) uint64 { return prevB(m, bit(nb.c1&cls != 0)) }

// prev2 is the mask of the byte two before each byte, in class cls.
func (nb neighbours) prev2(m uint64, cls uint8) uint64 {
	return prevB(prevB(m, bit(nb.c1&cls != 0)), bit(nb.c2&cls != 0))
}

// qwenRules are the starts and unknowns of a block under PatternQwen2 and
// the patterns built like it: PatternLlama3, DeepSeek-V3's three Splits,
// PatternO200k and PatternTekken (their differences: o200kRules). DeepSeek
// differs from Llama-3 (its \p{N}{1,3} too) in two ways over ASCII: it has
// no contractions, and its digit groups are pieces of their own, so white
// space before one ends at the piece's end as at the end of the text ("a  1"
// is "a", "  ", "1"). Its [P][A-Za-z]+ and [^\r\n\p{L}\p{P}\p{S}]?\p{L}+
// give letters the prefixes Qwen2's [^\r\n\p{L}\p{N}]?\p{L}+ gives them.
func (b *blockScanner) qwenRules(base int, c *classify.Masks, nb neighbours) (t, unknown uint64) {
	k := b.kind
	singleDigits := k == scanQwen2 || k == scanTekken
	w := c.S | c.NL
	pm := ^(c.L | c.D | w | c.X) // P (and past the end: cleared by load)
	prevL, prevD, prevNL := nb.prev(c.L, cL), nb.prev(c.D, cD), nb.prev(c.NL, cNL)
	prevP, prevSP, prevW := nb.prev(pm, cP), nb.prev(c.SP, cSP), nb.prev(w, cS|cNL)
	prev2P, prev2SP := nb.prev2(pm, cP), nb.prev2(c.SP, cSP)
	nextW := nextB(w, bit(nb.next&(cS|cNL) != 0))
	if k == scanDeepSeek {
		nextW |= nextB(c.D, bit(nb.next&cD != 0))
	}
	prevX := nb.prev(c.X, cX)

	t = c.L & (prevD | prevNL | prevP&(prev2P|prev2SP))
	t |= pm &^ prevP &^ prevSP
	t |= c.NL & (prevL | prevD)
	t |= c.S & (^prevW | ^nextW)
	unknown = c.S & prevNL & nextW
	if singleDigits {
		t |= c.D
	} else {
		t |= c.D &^ prevD
	}
	// Non-ASCII and control bytes, and the bytes whose rules read them.
	unknown |= c.X | prevX | nb.prev2(c.X, cX) | nextB(c.X, bit(nb.next&cX != 0))
	if !singleDigits && c.D&prevD != 0 {
		t, unknown = llamaDigits(c.D, prevD, prevX, t, unknown)
	}
	switch k {
	case scanDeepSeek:
		return t, unknown
	case scanO200k, scanTekken:
		return b.o200kRules(base, c, nb, t, unknown, pm&prevNL, prevL, prevX)
	}
	// Contractions: an apostrophe that starts a pre-token (as a P one does)
	// ends it after the contraction. (Its letters start none: after the
	// apostrophe, a P that starts, and a letter.)
	return b.contractions(base, c, prevP|prevSP, prevX, t, unknown, true)
}

// gpt2Rules are the starts and unknowns of a block under PatternGPT2, and
// under SmolLM2's Digits(individual_digits) before it. Over ASCII (L letter,
// D digit, P other printable, W white space, ' ' also SP), whether a
// pre-token starts at byte i depends on bytes i-1, i and i+1 only:
//
//	L, D, P: unless after its own class or after ' ' (" ?\p{L}+" and so on;
//	    a ' ' right before a byte that is not white space always starts a
//	    pre-token);
//	W:  after a byte that is not white space, or as the last of a run of
//	    white space before one that is not (\s+(?!\S) leaves it over);
//	contractions ('s 't 're 've 'm 'll 'd, case-sensitive) where an
//	    apostrophe starts a pre-token: after them one starts, within none.
//
// With individual digits, every digit is a piece of its own: it starts a
// pre-token, so does the byte after it, and white space before it ends at
// the piece's end as at the end of the text.
func (b *blockScanner) gpt2Rules(base int, c *classify.Masks, nb neighbours) (t, unknown uint64) {
	w := c.S | c.NL
	pm := ^(c.L | c.D | w | c.X)
	prevL, prevD, prevP := nb.prev(c.L, cL), nb.prev(c.D, cD), nb.prev(pm, cP)
	prevSP, prevW, prevX := nb.prev(c.SP, cSP), nb.prev(w, cS|cNL), nb.prev(c.X, cX)
	nextW := nextB(w, bit(nb.next&(cS|cNL) != 0))
	if b.kind == scanDigitsGPT2 {
		nextW |= nextB(c.D, bit(nb.next&cD != 0))
		t = c.D | prevD
	} else {
		t = c.D &^ prevD &^ prevSP
	}
	t |= c.L &^ prevL &^ prevSP
	t |= pm &^ prevP &^ prevSP
	t |= w & (^prevW | ^nextW)
	unknown = c.X | prevX | nextB(c.X, bit(nb.next&cX != 0))
	return b.contractions(base, c, prevP|prevSP, prevX, t, unknown, false)
}

// o200kRules adds to qwenRules' t and unknown (pAfterNL: the P bytes after
// a newline; prevL, prevX: whether the byte before each is a letter,
// non-ASCII) what PatternO200k (gpt-oss) and PatternTekken (Mistral-NeMo)
// do differently over ASCII (digits: o200k's \p{N}{1,3} as Llama-3's,
// Tekken's \p{N} as Qwen2's, in qwenRules):
//
//	case: a word is [A-Z]*[a-z]+ or [A-Z]+[a-z]*, so an upper-case letter
//	    after a lower-case one starts a pre-token ("aBc" is "a", "Bc");
//	contractions (o200k only, either case) end the word before them: the
//	    apostrophe after a letter starts none, nor do the contraction's
//	    letters, and the byte after it starts one;
//	a P run's tail [\r\n/]* takes a '/' after a newline, where a newline
//	    run would not: such a '/' and the two bytes after it are unknown.
//
// An apostrophe two or three bytes before another one (as in "'s's", where
// the first contraction is not a word's) leaves the latter and the three
// bytes after it unknown.
func (b *blockScanner) o200kRules(base int, c *classify.Masks, nb neighbours, t, unknown, pAfterNL, prevL, prevX uint64) (uint64, uint64) {
	s := b.s
	t |= c.U & nb.prev(c.L&^c.U, cLo)
	// A '/' after a newline, and the two bytes after it.
	for m := pAfterNL; m != 0; m &= m - 1 {
		if i := bits.TrailingZeros64(m); s[base+i] == '/' {
			unknown |= 7 << i
		}
	}
	for j := max(1, base-2); j < base; j++ {
		if s[j] == '/' && byteClass[s[j-1]]&cNL != 0 {
			unknown |= 7 >> (base - j) // the bits of j+1 and j+2 in the block
		}
	}
	if b.kind == scanTekken {
		return t, unknown
	}
	// Contractions after a word: an apostrophe after a letter. After a
	// non-ASCII byte, which may be a letter, the three bytes after it are
	// unknown.
	apx := c.AP & prevX
	unknown |= apx<<1 | apx<<2 | apx<<3
	for aps := c.AP & prevL; aps != 0; aps &= aps - 1 {
		i := bits.TrailingZeros64(aps)
		p := base + i
		if p >= 2 && s[p-2] == '\'' || p >= 3 && s[p-3] == '\'' {
			unknown |= 15 << i
			continue
		}
		if k := contraction(s[p:], true); k > 0 {
			t = t&^((1<<k-1)<<i) | 1<<(i+k)
		}
	}
	// A contraction that began in the three bytes before the block, when
	// one of them is an apostrophe (rare).
	if base == 0 || s[base-3] != '\'' && s[base-2] != '\'' && s[base-1] != '\'' {
		return t, unknown
	}
	for j := base - 3; j < base; j++ {
		if s[j] != '\'' || byteClass[s[j-1]]&(cL|cX) == 0 {
			continue
		}
		if byteClass[s[j-1]]&cX != 0 || j >= 2 && s[j-2] == '\'' || j >= 3 && s[j-3] == '\'' {
			unknown |= 15 >> (base - j)
		} else if k := contraction(s[j:], true); j+k >= base {
			t = t&^(1<<(j+k-base)-1) | 1<<(j+k-base)
		}
	}
	return t, unknown
}

// contractions marks the pre-token ends of contractions ('s 't 're 've 'm
// 'll 'd; fold: of either case) in the block at base: an apostrophe that
// starts a pre-token (not after a P or ' ', noStart) ends one after its
// contraction, and none starts within it. An apostrophe after a non-ASCII
// byte may or may not start one: the three bytes after it are unknown. The
// contractions that begin in the three bytes before the block are looked
// for when one of them is an apostrophe (rare).
func (b *blockScanner) contractions(base int, c *classify.Masks, noStart, prevX, t, unknown uint64, fold bool) (uint64, uint64) {
	s := b.s
	if aps := c.AP &^ noStart; aps != 0 {
		apx := aps & prevX
		unknown |= apx<<1 | apx<<2 | apx<<3
		for aps &^= apx; aps != 0; aps &= aps - 1 {
			i := bits.TrailingZeros64(aps)
			if k := contraction(s[base+i:], fold); k > 0 {
				t = t&^((1<<(k-1)-1)<<(i+1)) | 1<<(i+k) // past 63: shifted out
			}
		}
	}
	if base > 0 && (s[base-3] == '\'' || s[base-2] == '\'' || s[base-1] == '\'') {
		for j := max(0, base-3); j < base; j++ {
			if s[j] != '\'' || j > 0 && (byteClass[s[j-1]]&cP != 0 || s[j-1] == ' ') {
				continue
			}
			if j > 0 && byteClass[s[j-1]]&cX != 0 {
				unknown |= 7
			} else if k := contraction(s[j:], fold); j+k >= base {
				// the bits of s[j+1:j+k] and s[j+k] that are in the block
				t = t&^(1<<(j+k-base)-1) | 1<<(j+k-base)
			}
		}
	}
	return t, unknown
}

// llamaDigits marks the Llama-3 digit starts of runs longer than one digit:
// every third digit from the run's start. A run that began in the block
// before, or after a non-ASCII byte (which may be a digit), is unknown.
func llamaDigits(d, prevD, prevX, t, unknown uint64) (uint64, uint64) {
	runs := d &^ prevD
	cont := runs&prevX | d&prevD&1
	runs |= d & prevD & 1
	for runs != 0 {
		r := bits.TrailingZeros64(runs)
		runs &= runs - 1
		n := bits.TrailingZeros64(^(d >> r))
		if cont>>r&1 != 0 {
			if r+n == 64 {
				unknown |= ^uint64(0) << r
			} else {
				unknown |= (1<<n - 1) << r
			}
			continue
		}
		for k := r + 3; k < r+n; k += 3 {
			t |= 1 << k
		}
	}
	return t, unknown
}

func bit(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

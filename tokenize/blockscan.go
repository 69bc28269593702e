package tokenize

import (
	"math/bits"

	"github.com/ferryml/ferry/tokenize/internal/classify"
)

// A block scanner for PatternQwen2 and PatternLlama3 over ASCII text. It
// classifies 64 bytes at a time (internal/classify: AVX2 compares where the
// machine has them, else SWAR, eight bytes per uint64) into
// masks of letters, digits, white space, newlines and so on, and derives the
// pre-token starts of the whole block with 64-bit mask arithmetic, so that
// an encode loop finds each pre-token's end with one TrailingZeros instead
// of running scan's per-character branches.
//
// The encode loop uses it where the classifier is AVX2 (blockScanKind):
// 64 bytes cost about 22 ns there against 80-150 ns in SWAR, and
// BenchmarkPreTokens finds the boundaries 2.1x as fast as scan's (660
// against 310 MB/s on the Alpaca demo). With the SWAR classifier the block
// scanner is no faster than scan, so scan stays the pure-Go path.
//
// Over ASCII, whether a pre-token starts at byte i depends only on the
// classes of the bytes at i-2, i-1, i and i+1 (L letter, D digit, S white
// space other than a newline, NL \r or \n, P any other printable byte), as
// the regex's alternatives give it:
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
// the exact scanner (scan) from the last known start instead: a block or
// neighbour with a non-ASCII or control byte, S after NL before white space
// (it starts a pre-token only when no newline follows in the run), and a
// Llama-3 digit run that began in an earlier block. FuzzBlockScan checks the
// starts against scan's.

// blockScanner finds the pre-token ends of one text. The zero value is not
// usable: see newBlockScanner.
type blockScanner struct {
	s       string
	llama   bool
	base    int    // start of the block that starts and unknown describe; -1 none
	starts  uint64 // bit i: a pre-token starts at s[base+i]
	unknown uint64 // bit i: whether one starts there is not known
}

// newBlockScanner returns the block scanner of s for k, scanQwen2 or scanLlama3.
// blockScanKind reports whether the encode loop uses the block scanner for
// scanner k: for Qwen2 and Llama-3 where the classifier is SIMD. With the
// pure-Go classifier (about 2 ns a byte) scan is faster.
func blockScanKind(k scanKind) bool { return classify.SIMD && (k == scanQwen2 || k == scanLlama3) }

func newBlockScanner(s string, k scanKind) blockScanner {
	return blockScanner{s: s, llama: k == scanLlama3, base: -1}
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
	for m == 0 {
		base += 64
		if base >= len(b.s) {
			return len(b.s)
		}
		b.load(base)
		m = b.starts | b.unknown
	}
	i := bits.TrailingZeros64(m)
	if b.unknown>>i&1 != 0 {
		return pos + scanQwenLlama(b.llama, b.s[pos:])
	}
	return b.base + i
}

func scanQwenLlama(llama bool, s string) int {
	if llama {
		return scan(scanLlama3, s)
	}
	return scan(scanQwen2, s)
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
)

var byteClass = func() (t [256]uint8) {
	for c := range 256 {
		switch {
		case c >= 0x80 || c == 0x7f || c < 0x20 && c != '\t' && c != '\n' && c != '\r':
			t[c] = cX
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
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

// load computes starts and unknown for the block at base (a multiple of 64).
func (b *blockScanner) load(base int) {
	s := b.s
	n := min(64, len(s)-base)
	var c classify.Masks
	if n == 64 {
		c = classify.String(s, base)
	} else {
		var buf [64]byte
		// Past the end reads as white space, which is what the rules need
		// there (\s+(?!\S) runs to the end of the text); those bits are
		// cleared below.
		copy(buf[:], s[base:])
		for i := n; i < 64; i++ {
			buf[i] = ' '
		}
		c = classify.Array(&buf)
	}
	valid := ^uint64(0)
	if n < 64 {
		valid = 1<<n - 1
	}
	w := c.S | c.NL
	pm := ^(c.L | c.D | w | c.X) // P (and past the end: cleared below)

	// The classes of the two bytes before the block and of the one after.
	var c1, c2 uint8 // none at the start of the text
	if base >= 1 {
		c1 = byteClass[s[base-1]]
	}
	if base >= 2 {
		c2 = byteClass[s[base-2]]
	}
	cNext := uint8(cS) // the end of the text reads as white space
	if base+64 < len(s) {
		cNext = byteClass[s[base+64]]
	}
	prev := func(m uint64, cls uint8) uint64 { return prevB(m, bit(c1&cls != 0)) }
	prev2 := func(m uint64, cls uint8) uint64 { return prevB(prevB(m, bit(c1&cls != 0)), bit(c2&cls != 0)) }
	prevL, prevD, prevNL := prev(c.L, cL), prev(c.D, cD), prev(c.NL, cNL)
	prevP, prevSP, prevW := prev(pm, cP), prev(c.SP, cSP), prev(w, cS|cNL)
	prev2P, prev2SP := prev2(pm, cP), prev2(c.SP, cSP)
	nextW := nextB(w, bit(cNext&(cS|cNL) != 0))
	prevX := prev(c.X, cX)

	t := c.L & (prevD | prevNL | prevP&(prev2P|prev2SP))
	t |= pm &^ prevP &^ prevSP
	t |= c.NL & (prevL | prevD)
	t |= c.S & (^prevW | ^nextW)
	unknown := c.S & prevNL & nextW
	if b.llama {
		t |= c.D &^ prevD
	} else {
		t |= c.D
	}
	// Non-ASCII and control bytes, and the bytes whose rules read them.
	unknown |= c.X | prevX | prev2(c.X, cX) | nextB(c.X, bit(cNext&cX != 0))
	aps := c.AP &^ prevP &^ prevSP
	apx := aps & prevX
	if b.llama && c.D&prevD != 0 {
		t, unknown = llamaDigits(c.D, prevD, prevX, t, unknown)
	}
	// Contractions: an apostrophe that starts a pre-token (as a P one does)
	// ends it after the contraction; the starts from those of the last
	// three bytes of the block before. An apostrophe after a non-ASCII byte
	// may or may not start one: the three bytes after it are unknown.
	if aps != 0 {
		unknown |= apx<<1 | apx<<2 | apx<<3
		for aps &^= apx; aps != 0; aps &= aps - 1 {
			i := bits.TrailingZeros64(aps)
			if k := contraction(s[base+i:], true); k > 0 && i+k < 64 {
				t |= 1 << (i + k)
			}
		}
	}
	// The three bytes before the block (base is 0 or at least 64), when one
	// is an apostrophe (rare).
	if base > 0 && (s[base-3] == '\'' || s[base-2] == '\'' || s[base-1] == '\'') {
		b.contractionsBefore(base, &t, &unknown)
	}
	if base == 0 {
		t |= 1
	}
	b.base, b.starts, b.unknown = base, t&valid, unknown&valid
}

// contractionsBefore marks the pre-token starts (and unknowns) in the block
// at base that contractions starting in the three bytes before it give.
func (b *blockScanner) contractionsBefore(base int, t, unknown *uint64) {
	s := b.s
	for j := max(0, base-3); j < base; j++ {
		if s[j] != '\'' || j > 0 && (byteClass[s[j-1]]&cP != 0 || s[j-1] == ' ') {
			continue
		}
		if j > 0 && byteClass[s[j-1]]&cX != 0 {
			*unknown |= 7
		} else if k := contraction(s[j:], true); j+k >= base {
			*t |= 1 << (j + k - base)
		}
	}
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

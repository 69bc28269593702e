package tokenize

import (
	"math/bits"
	"unsafe"
)

// A block scanner for PatternQwen2 and PatternLlama3 over ASCII text. It
// classifies 64 bytes at a time (with AVX2 compares where the machine has
// them, classify_amd64.s; else with SWAR, eight bytes per uint64) into
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
func blockScanKind(k scanKind) bool { return hasAVX2 && (k == scanQwen2 || k == scanLlama3) }

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

// SWAR helpers over eight bytes, each < 0x80 (the high bits cleared).
const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
	low7 = 0x7f7f7f7f7f7f7f7f
)

// geq sets the high bit of each byte of x that is >= c (x's bytes < 0x80, c >= 1).
func geq(x uint64, c byte) uint64 { return (x + (0x80-uint64(c))*ones) & high }

// eq sets the high bit of each byte of x equal to c.
func eq(x uint64, c byte) uint64 {
	t := x ^ uint64(c)*ones
	return ^(t + low7 | t) & high
}

// The SWAR classifier computes masks in a transposed order: bit 8k+j is
// byte 8j+k, so that the high bits of the eight words are gathered with one
// shift each (word j's byte k is at bit 8k+7). transpose turns them into the
// byte order (bit i is byte i) and back.
func transpose(x uint64) uint64 {
	x = x&0xAA55AA55AA55AA55 | (x&0x00AA00AA00AA00AA)<<7 | (x>>7)&0x00AA00AA00AA00AA
	x = x&0xCCCC3333CCCC3333 | (x&0x0000CCCC0000CCCC)<<14 | (x>>14)&0x0000CCCC0000CCCC
	return x&0xF0F0F0F00F0F0F0F | (x&0x00000000F0F0F0F0)<<28 | (x>>28)&0x00000000F0F0F0F0
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

// classMasks are the class masks of a block: bit i is byte i.
type classMasks struct{ l, d, s, sp, nl, ap, x uint64 }

// classifyGo computes the masks of the 64 bytes at p in pure Go: classify
// where there is no SIMD classifier (see classify_amd64.go), and the
// reference that one is tested against.
func classifyGo(p *[64]byte) classMasks {
	c := classifySWAR(p[:])
	return classMasks{transpose(c.l), transpose(c.d), transpose(c.s), transpose(c.sp), transpose(c.nl), transpose(c.ap), transpose(c.x)}
}

// classifySWAR computes the masks of the first 64 bytes of p eight bytes
// at a time, in the transposed order.
func classifySWAR[T string | []byte](p T) (c classMasks) {
	p = p[:64]
	for j := 0; j < 8; j++ {
		q := p[8*j : 8*j+8]
		w := uint64(q[0]) | uint64(q[1])<<8 | uint64(q[2])<<16 | uint64(q[3])<<24 |
			uint64(q[4])<<32 | uint64(q[5])<<40 | uint64(q[6])<<48 | uint64(q[7])<<56
		hi := w & high
		x := w &^ high              // a non-ASCII byte's classes are cleared below
		y := x | 0x2020202020202020 // upper-case letters to lower case
		l := geq(y, 'a') &^ geq(y, 'z'+1)
		d := geq(x, '0') &^ geq(x, '9'+1)
		sp := eq(x, ' ')
		ap := eq(x, '\'')
		xx := hi | geq(x, 0x7f)
		var tab, nl uint64
		if lt := ^geq(x, 0x20) & high &^ hi; lt != 0 { // control bytes: rare
			tab = eq(x, '\t') & lt
			nl = (eq(x, '\n') | eq(x, '\r')) & lt
			xx |= lt &^ tab &^ nl
		}
		sh := uint(7 - j)
		c.l |= l >> sh
		c.d |= d >> sh
		c.s |= (sp | tab) >> sh
		c.sp |= sp >> sh
		c.nl |= nl >> sh
		c.ap |= ap >> sh
		c.x |= xx >> sh
	}
	c.l &^= c.x
	c.d &^= c.x
	c.s &^= c.x
	c.sp &^= c.x
	c.ap &^= c.x
	return c
}

// load computes starts and unknown for the block at base (a multiple of 64).
func (b *blockScanner) load(base int) {
	s := b.s
	n := min(64, len(s)-base)
	var c classMasks
	if n == 64 {
		c = classify((*[64]byte)(unsafe.Pointer(unsafe.StringData(s[base:]))))
	} else {
		var buf [64]byte
		// Past the end reads as white space, which is what the rules need
		// there (\s+(?!\S) runs to the end of the text); those bits are
		// cleared below.
		copy(buf[:], s[base:])
		for i := n; i < 64; i++ {
			buf[i] = ' '
		}
		c = classify(&buf)
	}
	valid := ^uint64(0)
	if n < 64 {
		valid = 1<<n - 1
	}
	w := c.s | c.nl
	pm := ^(c.l | c.d | w | c.x) // P (and past the end: cleared below)

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
	prevL, prevD, prevNL := prev(c.l, cL), prev(c.d, cD), prev(c.nl, cNL)
	prevP, prevSP, prevW := prev(pm, cP), prev(c.sp, cSP), prev(w, cS|cNL)
	prev2P, prev2SP := prev2(pm, cP), prev2(c.sp, cSP)
	nextW := nextB(w, bit(cNext&(cS|cNL) != 0))
	prevX := prev(c.x, cX)

	t := c.l & (prevD | prevNL | prevP&(prev2P|prev2SP))
	t |= pm &^ prevP &^ prevSP
	t |= c.nl & (prevL | prevD)
	t |= c.s & (^prevW | ^nextW)
	unknown := c.s & prevNL & nextW
	if b.llama {
		t |= c.d &^ prevD
	} else {
		t |= c.d
	}
	// Non-ASCII and control bytes, and the bytes whose rules read them.
	unknown |= c.x | prevX | prev2(c.x, cX) | nextB(c.x, bit(cNext&cX != 0))
	aps := c.ap &^ prevP &^ prevSP
	apx := aps & prevX
	if b.llama && c.d&prevD != 0 {
		t, unknown = llamaDigits(c.d, prevD, prevX, t, unknown)
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

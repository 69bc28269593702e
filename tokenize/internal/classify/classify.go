// Package classify classifies 64 bytes of text at a time into the byte
// classes tokenize's block scanner reads (blockscan.go): one bit per byte in
// each mask (letters, upper-case letters, digits, spaces, newlines, the
// apostrophe, and the rest of what is not plain ASCII text; see Masks).
// Where the CPU has AVX2 (amd64, without the purego or noasm tags) the
// compares are SIMD (classify_amd64.s, about 15 ns a block here); elsewhere
// they are SWAR in pure Go (eight bytes per uint64, about 95 ns), which is
// also the reference the SIMD path is tested against. ASCIILen, the length
// of a text's ASCII prefix, reads 64 bytes at a time the same way.
package classify

import "github.com/ferryml/ferry/tokenize/internal/bytestr"

// Masks are the class masks of a block: bit i is byte i. A byte in X is in
// no other mask. U is a subset of L; it is the last field so that the
// fields before it keep their places.
type Masks struct {
	L  uint64 // ASCII letters
	D  uint64 // ASCII digits
	S  uint64 // ' ' and '\t'
	SP uint64 // ' '
	NL uint64 // '\n' and '\r'
	AP uint64 // the apostrophe
	X  uint64 // bytes >= 0x80, DEL, and control bytes but '\t', '\n', '\r'
	U  uint64 // ASCII upper-case letters 'A'..'Z' (a subset of L)
}

// SWAR helpers over eight bytes, each < 0x80 (the high bits cleared).
const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
	low7 = 0x7f7f7f7f7f7f7f7f
)

// goASCIILen returns the length of the ASCII prefix of s: 32, then 8 bytes
// at a time (bytestr.Load64: each loop's bound keeps its reads in s), then
// byte by byte.
func goASCIILen(s string) int {
	i := 0
	for ; i+32 <= len(s); i += 32 {
		if (bytestr.Load64(s, i)|bytestr.Load64(s, i+8)|bytestr.Load64(s, i+16)|bytestr.Load64(s, i+24))&high != 0 {
			break
		}
	}
	for ; i+8 <= len(s); i += 8 {
		if bytestr.Load64(s, i)&high != 0 {
			break
		}
	}
	for ; i < len(s) && s[i] < 0x80; i++ {
	}
	return i
}

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

// Go computes the masks of the 64 bytes at p in pure Go: the classifier
// where there is no SIMD one, and the reference that one is tested against.
func Go(p *[64]byte) Masks { return fromSWAR(swar(p[:])) }

// goString is Go of s[i:i+64].
func goString(s string, i int) Masks { return fromSWAR(swar(s[i : i+64])) }

// fromSWAR turns swar's transposed masks into the byte order.
func fromSWAR(c Masks) Masks {
	return Masks{
		L: transpose(c.L), D: transpose(c.D), S: transpose(c.S), SP: transpose(c.SP),
		NL: transpose(c.NL), AP: transpose(c.AP), X: transpose(c.X), U: transpose(c.U),
	}
}

// swar computes the masks of the first 64 bytes of p eight bytes at a
// time, in the transposed order.
func swar[T string | []byte](p T) (c Masks) {
	p = p[:64]
	for j := 0; j < 8; j++ {
		q := p[8*j : 8*j+8]
		w := uint64(q[0]) | uint64(q[1])<<8 | uint64(q[2])<<16 | uint64(q[3])<<24 |
			uint64(q[4])<<32 | uint64(q[5])<<40 | uint64(q[6])<<48 | uint64(q[7])<<56
		hi := w & high
		x := w &^ high              // a non-ASCII byte's classes are cleared below
		y := x | 0x2020202020202020 // upper-case letters to lower case
		l := geq(y, 'a') &^ geq(y, 'z'+1)
		u := l &^ (x << 2) // letters whose bit 0x20 (moved to bit 0x80) is clear
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
		c.L |= l >> sh
		c.D |= d >> sh
		c.S |= (sp | tab) >> sh
		c.SP |= sp >> sh
		c.NL |= nl >> sh
		c.AP |= ap >> sh
		c.X |= xx >> sh
		c.U |= u >> sh
	}
	c.L &^= c.X
	c.D &^= c.X
	c.S &^= c.X
	c.SP &^= c.X
	c.AP &^= c.X
	c.U &^= c.X
	return c
}

// PrefetchLen is how much of a string Prefetch asks for: 16 cache lines.
// The CPU's own prefetcher takes a longer text's next lines from there.
const PrefetchLen = 1024

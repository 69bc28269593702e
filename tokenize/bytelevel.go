package tokenize

import "unicode/utf8"

// byteToRune is GPT-2's bytes_to_unicode: the printable bytes ! to ~, ¡ to ¬
// and ® to ÿ stand for themselves; the other 68 bytes map to U+0100 onwards.
var byteToRune, runeToByte = func() (b2r [256]rune, r2b [byteRunes]int16) {
	for i := range r2b {
		r2b[i] = -1
	}
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			b2r[b] = rune(b)
		} else {
			b2r[b] = 256 + n
			n++
		}
		r2b[b2r[b]] = int16(b)
	}
	return
}()

// byteRunes bounds the byte-level characters: all are below U+0144.
const byteRunes = 0x144

// appendByteLevelDecode appends the bytes of a byte-level token to dst,
// or the token itself, with ok false, when it is not one.
func appendByteLevelDecode(dst []byte, tok string) ([]byte, bool) {
	n := len(dst)
	for _, r := range tok {
		if r >= byteRunes || runeToByte[r] < 0 {
			return append(dst[:n], tok...), false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

// byteLevelDecode turns a byte-level token string back into raw bytes. ok is
// false when a character is not one of the 256 byte-level characters; HF's
// ByteLevel decoder then uses the token's own UTF-8 bytes.
func byteLevelDecode(tok string) (raw []byte, ok bool) {
	raw = make([]byte, 0, len(tok))
	for _, r := range tok {
		if r >= byteRunes || runeToByte[r] < 0 {
			return []byte(tok), false
		}
		raw = append(raw, byte(runeToByte[r]))
	}
	return raw, true
}

// appendLossy appends s to dst with every invalid UTF-8 sequence replaced by
// U+FFFD, one per maximal subpart as Rust's String::from_utf8_lossy, Python's
// errors="replace" and the WHATWG decoder do.
func appendLossy(dst []byte, s []byte) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if _, n := utf8.DecodeRune(s[i:]); n > 1 {
			dst = append(dst, s[i:i+n]...)
			i += n
			continue
		}
		i += invalidLen(s[i:])
		dst = append(dst, "\uFFFD"...)
	}
	return dst
}

// invalidLen is the length of the maximal subpart of a UTF-8 sequence at the
// start of s, which does not start with a valid character: at least 1.
func invalidLen(s []byte) int {
	c := s[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(s); k++ {
		b := s[n]
		if b < lo || b > hi {
			break
		}
		lo, hi = 0x80, 0xBF
		n++
	}
	return n
}

// toValid returns s with invalid UTF-8 replaced as appendLossy does.
func toValid(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return string(appendLossy(make([]byte, 0, len(s)+8), []byte(s)))
}

// ValidUTF8 returns s with every invalid UTF-8 sequence replaced by U+FFFD,
// one per maximal subpart, as Python's errors="replace", JavaScript's
// TextDecoder and Rust's from_utf8_lossy do: the text HF tokenizers would see.
// It returns s itself when s is valid.
func ValidUTF8(s string) string { return toValid(s) }

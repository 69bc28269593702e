package classify

import "testing"

// FuzzClassify: the SIMD classifier gives the pure-Go one's masks, all
// eight of them, on any block (where this build and machine have it; make
// test also runs the tokenize packages with -tags noasm, which tests the
// pure-Go path alone), and the pure-Go one gives each byte's class (want).
// tokenize's TestClassify checks both against tokenize's byte classes.
func FuzzClassify(f *testing.F) {
	f.Add([]byte("Hello, world! It's 12345 o'clock.\n\n### Response:\n  x\t\r\x00\x7f\x80\xff"))
	f.Add([]byte("@AZ[`az{ \xc1\xda\xe1\xfa\x41\x5a ABCXYZ abcxyz ÀÉÎ"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var buf [64]byte
		copy(buf[:], b)
		want := Go(&buf)
		if ref := byteMasks(&buf); want != ref {
			t.Fatalf("Go(%q) = %+v, want %+v", buf, want, ref)
		}
		var got Masks
		if got.FromArray(&buf); got != want {
			t.Fatalf("FromArray(%q) = %+v, pure Go %+v", buf, got, want)
		}
		if got.FromString("head"+string(buf[:])+"tail", 4); got != want {
			t.Fatalf("FromString(%q) = %+v, pure Go %+v", buf, got, want)
		}
		if SIMD {
			if got := SIMDArray(&buf); got != want {
				t.Fatalf("SIMDArray(%q) = %+v, pure Go %+v", buf, got, want)
			}
		}
	})
}

// byteMasks is the masks of the 64 bytes at p, byte by byte: the
// specification the classifiers are tested against.
func byteMasks(p *[64]byte) (m Masks) {
	for i, c := range p {
		bit := uint64(1) << i
		switch {
		case c >= 0x80 || c == 0x7f || c < 0x20 && c != '\t' && c != '\n' && c != '\r':
			m.X |= bit
		case 'A' <= c && c <= 'Z':
			m.L |= bit
			m.U |= bit
		case 'a' <= c && c <= 'z':
			m.L |= bit
		case '0' <= c && c <= '9':
			m.D |= bit
		case c == ' ':
			m.S |= bit
			m.SP |= bit
		case c == '\t':
			m.S |= bit
		case c == '\n' || c == '\r':
			m.NL |= bit
		case c == '\'':
			m.AP |= bit
		}
	}
	return m
}

// TestEveryByte checks all the masks (U among them) of the pure-Go
// classifier and, where this build and machine have it, the SIMD one, with
// every byte value at every position of a block, beside other bytes that
// walk through all 256 values too.
func TestEveryByte(t *testing.T) {
	fns := []struct {
		name string
		fn   func(*[64]byte) Masks
	}{{"go", Go}, {"array", func(p *[64]byte) (m Masks) { m.FromArray(p); return m }}}
	if SIMD {
		fns = append(fns, struct {
			name string
			fn   func(*[64]byte) Masks
		}{"simd", SIMDArray})
	}
	for c := range 256 {
		for pos := range 64 {
			var buf [64]byte
			for i := range buf {
				buf[i] = byte(c + 37*i + pos)
			}
			buf[pos] = byte(c)
			want := byteMasks(&buf)
			if u := want.U>>pos&1 != 0; u != ('A' <= c && c <= 'Z') {
				t.Fatalf("byteMasks: byte %#x at %d: U bit %v", c, pos, u)
			}
			for _, f := range fns {
				if got := f.fn(&buf); got != want {
					t.Fatalf("%s: byte %#x at %d in %q: masks %+v, want %+v", f.name, c, pos, buf, got, want)
				}
			}
		}
	}
}

// TestTranspose checks the transposed order against the byte order.
func TestTranspose(t *testing.T) {
	x := uint64(0x9e3779b97f4a7c15)
	for range 1000 {
		x = x*6364136223846793005 + 1442695040888963407
		lin := x
		tr := transpose(lin)
		for i := range 64 {
			if tr>>(8*(i&7)+i>>3)&1 != lin>>i&1 {
				t.Fatalf("transpose(%#x): byte %d misplaced", lin, i)
			}
		}
		if transpose(tr) != lin {
			t.Fatalf("transpose is not its own inverse on %#x", lin)
		}
	}
}

// BenchmarkClassify is the classification of one 64-byte block, by each
// classifier this build and machine have.
func BenchmarkClassify(b *testing.B) {
	var buf [64]byte
	copy(buf[:], "Give three tips for staying healthy.\n\n### Response:\n1. Eat a b")
	fns := map[string]func(*[64]byte) Masks{"go": Go}
	if SIMD {
		fns["simd"] = SIMDArray
	}
	for name, fn := range fns {
		b.Run(name, func(b *testing.B) {
			var sink uint64
			for b.Loop() {
				sink += fn(&buf).L
			}
			_ = sink
		})
	}
}

// byteASCIILen is the length of the ASCII prefix of s, byte by byte.
func byteASCIILen(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return i
		}
	}
	return len(s)
}

// TestASCIILen: ASCIILen (AVX2 where SIMD) and goASCIILen agree with a byte
// loop on every length up to 300 with no byte >= 0x80, and with one at
// every position (0x80 and 0xff), also with a second one after it, and at
// an offset into a larger string (unaligned loads).
func TestASCIILen(t *testing.T) {
	check := func(s string) {
		t.Helper()
		want := byteASCIILen(s)
		if got := ASCIILen(s); got != want {
			t.Fatalf("ASCIILen(%q) = %d, want %d", s, got, want)
		}
		if got := goASCIILen(s); got != want {
			t.Fatalf("goASCIILen(%q) = %d, want %d", s, got, want)
		}
	}
	base := make([]byte, 340)
	for i := range base {
		base[i] = byte('a' + i%26)
	}
	for off := range 4 {
		for n := 0; n <= 300; n++ {
			b := base[off : off+n]
			check(string(b))
			for j := range n {
				for _, c := range []byte{0x80, 0xff} {
					x := append([]byte(nil), b...)
					x[j] = c
					check(string(x))
					if j+37 < n {
						x[j+37] = 0xc3
						check(string(x))
					}
				}
			}
		}
	}
}

// FuzzASCIILen: both ASCIILens agree with a byte loop on any string, and on
// its tails (every alignment).
func FuzzASCIILen(f *testing.F) {
	f.Add("### Instruction:\nGive three tips for staying healthy.\n\n### Response:\n1. Eat a balanced diet, ok?")
	f.Add("東京都は日本の首都です。 It's 2,024 km — ok?")
	f.Fuzz(func(t *testing.T, s string) {
		for k := 0; k < len(s) && k < 64; k++ {
			u := s[k:]
			want := byteASCIILen(u)
			if got := ASCIILen(u); got != want {
				t.Fatalf("ASCIILen(%q) = %d, want %d", u, got, want)
			}
			if got := goASCIILen(u); got != want {
				t.Fatalf("goASCIILen(%q) = %d, want %d", u, got, want)
			}
		}
	})
}

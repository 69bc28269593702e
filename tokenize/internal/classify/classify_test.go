package classify

import "testing"

// FuzzClassify: the SIMD classifier gives the pure-Go one's masks on any
// block (where this build and machine have it; make test also runs the
// tokenize packages with -tags noasm, which tests the pure-Go path alone).
// tokenize's TestClassify checks both against each byte's class.
func FuzzClassify(f *testing.F) {
	f.Add([]byte("Hello, world! It's 12345 o'clock.\n\n### Response:\n  x\t\r\x00\x7f\x80\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var buf [64]byte
		copy(buf[:], b)
		want := Go(&buf)
		if got := Array(&buf); got != want {
			t.Fatalf("Array(%q) = %+v, pure Go %+v", buf, got, want)
		}
		if got := String(string(buf[:])+"tail", 0); got != want {
			t.Fatalf("String(%q) = %+v, pure Go %+v", buf, got, want)
		}
		if SIMD {
			if got := SIMDArray(&buf); got != want {
				t.Fatalf("SIMDArray(%q) = %+v, pure Go %+v", buf, got, want)
			}
		}
	})
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

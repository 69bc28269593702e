package ckpt

import (
	"math"
	"testing"
)

func TestF32ToBF16(t *testing.T) {
	for _, c := range []struct {
		in   uint32
		want uint16
	}{
		{0x3f800000, 0x3f80}, {0x3f808000, 0x3f80}, {0x3f818000, 0x3f82}, {0x3f80c000, 0x3f81},
		{0x7f800000, 0x7f80}, {0xff800000, 0xff80}, {0x7fc00001, 0x7fc0}, {0xffffffff, 0x7fc0},
		{0x80000000, 0x8000}, {0x7f7fffff, 0x7f80}, {0x00000001, 0x0000},
	} {
		if got := f32ToBF16(c.in); got != c.want {
			t.Errorf("f32ToBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
}

func TestF32ToF16(t *testing.T) {
	for _, c := range []struct {
		in   float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {1e10, 0x7c00},
		{float32(math.Ldexp(1, -24)), 0x0001}, {float32(math.Ldexp(1, -25)), 0x0000}, {float32(math.Ldexp(3, -25)), 0x0002},
		{float32(math.Ldexp(1, -14)), 0x0400}, {float32(math.Ldexp(1023, -24)), 0x03ff},
		{float32(math.Inf(-1)), 0xfc00}, {float32(math.Copysign(0, -1)), 0x8000}, {1e-10, 0},
		{1.0009765625, 0x3c01}, {1.00048828125, 0x3c00}, {1.00146484375, 0x3c02},
	} {
		if got := f32ToF16(math.Float32bits(c.in)); got != c.want {
			t.Errorf("f32ToF16(%g) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	if got := f32ToF16(0x7fc00000); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("NaN -> %#04x, want a NaN", got)
	}
	for h := 0; h < 1<<16; h++ {
		f := f16ToF32(uint16(h))
		if f != f { // NaN
			continue
		}
		if back := f32ToF16(math.Float32bits(f)); back != uint16(h) {
			t.Fatalf("%#04x -> %g -> %#04x", h, f, back)
		}
	}
}

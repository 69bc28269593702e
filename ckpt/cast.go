package ckpt

import (
	"encoding/binary"
	"math"
)

// castInto converts n elements from src (type from) into dst (type to),
// little-endian, rounding to nearest even as torch's .to(dtype) does.
// Only float types are converted; callers keep other types unchanged.
func castInto(dst []byte, to DType, src []byte, from DType, n int) {
	le := binary.LittleEndian
	dst, src = dst[:n*to.Size()], src[:n*from.Size()]
	switch {
	case from == F32 && to == BF16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], f32ToBF16(le.Uint32(src[4*i:])))
		}
	case from == F32 && to == F16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], f32ToF16(le.Uint32(src[4*i:])))
		}
	case from == BF16 && to == F32:
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], uint32(le.Uint16(src[2*i:]))<<16)
		}
	case from == F16 && to == F32:
		for i := 0; i < n; i++ {
			le.PutUint32(dst[4*i:], math.Float32bits(f16ToF32(le.Uint16(src[2*i:]))))
		}
	case from == BF16 && to == F16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], f32ToF16(uint32(le.Uint16(src[2*i:]))<<16))
		}
	case from == F16 && to == BF16:
		for i := 0; i < n; i++ {
			le.PutUint16(dst[2*i:], f32ToBF16(math.Float32bits(f16ToF32(le.Uint16(src[2*i:])))))
		}
	default: // through float32 (F64 sources, F64 targets)
		for i := 0; i < n; i++ {
			var f float32
			switch from {
			case F32:
				f = math.Float32frombits(le.Uint32(src[4*i:]))
			case BF16:
				f = math.Float32frombits(uint32(le.Uint16(src[2*i:])) << 16)
			case F16:
				f = f16ToF32(le.Uint16(src[2*i:]))
			default: // F64
				f = float32(math.Float64frombits(le.Uint64(src[8*i:])))
			}
			switch to {
			case F32:
				le.PutUint32(dst[4*i:], math.Float32bits(f))
			case BF16:
				le.PutUint16(dst[2*i:], f32ToBF16(math.Float32bits(f)))
			case F16:
				le.PutUint16(dst[2*i:], f32ToF16(math.Float32bits(f)))
			case F64:
				if from == F64 {
					copy(dst[8*i:8*i+8], src[8*i:8*i+8])
				} else {
					le.PutUint64(dst[8*i:], math.Float64bits(float64(f)))
				}
			}
		}
	}
}

// f32ToBF16 rounds a float32 (bits) to bfloat16, nearest even; NaN becomes
// the canonical quiet NaN 0x7FC0 (as c10::BFloat16 does).
func f32ToBF16(u uint32) uint16 {
	if u&0x7fffffff > 0x7f800000 {
		return 0x7fc0
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// f32ToF16 rounds a float32 (bits) to IEEE half precision, nearest even,
// with subnormals, overflow to infinity and NaN kept quiet.
func f32ToF16(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	exp := int32(u>>23) & 0xff
	man := u & 0x7fffff
	if exp == 0xff { // Inf or NaN
		if man != 0 {
			return sign | 0x7e00 | uint16(man>>13)
		}
		return sign | 0x7c00
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 { // subnormal or zero in half
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to infinity: correct
	}
	return sign | uint16(h)
}

// f16ToF32 widens IEEE half precision exactly.
func f16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp == 0:
		if man == 0 {
			return math.Float32frombits(sign)
		}
		// subnormal: value = man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

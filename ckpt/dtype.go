package ckpt

import "fmt"

// DType is a tensor element type, named as in safetensors ("BF16", "F32").
type DType string

// The element types ckpt can copy. Sub-byte types (F4, F6) cannot come out
// of torch.save blobs and are not listed.
const (
	BOOL        DType = "BOOL"
	U8          DType = "U8"
	I8          DType = "I8"
	I16         DType = "I16"
	U16         DType = "U16"
	F16         DType = "F16"
	BF16        DType = "BF16"
	I32         DType = "I32"
	U32         DType = "U32"
	F32         DType = "F32"
	F64         DType = "F64"
	I64         DType = "I64"
	U64         DType = "U64"
	C64         DType = "C64"
	F8E4M3      DType = "F8_E4M3"
	F8E5M2      DType = "F8_E5M2"
	F8E4M3FNUZ  DType = "F8_E4M3FNUZ"
	F8E5M2FNUZ  DType = "F8_E5M2FNUZ"
	F8E8M0      DType = "F8_E8M0"
	dtypeUnknow DType = ""
)

type dtypeInfo struct {
	size    int
	torch   string // torch dtype attribute name
	storage string // torch.save typed storage class
	rank    int    // safetensors' Rust Dtype enum position (write order key)
}

var dtypes = map[DType]dtypeInfo{
	BOOL:       {1, "bool", "BoolStorage", 0},
	U8:         {1, "uint8", "ByteStorage", 4},
	I8:         {1, "int8", "CharStorage", 5},
	F8E5M2:     {1, "float8_e5m2", "Float8_e5m2Storage", 6},
	F8E4M3:     {1, "float8_e4m3fn", "Float8_e4m3fnStorage", 7},
	F8E8M0:     {1, "float8_e8m0fnu", "Float8_e8m0fnuStorage", 8},
	F8E4M3FNUZ: {1, "float8_e4m3fnuz", "Float8_e4m3fnuzStorage", 9},
	F8E5M2FNUZ: {1, "float8_e5m2fnuz", "Float8_e5m2fnuzStorage", 10},
	I16:        {2, "int16", "ShortStorage", 11},
	U16:        {2, "uint16", "UInt16Storage", 12},
	F16:        {2, "float16", "HalfStorage", 13},
	BF16:       {2, "bfloat16", "BFloat16Storage", 14},
	I32:        {4, "int32", "IntStorage", 15},
	U32:        {4, "uint32", "UInt32Storage", 16},
	F32:        {4, "float32", "FloatStorage", 17},
	C64:        {8, "complex64", "ComplexFloatStorage", 18},
	F64:        {8, "float64", "DoubleStorage", 19},
	I64:        {8, "int64", "LongStorage", 20},
	U64:        {8, "uint64", "UInt64Storage", 21},
}

var (
	dtypeByTorch   = map[string]DType{}
	dtypeByStorage = map[string]DType{}
)

func init() {
	for d, in := range dtypes {
		dtypeByTorch[in.torch] = d
		dtypeByStorage[in.storage] = d
	}
	// torch aliases
	for alias, d := range map[string]DType{"float": F32, "double": F64, "half": F16, "long": I64,
		"int": I32, "short": I16, "cfloat": C64} {
		dtypeByTorch[alias] = d
	}
}

// Size returns the element size in bytes, or 0 for an unknown type.
func (d DType) Size() int { return dtypes[d].size }

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { _, ok := dtypes[d]; return ok }

// Torch returns the torch dtype name ("torch.bfloat16").
func (d DType) Torch() string { return "torch." + dtypes[d].torch }

// IsFloat reports whether --dtype casts apply to d (F16, BF16, F32, F64).
func (d DType) IsFloat() bool { return d == F16 || d == BF16 || d == F32 || d == F64 }

// ParseDType accepts safetensors names ("BF16") and torch names ("bfloat16",
// "torch.bfloat16", "bf16", "fp16", "fp32").
func ParseDType(s string) (DType, error) {
	switch s {
	case "bf16":
		return BF16, nil
	case "fp16":
		return F16, nil
	case "fp32":
		return F32, nil
	case "fp64":
		return F64, nil
	}
	if d := DType(s); d.Valid() {
		return d, nil
	}
	if len(s) > 6 && s[:6] == "torch." {
		s = s[6:]
	}
	if d, ok := dtypeByTorch[s]; ok {
		return d, nil
	}
	return dtypeUnknow, fmt.Errorf("%w: unknown dtype %q", ErrConfig, s)
}

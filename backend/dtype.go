package backend

import (
	"fmt"
	"math"
)

// DType is a storage element type. Arithmetic always accumulates in float32;
// BF16 and F16 are storage formats.
type DType uint8

// The storage types fleet knows.
const (
	Invalid DType = iota
	F32
	BF16
	F16
	I32
	I64
)

var dtypeNames = [...]string{"invalid", "f32", "bf16", "f16", "i32", "i64"}

func (d DType) String() string {
	if int(d) < len(dtypeNames) {
		return dtypeNames[d]
	}
	return fmt.Sprintf("dtype(%d)", d)
}

// Size is the number of bytes per element.
func (d DType) Size() int {
	switch d {
	case F32, I32:
		return 4
	case BF16, F16:
		return 2
	case I64:
		return 8
	}
	return 0
}

// IsFloat reports whether d holds floating-point values.
func (d DType) IsFloat() bool { return d == F32 || d == BF16 || d == F16 }

// ParseDType parses "f32", "bf16", "f16", "i32" or "i64".
func ParseDType(s string) (DType, error) {
	for i, n := range dtypeNames {
		if i > 0 && n == s {
			return DType(i), nil
		}
	}
	return Invalid, fmt.Errorf("unknown dtype %q (want f32, bf16, f16, i32 or i64)", s)
}

// F32ToBF16 rounds f to bfloat16 with round-to-nearest-even. NaN stays NaN
// (quiet), infinities stay infinite.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return uint16(b>>16) | 0x40
	}
	// Add 0x7fff plus the lowest kept bit: ties go to the even result.
	b += 0x7fff + (b>>16)&1
	return uint16(b >> 16)
}

// BF16ToF32 widens a bfloat16 exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToF16 rounds f to IEEE half precision with round-to-nearest-even,
// producing subnormals, infinities on overflow, and quiet NaNs.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case exp == 0xff: // inf or NaN
		if man != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp == 0 && man == 0:
		return sign
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half (or underflow to zero). Include the implicit bit and
		// shift right by (14 - e) bits in total (mantissa of 23 -> 10 bits).
		if e < -10 {
			return sign
		}
		m := man | 0x800000
		shift := uint32(14 - e)
		half := uint32(1) << (shift - 1)
		rest := m & (uint32(1)<<shift - 1)
		r := m >> shift
		if rest > half || (rest == half && r&1 == 1) {
			r++
		}
		return sign | uint16(r)
	}
	r := uint32(e)<<10 | man>>13
	rest := man & 0x1fff
	if rest > 0x1000 || (rest == 0x1000 && r&1 == 1) {
		r++ // may carry into the exponent, which correctly yields inf at the top
	}
	return sign | uint16(r)
}

// F16ToF32 widens an IEEE half exactly.
func F16ToF32(h uint16) float32 {
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
		// Subnormal: value = man * 2^-24.
		v := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
}

package backend

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
)

func f32b(b uint32) float32 { return math.Float32frombits(b) }

func TestF32ToBF16(t *testing.T) {
	cases := []struct {
		name string
		in   uint32
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"tie to even, down", 0x3f808000, 0x3f80},
		{"tie to even, up", 0x3f818000, 0x3f82},
		{"just above tie, even kept", 0x3f808001, 0x3f81},
		{"just below tie, even kept", 0x3f807fff, 0x3f80},
		{"just above tie, odd kept", 0x3f818001, 0x3f82},
		{"just below tie, odd kept", 0x3f817fff, 0x3f81},
		{"negative tie down", 0xbf808000, 0xbf80},
		{"negative tie up", 0xbf818000, 0xbf82},
		{"carry into exponent", 0x3fffffff, 0x4000},
		{"max finite rounds to inf", 0x7f7fffff, 0x7f80},
		{"tie at the top rounds to inf", 0x7f7f8000, 0x7f80},
		{"below tie at the top stays finite", 0x7f7f7fff, 0x7f7f},
		{"negative max finite rounds to -inf", 0xff7fffff, 0xff80},
		{"+0", 0x00000000, 0x0000},
		{"-0", 0x80000000, 0x8000},
		{"+inf", 0x7f800000, 0x7f80},
		{"-inf", 0xff800000, 0xff80},
		{"smallest subnormal", 0x00000001, 0x0000},
		{"subnormal tie to even zero", 0x00008000, 0x0000},
		{"subnormal above tie", 0x00008001, 0x0001},
		{"subnormal tie up", 0x00018000, 0x0002},
		{"negative subnormal", 0x80008001, 0x8001},
		{"largest subnormal rounds to min normal", 0x007fffff, 0x0080},
		{"min normal", 0x00800000, 0x0080},
	}
	for _, c := range cases {
		if got := F32ToBF16(f32b(c.in)); got != c.want {
			t.Errorf("%s: F32ToBF16(%#08x) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
	// NaNs stay NaN (never become infinity), keep their sign and are quiet.
	for _, in := range []uint32{0x7fc00000, 0x7f800001, 0x7fffffff, 0xff800001, 0xffc00001, 0x7f80ffff, 0x7fbfffff} {
		got := F32ToBF16(f32b(in))
		if got&0x7f80 != 0x7f80 || got&0x7f == 0 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not a NaN", in, got)
		}
		if got&0x40 == 0 {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, not quiet", in, got)
		}
		if got>>15 != uint16(in>>31) {
			t.Errorf("F32ToBF16(NaN %#08x) = %#04x, sign lost", in, got)
		}
	}
}

// bf16Value decodes a bfloat16 independently of the package.
func bf16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>7) & 0xff
	m := float64(h & 0x7f)
	switch e {
	case 0xff:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	case 0:
		return sign * math.Ldexp(m/128, -126)
	}
	return sign * math.Ldexp(1+m/128, e-127)
}

// f16Value decodes an IEEE half independently of the package.
func f16Value(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0x1f:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	case 0:
		return sign * math.Ldexp(m/1024, -14)
	}
	return sign * math.Ldexp(1+m/1024, e-15)
}

func TestBF16ToF32Exhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		got := BF16ToF32(h)
		want := bf16Value(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(got)) {
				t.Fatalf("BF16ToF32(%#04x) = %v, want NaN", h, got)
			}
			continue
		}
		if float64(got) != want || math.Signbit(float64(got)) != math.Signbit(want) {
			t.Fatalf("BF16ToF32(%#04x) = %v, want %v", h, got, want)
		}
		if back := F32ToBF16(got); back != h {
			t.Fatalf("F32ToBF16(BF16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestF16RoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		f := F16ToF32(h)
		want := f16Value(h)
		if math.IsNaN(want) {
			if !math.IsNaN(float64(f)) {
				t.Fatalf("F16ToF32(%#04x) = %v, want NaN", h, f)
			}
			if back := F32ToF16(f); back&0x7c00 != 0x7c00 || back&0x3ff == 0 {
				t.Fatalf("F32ToF16(F16ToF32(NaN %#04x)) = %#04x, not a NaN", h, back)
			}
			continue
		}
		if float64(f) != want || math.Signbit(float64(f)) != math.Signbit(want) {
			t.Fatalf("F16ToF32(%#04x) = %v, want %v", h, f, want)
		}
		if back := F32ToF16(f); back != h {
			t.Fatalf("F32ToF16(F16ToF32(%#04x)) = %#04x", h, back)
		}
	}
}

func TestF32ToF16(t *testing.T) {
	p := func(e int) float64 { return math.Ldexp(1, e) }
	cases := []struct {
		name string
		in   float64 // must be exactly representable in float32
		want uint16
	}{
		{"one", 1, 0x3c00},
		{"tie to even, down", 1 + p(-11), 0x3c00},
		{"tie to even, up", 1 + 3*p(-11), 0x3c02},
		{"just above tie", 1 + p(-11) + p(-23), 0x3c01},
		{"just below tie", 1 + p(-11) - p(-23), 0x3c00},
		{"negative tie up", -(1 + 3*p(-11)), 0xbc02},
		{"2049 ties to 2048", 2049, 0x6800},
		{"2051 ties to 2052", 2051, 0x6802},
		{"carry into exponent", 2 - p(-12), 0x4000},
		{"max finite", 65504, 0x7bff},
		{"65519 rounds down", 65519, 0x7bff},
		{"65520 rounds to inf", 65520, 0x7c00},
		{"-65520 rounds to -inf", -65520, 0xfc00},
		{"huge", 0x1p100, 0x7c00},
		{"inf", math.Inf(1), 0x7c00},
		{"-inf", math.Inf(-1), 0xfc00},
		{"+0", 0, 0x0000},
		{"-0", math.Copysign(0, -1), 0x8000},
		{"min subnormal", p(-24), 0x0001},
		{"2^-25 ties to 0", p(-25), 0x0000},
		{"-2^-25 ties to -0", -p(-25), 0x8000},
		{"just above 2^-25", p(-25) * (1 + p(-23)), 0x0001},
		{"3*2^-26 rounds up", 3 * p(-26), 0x0001},
		{"2^-26 rounds to 0", p(-26), 0x0000},
		{"1.5*2^-24 ties to 2", 3 * p(-25), 0x0002},
		{"2.5*2^-24 ties to 2", 5 * p(-25), 0x0002},
		{"largest subnormal", 1023 * p(-24), 0x03ff},
		{"subnormal ties up to min normal", p(-14) - p(-25), 0x0400},
		{"subnormal ties down", p(-14) - 3*p(-25), 0x03fe},
		{"min normal", p(-14), 0x0400},
		{"f32 subnormal", p(-140), 0x0000},
		{"negative f32 subnormal", -p(-140), 0x8000},
		{"f32 min normal", p(-126), 0x0000},
	}
	for _, c := range cases {
		if float64(float32(c.in)) != c.in {
			t.Fatalf("%s: %v is not a float32", c.name, c.in)
		}
		if got := F32ToF16(float32(c.in)); got != c.want {
			t.Errorf("%s: F32ToF16(%v) = %#04x, want %#04x", c.name, c.in, got, c.want)
		}
	}
	for _, in := range []uint32{0x7fc00000, 0x7f800001, 0xff800001, 0x7f801fff, 0x7fffffff} {
		got := F32ToF16(f32b(in))
		if got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
			t.Errorf("F32ToF16(NaN %#08x) = %#04x, not a NaN", in, got)
		}
		if got>>15 != uint16(in>>31) {
			t.Errorf("F32ToF16(NaN %#08x) = %#04x, sign lost", in, got)
		}
	}
}

// refF16 rounds a float32 to half precision with round-to-nearest-even in
// float64 arithmetic and encodes the result.
func refF16(f float32) uint16 {
	x := float64(f)
	var sign uint16
	if math.Signbit(x) {
		sign = 0x8000
		x = -x
	}
	if x == 0 {
		return sign
	}
	// Exponent of the rounding quantum: 2^(e-10) for normals, 2^-24 below 2^-14.
	_, e2 := math.Frexp(x) // x = frac * 2^e2, frac in [0.5, 1)
	e := max(e2-1, -14)
	q := math.Ldexp(1, e-10)
	r := math.RoundToEven(x/q) * q // x/q is exact: a power-of-two scaling
	if r >= 65536 {
		return sign | 0x7c00
	}
	if r < math.Ldexp(1, -14) {
		return sign | uint16(r/math.Ldexp(1, -24))
	}
	frac, ex := math.Frexp(r)
	ex-- // r = (2*frac) * 2^ex with 2*frac in [1, 2)
	m := (2*frac - 1) * 1024
	return sign | uint16(ex+15)<<10 | uint16(m)
}

func TestF32ToF16AgainstReference(t *testing.T) {
	r := rng.New(7)
	n := 400000
	if testing.Short() {
		n = 50000
	}
	for i := 0; i < n; i++ {
		bits := uint32(r.Uint64())
		// Exponents from well below the smallest half subnormal to just
		// beyond the largest half.
		exp := uint32(127 - 27 + r.Intn(27+17))
		bits = bits&0x807fffff | exp<<23
		switch i % 4 {
		case 1: // exact tie for a normal half: the 13 dropped bits are 1000...0
			bits = bits&^0x1fff | 0x1000
		case 2: // one ulp either side of a tie
			bits = bits&^0x1fff | 0x1000
			if r.Intn(2) == 0 {
				bits++
			} else {
				bits--
			}
		case 3: // sparse low bits: subnormal ties and near-ties
			bits &^= uint32(1)<<uint(r.Intn(23)) - 1
		}
		f := f32b(bits)
		got, want := F32ToF16(f), refF16(f)
		if got != want {
			t.Fatalf("F32ToF16(%v = %#08x) = %#04x, reference %#04x", f, bits, got, want)
		}
	}
}

func TestParseDType(t *testing.T) {
	for _, d := range []DType{F32, BF16, F16, I32, I64} {
		got, err := ParseDType(d.String())
		if err != nil || got != d {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", d.String(), got, err, d)
		}
	}
	names := map[string]DType{"f32": F32, "bf16": BF16, "f16": F16, "i32": I32, "i64": I64}
	for s, want := range names {
		if got, err := ParseDType(s); err != nil || got != want {
			t.Errorf("ParseDType(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "invalid", "F32", "fp32", "float32", "f64", " f32", "bf16 "} {
		if got, err := ParseDType(s); err == nil {
			t.Errorf("ParseDType(%q) = %v, want an error", s, got)
		}
	}
	if s := DType(99).String(); s != "dtype(99)" {
		t.Errorf("DType(99).String() = %q", s)
	}
	sizes := map[DType]int{F32: 4, BF16: 2, F16: 2, I32: 4, I64: 8, Invalid: 0}
	for d, want := range sizes {
		if d.Size() != want {
			t.Errorf("%v.Size() = %d, want %d", d, d.Size(), want)
		}
	}
	for _, d := range []DType{F32, BF16, F16} {
		if !d.IsFloat() {
			t.Errorf("%v.IsFloat() = false", d)
		}
	}
	for _, d := range []DType{Invalid, I32, I64} {
		if d.IsFloat() {
			t.Errorf("%v.IsFloat() = true", d)
		}
	}
}

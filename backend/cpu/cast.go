package cpu

import "github.com/fleetml/fleet/backend"

// Vector conversions between F32 and BF16: rounding to nearest even with
// quiet NaNs, bit for bit backend.F32ToBF16, and exact widening. The
// AVX-512 versions (cast_amd64.go) replace the portable loops where the
// CPU has them; they convert whole blocks of 16 values and leave the
// rest to the loops.
var (
	f32ToBF16Block = func(dst []uint16, src []float32) int { return 0 }
	bf16ToF32Block = func(dst []float32, src []uint16) int { return 0 }
)

// f32ToBF16s rounds src to bfloat16 into dst (len(dst) ≥ len(src)).
func f32ToBF16s(dst []uint16, src []float32) {
	dst = dst[:len(src)]
	i := f32ToBF16Block(dst, src)
	for ; i < len(src); i++ {
		dst[i] = backend.F32ToBF16(src[i])
	}
}

// bf16ToF32s widens src into dst (len(dst) ≥ len(src)).
func bf16ToF32s(dst []float32, src []uint16) {
	dst = dst[:len(src)]
	i := bf16ToF32Block(dst, src)
	for ; i < len(src); i++ {
		dst[i] = backend.BF16ToF32(src[i])
	}
}

// castFast converts elements [lo, hi) of a Cast between F32 and BF16 with
// the vector conversions, and reports whether it did (false for any other
// pair of dtypes). castTask.do calls it first.
func castFast(d, s *Buffer, dstOff, srcOff, lo, hi int) bool {
	switch {
	case s.dt == backend.F32 && d.dt == backend.BF16:
		f32ToBF16s(d.U16[dstOff+lo:dstOff+hi], s.F32[srcOff+lo:srcOff+hi])
	case s.dt == backend.BF16 && d.dt == backend.F32:
		bf16ToF32s(d.F32[dstOff+lo:dstOff+hi], s.U16[srcOff+lo:srcOff+hi])
	default:
		return false
	}
	return true
}

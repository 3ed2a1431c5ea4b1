package cpu

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX512F {
		f32ToBF16Block = func(dst []uint16, src []float32) int {
			n := len(src) &^ 15
			if n > 0 {
				_ = dst[n-1]
				f32ToBF16AVX512(&dst[0], &src[0], n)
			}
			return n
		}
		bf16ToF32Block = func(dst []float32, src []uint16) int {
			n := len(src) &^ 15
			if n > 0 {
				_ = dst[n-1]
				bf16ToF32AVX512(&dst[0], &src[0], n)
			}
			return n
		}
	}
}

// f32ToBF16AVX512 rounds n floats (a multiple of 16) to bfloat16 the way
// backend.F32ToBF16 does (cast_amd64.s).
//
//go:noescape
func f32ToBF16AVX512(dst *uint16, src *float32, n int)

// bf16ToF32AVX512 widens n bfloat16 values (a multiple of 16).
//
//go:noescape
func bf16ToF32AVX512(dst *float32, src *uint16, n int)

package cpu

import "golang.org/x/sys/cpu"

func init() {
	if cpu.X86.HasAVX512F {
		interleaveRows32 = func(dst []uint32, b []uint16, ld, pairs int) int {
			if pairs > 0 {
				_, _ = dst[pairs*32-1], b[(2*pairs-1)*ld+31]
				interleaveRows32AVX512(&dst[0], &b[0], ld, pairs)
			}
			return pairs
		}
	}
	if cpu.X86.HasAVX2 {
		interleaveRows8 = func(dst []uint32, b []uint16, ld, pairs int) int {
			if pairs > 0 {
				_, _ = dst[pairs*8-1], b[(2*pairs-1)*ld+7]
				interleaveRows8AVX2(&dst[0], &b[0], ld, pairs)
			}
			return pairs
		}
		transposePairs8 = func(dst []uint32, dstK int, src []uint16, ld, pairs int) int {
			blocks := pairs / 8
			if blocks > 0 {
				_, _ = dst[(8*blocks-1)*dstK+7], src[7*ld+16*blocks-1]
				transposePairs8AVX2(&dst[0], dstK, &src[0], ld, blocks)
			}
			return blocks * 8
		}
	}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512BF16 {
		bf16Kernel = func(kp int, a, b []uint32, c []float32, ldc int, add bool) {
			if kp == 0 {
				bf16KernelGo(kp, a, b, c, ldc, add)
				return
			}
			_, _, _ = a[kp*bf16MR-1], b[kp*bf16NR-1], c[(bf16MR-1)*ldc+bf16NR-1]
			bf16KernelAVX512(kp, &a[0], &b[0], &c[0], ldc, add)
		}
		dotProduct.unavailable = func() string { return "" }
	}
}

// bf16KernelAVX512 is bf16KernelGo with AVX512-BF16 dot products
// (bf16gemm_amd64.s).
//
//go:noescape
func bf16KernelAVX512(kp int, a, b *uint32, c *float32, ldc int, add bool)

// interleaveRows32AVX512 interleaves pairs pairs of 32-value row
// segments (bf16pack_amd64.s; see interleaveRows32).
//
//go:noescape
func interleaveRows32AVX512(dst *uint32, b *uint16, ld, pairs int)

// interleaveRows8AVX2 is interleaveRows32AVX512 for 8-value rows.
//
//go:noescape
func interleaveRows8AVX2(dst *uint32, b *uint16, ld, pairs int)

// transposePairs8AVX2 transposes blocks blocks of 8 rows × 8 pairs
// (bf16pack_amd64.s; see transposePairs8).
//
//go:noescape
func transposePairs8AVX2(dst *uint32, dstK int, src *uint16, ld, blocks int)

// dpbf16LoopAVX512 runs n iterations of 12 independent VDPBF16PS chains
// (bf16pack_amd64.s), for BenchmarkBF16IssueRate.
//
//go:noescape
func dpbf16LoopAVX512(n int)

package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// The portable twins of the BF16 products. Each computes a product element
// by element from the unpacked operands with the arithmetic the product's
// instructions perform, in their order, so that a product and its twin
// give the same bits: the self-check (bf16product.go) holds every product
// to its twin before the product is offered.
//
// Products of two bf16 values have at most 16 significant bits, so they
// are exact in float32 unless they fall below its normal range. A fused
// multiply-add of such operands, a*b + c rounded once, is computed here as
// float32(float64(a)*float64(b) + float64(c)): the product is exact in
// float64, and rounding the sum of two values of 24-bit precision first to
// float64's 53 bits and then to float32's 24 gives the correctly rounded
// sum (53 ≥ 2·24 + 2), so the result is the float32 FMA's, round to
// nearest even.

// fmaF32 is a float32 fused multiply-add of bf16-valued a and b: a*b + c,
// rounded once (see above).
func fmaF32(a, b, c float32) float32 { return float32(float64(a)*float64(b) + float64(c)) }

// flushDenormal returns x, or a zero of x's sign where x is a denormal: an
// input treated as zero (DAZ), or a result flushed to zero (FTZ).
func flushDenormal(x float32) float32 {
	if x != 0 && math.Abs(float64(x)) < 0x1p-126 {
		return float32(math.Copysign(0, float64(x)))
	}
	return x
}

// fmaDAZFTZ is fmaF32 with denormal inputs read as zero and a denormal
// result flushed to zero: the FMA of VDPBF16PS and TDPBF16PS, which ignore
// MXCSR.
func fmaDAZFTZ(a, b, c float32) float32 {
	return flushDenormal(fmaF32(flushDenormal(a), flushDenormal(b), flushDenormal(c)))
}

// addDAZFTZ is a float32 sum with DAZ and FTZ.
func addDAZFTZ(a, b float32) float32 { return flushDenormal(flushDenormal(a) + flushDenormal(b)) }

// bf16Operand reads op(X)(i, k) of a BF16 product's operand: X stored
// row-major with leading dimension ld, transposed when trans. Past K
// (the zero padding of an odd K) it is zero.
func bf16Operand(x []uint16, ld int, trans bool, i, k, K int) float32 {
	if k >= K {
		return 0
	}
	if trans {
		return backend.BF16ToF32(x[k*ld+i])
	}
	return backend.BF16ToF32(x[i*ld+k])
}

// bf16TwinProblem is one batch item of a BF16 product as the twins read
// it: op(A) M×K, op(B) K×N, C M×N (row stride N), bias N or nil.
type bf16TwinProblem struct {
	p        backend.MatMul
	a, b     []uint16
	c, bias  []float32
	lda, ldb int
}

func (q *bf16TwinProblem) A(i, k int) float32 {
	return bf16Operand(q.a, q.lda, q.p.TransA, i, k, q.p.K)
}
func (q *bf16TwinProblem) B(k, j int) float32 {
	return bf16Operand(q.b, q.ldb, !q.p.TransB, j, k, q.p.K)
}

// bf16Twin runs one element function over every element of every batch
// item of C: cell gets C's element scaled by beta (and whether it is to be
// added to) and returns the product's element before the bias, which is
// then added as the products' epilogue does.
func bf16Twin(p backend.MatMul, a, b []uint16, c, bias []float32, cell func(q *bf16TwinProblem, i, j int, c float32, add bool) float32) {
	lda, ldb := p.K, p.N
	if p.TransA {
		lda = p.M
	}
	if p.TransB {
		ldb = p.K
	}
	for bi := 0; bi < p.Batch; bi++ {
		q := &bf16TwinProblem{p: p, a: a[bi*p.StrideA:], b: b[bi*p.StrideB:], c: c[bi*p.StrideC:], bias: bias, lda: lda, ldb: ldb}
		for i := 0; i < p.M; i++ {
			for j := 0; j < p.N; j++ {
				v, add := q.c[i*p.N+j], true
				switch {
				case p.Beta == 0 && p.K > 0:
					add = false
				case p.Beta == 0:
					v = 0
				case p.Beta != 1:
					v *= p.Beta
				}
				v = cell(q, i, j, v, add)
				if bias != nil {
					v += bias[j]
				}
				q.c[i*p.N+j] = v
			}
		}
	}
}

// widenTwin is the widened product's twin: FMAs in order over K in panels
// of gemmKC, each panel summed from zero and then added to C (the first
// panel written, where beta is 0), as the F32 micro-kernels do.
func widenTwin(p backend.MatMul, a, b []uint16, c, bias []float32) {
	bf16Twin(p, a, b, c, bias, func(q *bf16TwinProblem, i, j int, v float32, add bool) float32 {
		for k0 := 0; k0 < p.K; k0 += gemmKC {
			var acc float32
			for k := k0; k < min(k0+gemmKC, p.K); k++ {
				acc = fmaF32(q.A(i, k), q.B(k, j), acc)
			}
			if add {
				v += acc
			} else {
				v, add = acc, true
			}
		}
		return v
	})
}

// dotTwin is the AVX512-BF16 product's twin. Per the Intel SDM's
// VDPBF16PS pseudo-code, each instruction adds a pair's two products to
// the accumulator as two FMAs, the odd (high) element's product first,
// each with DAZ on its inputs, FTZ on its result and round to nearest
// even, MXCSR ignored:
//
//	srcdest.fp32[i] += make_fp32(src1.bfloat16[2*i+1]) * make_fp32(t.bfloat16[1])
//	srcdest.fp32[i] += make_fp32(src1.bfloat16[2*i+0]) * make_fp32(t.bfloat16[0])
//
// An AMD Zen 5 gives these bits, denormals included
// (TestBF16DotTwinDenormals). The kernel sums all of K from zero, then
// adds the sum to C.
func dotTwin(p backend.MatMul, a, b []uint16, c, bias []float32) {
	bf16Twin(p, a, b, c, bias, func(q *bf16TwinProblem, i, j int, v float32, add bool) float32 {
		var acc float32
		for k := 0; k < p.K; k += 2 {
			acc = fmaDAZFTZ(q.A(i, k+1), q.B(k+1, j), acc)
			acc = fmaDAZFTZ(q.A(i, k), q.B(k, j), acc)
		}
		if add {
			return v + acc
		}
		return acc
	})
}

// amxTwin is the AMX product's twin. Per the Intel SDM's TDPBF16PS
// pseudo-code, one instruction over a k-chunk of 16 pairs (32 bf16 values)
// keeps two float32 sums per element, one of the pairs' even elements and
// one of their odd elements, each an FMA chain from zero over the chunk
// (DAZ, FTZ, round to nearest even); then adds the two, and adds that to
// the destination tile (DAZ, FTZ):
//
//	temp1.fp32[2*n+0] += make_fp32(tsrc1.row[m].bfloat16[2*k+0]) * make_fp32(tsrc2.row[k].bfloat16[2*n+0])
//	temp1.fp32[2*n+1] += make_fp32(tsrc1.row[m].bfloat16[2*k+1]) * make_fp32(tsrc2.row[k].bfloat16[2*n+1])
//	...
//	tmpf32 := temp1.fp32[2*n] + temp1.fp32[2*n+1]
//	tsrcdest.row[m].fp32[n] := tsrcdest.row[m].fp32[n] + tmpf32
//
// The kernel (amx.go) starts the tile from C where it adds (read with DAZ)
// and from zero where it writes, and runs the chunks in order over K,
// padded with zeros to whole chunks.
func amxTwin(p backend.MatMul, a, b []uint16, c, bias []float32) {
	bf16Twin(p, a, b, c, bias, func(q *bf16TwinProblem, i, j int, v float32, add bool) float32 {
		if p.K == 0 {
			return v // no TDPBF16PS runs
		}
		var acc float32
		if add {
			acc = flushDenormal(v)
		}
		for k0 := 0; k0 < p.K; k0 += 2 * amxKP {
			var even, odd float32
			for k := k0; k < k0+2*amxKP; k += 2 {
				even = fmaDAZFTZ(q.A(i, k), q.B(k, j), even)
				odd = fmaDAZFTZ(q.A(i, k+1), q.B(k+1, j), odd)
			}
			acc = addDAZFTZ(acc, addDAZFTZ(even, odd))
		}
		return acc
	})
}

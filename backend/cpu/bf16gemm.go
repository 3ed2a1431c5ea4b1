package cpu

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// The BF16 matrix product: A and B hold bfloat16, C is float32, and
// products accumulate in float32. It runs one of three ways
// (bf16product.go chooses):
//
//   - widened (bf16wide.go): the operands are widened to F32 (exactly) in
//     pooled scratch and the F32 product runs on them. Where VDPBF16PS is
//     slow or missing, and there is no AMX, this is the fastest there is.
//   - dot products (here): AVX512-BF16's VDPBF16PS on packed pairs, for
//     CPUs where a VDPBF16PS does more FLOP a second than the FMAs (a Zen 5
//     issues it at the FMA rate, twice the FLOP; a Sapphire Rapids-class
//     Xeon every other cycle, half its FMAs' FLOP).
//   - AMX tiles (amx.go): TDPBF16PS, on Intel Xeons from Sapphire Rapids on.
//
// For the dot products, operands are packed as pairs of
// consecutive k values in one uint32, the layout AVX512-BF16's VDPBF16PS
// multiplies: each instruction does 16 columns × 2 k-steps. A is packed in
// strips of bf16MR rows ([k/2][MR] pairs), B in strips of bf16NR columns
// ([k/2][NR] pairs); an odd K is padded with a zero.
const (
	bf16MR = 8
	bf16NR = 32
)

// bf16Kernel adds (or, when add is false, writes) one 8×32 block over kp
// k-pairs from packed strips a (kp×8 pairs) and b (kp×32 pairs) into c.
// bf16KernelAVX512 replaces it where the CPU has AVX512-BF16.
var bf16Kernel = bf16KernelGo

func bf16KernelGo(kp int, a, b []uint32, c []float32, ldc int, add bool) {
	a, b = a[:kp*bf16MR], b[:kp*bf16NR]
	for r := 0; r < bf16MR; r++ {
		var acc [bf16NR]float32
		for k := 0; k < kp; k++ {
			pa := a[k*bf16MR+r]
			a0, a1 := backend.BF16ToF32(uint16(pa)), backend.BF16ToF32(uint16(pa>>16))
			bk := (*[bf16NR]uint32)(b[k*bf16NR:])
			for j, pb := range bk {
				// VDPBF16PS: two FMAs, the high pair's product first (see dotTwin).
				acc[j] = fmaDAZFTZ(a1, backend.BF16ToF32(uint16(pb>>16)), acc[j])
				acc[j] = fmaDAZFTZ(a0, backend.BF16ToF32(uint16(pb)), acc[j])
			}
		}
		row := (*[bf16NR]float32)(c[r*ldc:])
		if !add {
			*row = acc
			continue
		}
		for j := range acc {
			row[j] += acc[j]
		}
	}
}

// u16 returns the uint16 elements of r from its offset on.
func u16(r backend.Ref) []uint16 { return r.S.(*Buffer).U16[r.Off:] }

// bf16Packed holds a call's packed operands, reused across calls.
type bf16Packed struct{ a, b []uint32 }

var bf16PackedPool pool[bf16Packed]

// matmulBF16 is MatMul for BF16 A and B and F32 C. Alpha must be 1. It
// runs this process's product (bf16Use).
func (c *CPU) matmulBF16(p backend.MatMul, a, b, cc, bias backend.Ref) {
	if p.Alpha != 1 {
		panic(fmt.Sprintf("cpu: bf16 matmul with alpha %v (only 1 is supported)", p.Alpha))
	}
	bf16Chosen.Do(chooseBF16)
	if bf16Use == nil {
		panic("cpu: bf16 matmul: " + bf16How)
	}
	bf16Use.run(c, p, a, b, cc, bias)
}

// matmulBF16Dot is the dot-product BF16 product. Like the F32 product, it
// packs each operand once, in parallel, then computes tiles of C from the
// packed pairs.
func (c *CPU) matmulBF16Dot(p backend.MatMul, a, b, cc, bias backend.Ref) {
	t, pk := c.bf16Prepare(p, a, b, cc, bias, bf16MR, (p.K+1)/2, packPairsA, 4)
	c.parallelFor(p.Batch*t.tm*t.tn, 1, (*bf16Tiles)(t))
	bf16Tasks.put(t)
	bf16PackedPool.put(pk)
}

// bf16Task is one BF16 MatMul call, the dot products' or AMX's. As
// bf16Pack a range is a range of strips to pack (per batch item: as
// strips of A, mr rows each, packed by packA, then bs strips of B, bf16NR
// columns each, by packPairsB); as bf16Tiles or amxTiles, a range of
// mc×nc tiles of C (per batch item, tm×tn).
type bf16Task struct {
	p                        backend.MatMul
	A, B                     []uint16
	C, bias                  []float32
	C16                      []uint16 // C in BF16 (then C is nil): see tileC
	pa, pb                   []uint32
	lda, ldb, kp, mPad, nPad int
	as, bs, tm, tn           int
	mr                       int
	packA                    func(dst []uint32, a []uint16, ld int, trans bool, i0, rows, K, kp int)
}

type (
	bf16Pack  bf16Task
	bf16Tiles bf16Task
)

var bf16Tasks taskPool[bf16Task]

// bf16Prepare makes a product's task, with A in strips of mr rows packed
// by packA and B in strips of bf16NR columns, kp pairs of k each (K/2
// rounded up, or further for AMX's chunks: the padding is zero), packs
// both operands in parallel (grain strips a goroutine), and counts the
// tiles of C. The caller computes the tiles and puts t and pk back.
func (c *CPU) bf16Prepare(p backend.MatMul, a, b, cc, bias backend.Ref, mr, kp int,
	packA func([]uint32, []uint16, int, bool, int, int, int, int), grain int) (*bf16Task, *bf16Packed) {
	t := bf16Tasks.get()
	t.p, t.A, t.B = p, u16(a), u16(b)
	t.C, t.C16 = outC(cc)
	if !bias.Nil() {
		t.bias = f32(bias)[:p.N]
	}
	t.lda, t.ldb = p.K, p.N
	if p.TransA {
		t.lda = p.M
	}
	if p.TransB {
		t.ldb = p.K
	}
	t.kp, t.mr, t.packA = kp, mr, packA
	t.mPad, t.nPad = roundUp(p.M, mr), roundUp(p.N, bf16NR)
	pk := bf16PackedPool.get()
	pk.a = grow(pk.a, p.Batch*t.mPad*t.kp)
	pk.b = grow(pk.b, p.Batch*t.nPad*t.kp)
	t.pa, t.pb = pk.a, pk.b
	t.as, t.bs = t.mPad/mr, t.nPad/bf16NR
	if t.kp > 0 {
		c.parallelFor(p.Batch*(t.as+t.bs), grain, (*bf16Pack)(t))
	}
	t.tm = (p.M + gemmMC - 1) / gemmMC
	t.tn = (p.N + gemmNC - 1) / gemmNC
	return t, pk
}

func (t *bf16Pack) do(lo, hi int) {
	p, kp, mr := &t.p, t.kp, t.mr
	for ti := lo; ti < hi; ti++ {
		bi, s := ti/(t.as+t.bs), ti%(t.as+t.bs)
		if s < t.as {
			t.packA(t.pa[(bi*t.mPad+s*mr)*kp:], t.A[bi*p.StrideA:], t.lda, p.TransA, s*mr, min(mr, p.M-s*mr), p.K, kp)
		} else {
			j := (s - t.as) * bf16NR
			packPairsB(t.pb[(bi*t.nPad+j)*kp:], t.B[bi*p.StrideB:], t.ldb, p.TransB, j, min(bf16NR, p.N-j), p.K, kp)
		}
	}
}

// eachTile runs block on tiles [lo, hi) of C (mc×nc, per batch item
// tm×tn), each as tileC gives it (its float32 block ct, row stride ldc,
// and whether block adds into it: scaleRows), then adds the bias and
// stores the tile: the part of a product's tile loop that does not depend
// on its micro-kernel.
func (t *bf16Task) eachTile(lo, hi int, block func(bi, i0, j0, mr, nr int, ct []float32, ldc int, add bool)) {
	p := &t.p
	loc := bf16LocalPool.get()
	defer bf16LocalPool.put(loc)
	for ti := lo; ti < hi; ti++ {
		bi, r := ti/(t.tm*t.tn), ti%(t.tm*t.tn)
		i0, j0 := (r/t.tn)*gemmMC, (r%t.tn)*gemmNC
		mr, nr := min(gemmMC, p.M-i0), min(gemmNC, p.N-j0)
		ct, ldc := tileC(loc, p, t.C, t.C16, bi, i0, j0, mr, nr)
		block(bi, i0, j0, mr, nr, ct, ldc, scaleRows(ct, ldc, mr, nr, p.Beta, p.K))
		addBias(ct, ldc, mr, nr, t.bias, j0)
		storeTileC(p, ct, t.C16, bi, i0, j0, mr, nr)
	}
}

func (t *bf16Tiles) do(lo, hi int) {
	kp := t.kp
	w := getWork()
	defer workPool.put(w)
	edge := w.edge[:bf16MR*bf16NR]
	(*bf16Task)(t).eachTile(lo, hi, func(bi, i0, j0, mr, nr int, ct []float32, ldc int, add bool) {
		for jb := 0; jb < nr; jb += bf16NR {
			cols := min(bf16NR, nr-jb)
			bstrip := t.pb[(bi*t.nPad+j0+jb)*kp:][:bf16NR*kp]
			for ib := 0; ib < mr; ib += bf16MR {
				rows := min(bf16MR, mr-ib)
				astrip := t.pa[(bi*t.mPad+i0+ib)*kp:][:bf16MR*kp]
				if rows == bf16MR && cols == bf16NR {
					bf16Kernel(kp, astrip, bstrip, ct[ib*ldc+jb:], ldc, add)
					continue
				}
				bf16Kernel(kp, astrip, bstrip, edge, bf16NR, false)
				for i := 0; i < rows; i++ {
					dst, src := ct[(ib+i)*ldc+jb:(ib+i)*ldc+jb+cols], edge[i*bf16NR:i*bf16NR+cols]
					if add {
						axpy(dst, src, 1)
					} else {
						copy(dst, src)
					}
				}
			}
		}
	})
}

// The products write BF16 C (bf16 activations) themselves: each computes
// its tiles of C (mc×nc, or a widened task's rows or columns) in float32
// in a goroutine's own block, exactly as they would in C,
// and round it into C (to nearest even) while it is in cache: no F32 copy
// of C and no separate pass to round it, and the same bits as the product
// into F32 rounded afterwards. tileC gives the tile's float32 block and
// its row stride: C itself for F32 C, else loc's block (holding C's tile
// widened where beta reads it); storeTileC rounds the block into C.

// outC returns a product's C as F32 or BF16 (the other nil).
func outC(cc backend.Ref) ([]float32, []uint16) {
	if isBF16(cc) {
		return nil, u16(cc)
	}
	return f32(cc), nil
}

func tileC(loc *bf16Local, p *backend.MatMul, c []float32, c16 []uint16, bi, i0, j0, mr, nr int) ([]float32, int) {
	if c16 == nil {
		return c[bi*p.StrideC+i0*p.N+j0:], p.N
	}
	loc.f = grow(loc.f, mr*nr)
	if p.Beta != 0 {
		for i := 0; i < mr; i++ {
			bf16ToF32s(loc.f[i*nr:(i+1)*nr], c16[bi*p.StrideC+(i0+i)*p.N+j0:][:nr])
		}
	}
	return loc.f[:mr*nr], nr
}

func storeTileC(p *backend.MatMul, ct []float32, c16 []uint16, bi, i0, j0, mr, nr int) {
	if c16 == nil {
		return
	}
	for i := 0; i < mr; i++ {
		f32ToBF16s(c16[bi*p.StrideC+(i0+i)*p.N+j0:][:nr], ct[i*nr:(i+1)*nr])
	}
}

// matmulBF16Out runs a product of BF16 A and B into BF16 C, where this
// process's product writes BF16 C itself (see tileC), and reports whether
// it did. A BF16 bias is widened first (N values).
func (c *CPU) matmulBF16Out(p backend.MatMul, a, b, cc, bias backend.Ref) bool {
	if a.S.DType() != backend.BF16 || b.S.DType() != backend.BF16 || !isBF16(cc) || p.Alpha != 1 {
		return false
	}
	bf16Chosen.Do(chooseBF16)
	if bf16Use == nil || !bf16Use.bf16C {
		return false
	}
	w := widening{c: c}
	br := w.in(bias, p.N)
	bf16Use.run(c, p, a, b, cc, br)
	w.done()
	return true
}

// packPairsA packs rows [i0, i0+rows) of op(A) (M×K) into one strip:
// dst[k*MR + r] = op(A)[i0+r, 2k] | op(A)[i0+r, 2k+1]<<16, zero past the
// rows and past K.
func packPairsA(dst []uint32, a []uint16, ld int, trans bool, i0, rows, K, kp int) {
	strip := dst[:kp*bf16MR]
	even := K / 2 // pairs with both halves in range
	if rows < bf16MR || even < kp {
		clear(strip)
	}
	if trans {
		// Row 2k of A holds op(A)[., 2k]: interleave rows 2k and 2k+1.
		k := 0
		if rows == bf16MR {
			k = interleaveRows8(strip, a[i0:], ld, even)
		}
		for ; k < even; k++ {
			lo, hi := a[2*k*ld+i0:][:rows], a[(2*k+1)*ld+i0:][:rows]
			out := strip[k*bf16MR:][:rows]
			for r := range out {
				out[r] = uint32(lo[r]) | uint32(hi[r])<<16
			}
		}
		if even < kp {
			lo, out := a[2*even*ld+i0:][:rows], strip[even*bf16MR:][:rows]
			for r := range out {
				out[r] = uint32(lo[r])
			}
		}
		return
	}
	k0 := 0
	if rows == bf16MR {
		k0 = transposePairs8(strip, bf16MR, a[i0*ld:], ld, even)
	}
	for r := 0; r < rows; r++ {
		row := a[(i0+r)*ld:][:K]
		for k := k0; k < even; k++ {
			strip[k*bf16MR+r] = uint32(row[2*k]) | uint32(row[2*k+1])<<16
		}
		if even < kp {
			strip[even*bf16MR+r] = uint32(row[2*even])
		}
	}
}

// packPairsB packs columns [j0, j0+cols) of op(B) (K×N) into one strip
// of kp pairs (kp ≥ K/2 rounded up): dst[k*NR + c] = op(B)[2k, j0+c] |
// op(B)[2k+1, j0+c]<<16, zero past the columns and past K.
func packPairsB(dst []uint32, b []uint16, ld int, trans bool, j0, cols, K, kp int) {
	strip := dst[:kp*bf16NR]
	even := K / 2
	if cols < bf16NR || even < kp {
		clear(strip)
	}
	if trans {
		// Row j0+c of B holds op(B)[., j0+c]: transpose 8 rows at a time.
		k0 := 0
		if cols == bf16NR {
			for g := 0; g < bf16NR; g += 8 {
				k0 = transposePairs8(strip[g:], bf16NR, b[(j0+g)*ld:], ld, even)
			}
		}
		for c := 0; c < cols; c++ {
			row := b[(j0+c)*ld:][:K]
			for k := k0; k < even; k++ {
				strip[k*bf16NR+c] = uint32(row[2*k]) | uint32(row[2*k+1])<<16
			}
			if K%2 == 1 {
				strip[even*bf16NR+c] = uint32(row[2*even])
			}
		}
		return
	}
	k := 0
	if cols == bf16NR {
		k = interleaveRows32(strip, b[j0:], ld, even)
	}
	for ; k < even; k++ {
		lo, hi := b[2*k*ld+j0:][:cols], b[(2*k+1)*ld+j0:][:cols]
		out := strip[k*bf16NR:][:cols]
		for c := range out {
			out[c] = uint32(lo[c]) | uint32(hi[c])<<16
		}
	}
	if K%2 == 1 {
		lo, out := b[2*even*ld+j0:][:cols], strip[even*bf16NR:][:cols]
		for c := range out {
			out[c] = uint32(lo[c])
		}
	}
}

// Vector helpers of the pair packing, set by bf16gemm_amd64.go where the
// CPU has them; each returns how many pairs it packed, 0 without one.
var (
	// interleaveRows32 sets dst[k*32 + c] = b[2k*ld + c] | b[(2k+1)*ld + c]<<16
	// for c < 32 and k < pairs.
	interleaveRows32 = noPairs
	// interleaveRows8 is interleaveRows32 for 8 columns (dst[k*8 + c]).
	interleaveRows8 = noPairs
	// transposePairs8 sets dst[k*dstK + r] = src[r*ld + 2k] | src[r*ld + 2k+1]<<16
	// for r < 8 and k below pairs rounded down to a multiple of 8.
	transposePairs8 = func(dst []uint32, dstK int, src []uint16, ld, pairs int) int { return 0 }
)

func noPairs(dst []uint32, b []uint16, ld, pairs int) int { return 0 }

// bf16Operands holds a BF16 product's operands widened to F32, reused
// across calls.
type bf16Operands struct{ a, b Buffer }

var bf16OperandPool pool[bf16Operands]

package cpu

import "github.com/fleetml/fleet/backend"

// The AMX BF16 product: Intel's tile registers and TDPBF16PS (Sapphire
// Rapids and later Xeons).
//
// A tile is at most 16 rows of 64 bytes. TDPBF16PS multiplies a tile of
// A (16 rows × 16 bf16 pairs, that is 32 values of k) by a tile of B in
// the pair layout, row k holding the pairs (B[2k][n], B[2k+1][n]) of 16
// columns n, and accumulates into a tile of 16×16 float32 (its arithmetic
// is in bf16twin.go, amxTwin). The kernel keeps a 32×32 block of C in four
// tiles (tmm0–3), loads two tiles of A (tmm4–5, rows 0–15 and 16–31) and
// two of B (tmm6–7, columns 0–15 and 16–31) per k-chunk of 32 values, and
// issues four TDPBF16PS: 16 KFLOP per 4 tile loads.
//
// Packing: A in strips of amxMR rows, row r of a strip holding its kp
// pairs (A[r][2k], A[r][2k+1]) contiguously, so a tile of A is 16 rows of
// 64 bytes with a row stride of 4·kp bytes; B in strips of 32 columns in
// the layout the dot-product kernel reads (packPairsB: pair k of column c
// at k*32 + c), so a tile of B is 16 rows of 64 bytes with a stride of
// 128. kp is K/2 rounded up to whole chunks of amxKP pairs; the padding is
// zero. A 32×32 block of C is computed whole over K by one kernel call.
//
// Tiles are configured (LDTILECFG) by each kernel call, on the thread that
// runs it, and released (TILERELEASE) before it returns: a goroutine may
// move to another OS thread between calls, and the tile configuration
// belongs to the thread. One call covers a 32-row strip of a 64×256 tile
// of C over all of K (up to 8 blocks of 32×32), which hides the
// configuration's cost. Linux lets a process use the tiles only after it
// asks (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)), done once,
// where the product is first considered (amx_amd64.go).
const (
	amxMR = 32     // rows of C per kernel block
	amxNR = bf16NR // columns of C per kernel block: the B strips
	amxKP = 16     // bf16 pairs per k-chunk (one tile row of 64 bytes)
)

// amxKernel computes nblk 32×32 blocks of C, side by side: block s from
// the A strip a (32 rows, row stride lda uint32) and the B strip at
// b[s*bstrip:], over kb chunks of amxKP pairs, into c[s*32:] with row
// stride ldc; it adds into C when add is set (the tiles start from C),
// else writes it. amxKernelAMX (amx_amd64.s) replaces it where the CPU
// and the OS allow AMX; this one is its portable twin, the same sums.
var amxKernel amxKernelFunc = amxKernelGo

type amxKernelFunc = func(kb int, a []uint32, lda int, b []uint32, bstrip int, c []float32, ldc, nblk int, add bool)

func amxKernelGo(kb int, a []uint32, lda int, b []uint32, bstrip int, c []float32, ldc, nblk int, add bool) {
	for s := 0; s < nblk; s++ {
		bs, cs := b[s*bstrip:], c[s*amxNR:]
		for r := 0; r < amxMR; r++ {
			row := a[r*lda:]
			for j := 0; j < amxNR; j++ {
				var acc float32
				if add {
					acc = flushDenormal(cs[r*ldc+j])
				}
				for ch := 0; ch < kb; ch++ {
					var even, odd float32
					for k := ch * amxKP; k < (ch+1)*amxKP; k++ {
						pa, pb := row[k], bs[k*amxNR+j]
						even = fmaDAZFTZ(backend.BF16ToF32(uint16(pa)), backend.BF16ToF32(uint16(pb)), even)
						odd = fmaDAZFTZ(backend.BF16ToF32(uint16(pa>>16)), backend.BF16ToF32(uint16(pb>>16)), odd)
					}
					acc = addDAZFTZ(acc, addDAZFTZ(even, odd))
				}
				cs[r*ldc+j] = acc
			}
		}
	}
}

// amxTiles is a bf16Task computing tiles of C with the AMX kernel.
type amxTiles bf16Task

// amxEdgePool holds the goroutines' edge blocks of C.
var amxEdgePool pool[[amxMR * amxNR]float32]

// matmulAMX is the AMX product (see above), on the dot products' driver
// (bf16Prepare) with A packed in AMX's strips. Alpha must be 1.
func (c *CPU) matmulAMX(p backend.MatMul, a, b, cc, bias backend.Ref) {
	t, pk := c.bf16Prepare(p, a, b, cc, bias, amxMR, roundUp((p.K+1)/2, amxKP), packRowsA, 2)
	c.parallelFor(p.Batch*t.tm*t.tn, 1, (*amxTiles)(t))
	bf16Tasks.put(t)
	bf16PackedPool.put(pk)
}

func (t *amxTiles) do(lo, hi int) {
	kp := t.kp
	kb := kp / amxKP
	e := amxEdgePool.get()
	defer amxEdgePool.put(e)
	edge := e[:]
	(*bf16Task)(t).eachTile(lo, hi, func(bi, i0, j0, mr, nr int, ct []float32, ldc int, add bool) {
		for ib := 0; ib < mr && kb > 0; ib += amxMR { // K = 0: C = beta·C
			rows := min(amxMR, mr-ib)
			astrip := t.pa[(bi*t.mPad+i0+ib)*kp:][:amxMR*kp]
			bstrips := t.pb[(bi*t.nPad+j0)*kp:]
			full := 0 // whole 32×32 blocks, computed in place
			if rows == amxMR {
				full = nr / amxNR
				if full > 0 {
					amxKernel(kb, astrip, kp, bstrips, amxNR*kp, ct[ib*ldc:], ldc, full, add)
				}
			}
			// The rest, a block at a time through edge: C copied in where
			// the kernel adds, so every element sums as in a whole block.
			for jb := full * amxNR; jb < nr; jb += amxNR {
				cols := min(amxNR, nr-jb)
				if add {
					clear(edge)
					for i := 0; i < rows; i++ {
						copy(edge[i*amxNR:i*amxNR+cols], ct[(ib+i)*ldc+jb:])
					}
				}
				amxKernel(kb, astrip, kp, bstrips[jb*kp:], amxNR*kp, edge, amxNR, 1, add)
				for i := 0; i < rows; i++ {
					copy(ct[(ib+i)*ldc+jb:(ib+i)*ldc+jb+cols], edge[i*amxNR:i*amxNR+cols])
				}
			}
		}
	})
}

// packRowsA packs rows [i0, i0+rows) of op(A) (M×K) into one AMX strip:
// dst[r*kp + k] = op(A)[i0+r, 2k] | op(A)[i0+r, 2k+1]<<16, zero past the
// rows and past K.
func packRowsA(dst []uint32, a []uint16, ld int, trans bool, i0, rows, K, kp int) {
	strip := dst[:amxMR*kp]
	if rows < amxMR || K < 2*kp {
		clear(strip)
	}
	for r := 0; r < rows; r++ {
		out := strip[r*kp:][:kp]
		if !trans {
			// Consecutive bf16 values of a row are its pairs, little-endian.
			row := a[(i0+r)*ld:][:K]
			for k := 0; k < K/2; k++ {
				out[k] = uint32(row[2*k]) | uint32(row[2*k+1])<<16
			}
			if K%2 == 1 {
				out[K/2] = uint32(row[K-1])
			}
			continue
		}
		// Column i0+r of the stored K×M matrix.
		for k := 0; k < K/2; k++ {
			out[k] = uint32(a[2*k*ld+i0+r]) | uint32(a[(2*k+1)*ld+i0+r])<<16
		}
		if K%2 == 1 {
			out[K/2] = uint32(a[(K-1)*ld+i0+r])
		}
	}
}

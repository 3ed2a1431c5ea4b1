package cpu

import "github.com/fleetml/fleet/backend"

// The widened BF16 product (see bf16gemm.go) splits C into tasks along
// its larger operand: with A the larger, a task is a block of bf16RowTask
// rows of C and widens its own rows of A; with B the larger, a block of
// bf16ColTask columns that widens its own columns of B. The smaller
// operand is widened once, in parallel, before the tasks (a transposed B
// is transposed as it is widened, so it is read in place). Each task runs
// the F32 product serially on what it widened, so a core reads the F32
// copy it just wrote from its own cache rather than the other core's.
const (
	bf16RowTask = gemmMC
	bf16ColTask = 128
)

// bf16WideTask is one widened BF16 product.
type bf16WideTask struct {
	p        backend.MatMul
	A, B     []uint16
	C, bias  []float32
	C16      []uint16  // C in BF16 (then C is nil): see tileC
	wa, wb   []float32 // the operand widened up front (the other is nil)
	lda, ldb int
	rows     bool // tasks are blocks of rows (A widened per task)
	per      int  // tasks per batch item
	wbT      bool // wb holds a transposed B widened untransposed
}

type (
	bf16WideWhole bf16WideTask // ranges over the elements widened up front
	bf16WideTiles bf16WideTask // ranges over tasks
)

var bf16WideTasks taskPool[bf16WideTask]

// bf16Local is one goroutine's widened block, reused across calls.
type bf16Local struct{ f []float32 }

// bf16LocalPool holds widened blocks of operands; bf16CPool blocks of a
// BF16 C (tileC).
var bf16LocalPool, bf16CPool pool[bf16Local]

// matmulBF16Wide is the widened BF16 product.
func (c *CPU) matmulBF16Wide(p backend.MatMul, a, b, cc, bias backend.Ref) {
	t := bf16WideTasks.get()
	*t = bf16WideTask{p: p, A: u16(a), B: u16(b), lda: p.K, ldb: p.N}
	t.C, t.C16 = outC(cc)
	if !bias.Nil() {
		t.bias = f32(bias)[:p.N]
	}
	if p.TransA {
		t.lda = p.M
	}
	if p.TransB {
		t.ldb = p.K
	}
	s := bf16OperandPool.get()
	t.rows = p.M*p.K >= p.K*p.N
	switch {
	case t.rows && p.TransB:
		// B up front, transposed as it is widened: batch item bi at
		// wb[bi*K*N:], K×N. A range is a range of the result's rows.
		t.per = (p.M + bf16RowTask - 1) / bf16RowTask
		s.b.F32 = grow(s.b.F32, p.Batch*p.K*p.N)
		t.wb, t.wbT = s.b.F32, true
		c.parallelFor(p.Batch*p.K, max(1, (1<<13)/max(1, p.N)), (*bf16WideWhole)(t))
	case t.rows:
		t.per = (p.M + bf16RowTask - 1) / bf16RowTask
		n := operandLen(p.Batch, p.StrideB, p.K*p.N)
		s.b.F32 = grow(s.b.F32, n)
		t.wb = s.b.F32
		c.parallelFor(n, 1<<13, (*bf16WideWhole)(t))
	default:
		t.per = (p.N + bf16ColTask - 1) / bf16ColTask
		n := operandLen(p.Batch, p.StrideA, p.M*p.K)
		s.a.F32 = grow(s.a.F32, n)
		t.wa = s.a.F32
		c.parallelFor(n, 1<<13, (*bf16WideWhole)(t))
	}
	c.parallelFor(p.Batch*t.per, 1, (*bf16WideTiles)(t))
	bf16OperandPool.put(s)
	bf16WideTasks.put(t)
}

func (t *bf16WideWhole) do(lo, hi int) {
	p := &t.p
	switch {
	case t.wa != nil:
		bf16ToF32s(t.wa[lo:hi], t.A[lo:hi])
	case !t.wbT:
		bf16ToF32s(t.wb[lo:hi], t.B[lo:hi])
	default:
		// Rows [lo, hi) of the batch items' K×N results, stacked.
		for lo < hi {
			bi, k0 := lo/p.K, lo%p.K
			k1 := min(p.K, k0+hi-lo)
			widenT(t.wb[bi*p.K*p.N:], t.B[bi*p.StrideB:], p.N, p.K, k0, k1)
			lo += k1 - k0
		}
	}
}

// widenT writes rows [k0, k1) of the K×N transpose of src (N rows of K,
// row stride K) into dst (row stride N), widened, 8 columns at a time.
func widenT(dst []float32, src []uint16, N, K, k0, k1 int) {
	for j0 := 0; j0 < N; j0 += 8 {
		w := min(8, N-j0)
		for k := k0; k < k1; k++ {
			out := dst[k*N+j0:][:w]
			for j := range out {
				out[j] = backend.BF16ToF32(src[(j0+j)*K+k])
			}
		}
	}
}

func (t *bf16WideTiles) do(lo, hi int) {
	p := &t.p
	w := getWork()
	defer workPool.put(w)
	loc := bf16LocalPool.get()
	defer bf16LocalPool.put(loc)
	cl := bf16CPool.get()
	defer bf16CPool.put(cl)
	for ti := lo; ti < hi; ti++ {
		bi, q := ti/t.per, ti%t.per
		if t.rows {
			i0 := q * bf16RowTask
			m := min(bf16RowTask, p.M-i0)
			av := widenBlock(loc, t.A[bi*p.StrideA:], t.lda, p.TransA, i0, m, p.K)
			bm := mat{t.wb[bi*p.K*p.N:], p.N, false}
			if !t.wbT {
				bm.d = t.wb[bi*p.StrideB:]
			}
			ct, ldc := tileC(cl, p, t.C, t.C16, bi, i0, 0, m, p.N)
			w.gemmSerial(av, bm, ct, ldc, m, p.N, p.K, 1, p.Beta)
			addBias(ct, ldc, m, p.N, t.bias, 0)
			storeTileC(p, ct, t.C16, bi, i0, 0, m, p.N)
			continue
		}
		j0 := q * bf16ColTask
		n := min(bf16ColTask, p.N-j0)
		// Columns [j0, j0+n) of op(B), widened into K rows of n.
		bv := mat{ld: n}
		if p.TransB {
			// They are rows of B: transpose them as they are widened, so
			// the product reads them in place.
			loc.f = grow(loc.f, n*p.K)
			widenT(loc.f, t.B[bi*p.StrideB+j0*p.K:], n, p.K, 0, p.K)
			bv.d = loc.f
		} else {
			bv.d = widenBlock(loc, t.B[bi*p.StrideB:], t.ldb, true, j0, n, p.K).d
		}
		ct, ldc := tileC(cl, p, t.C, t.C16, bi, 0, j0, p.M, n)
		w.gemmSerial(mat{t.wa[bi*p.StrideA:], t.lda, p.TransA}, bv, ct, ldc, p.M, n, p.K, 1, p.Beta)
		addBias(ct, ldc, p.M, n, t.bias, j0)
		storeTileC(p, ct, t.C16, bi, 0, j0, p.M, n)
	}
}

// widenBlock widens rows [i0, i0+m) of op(X) (… × K, X stored row-major
// with row stride ld, transposed when trans) into loc and returns them as
// an operand: m rows of K (row stride K), or for a transposed X K rows of
// m (op(X) read transposed, row stride m).
func widenBlock(loc *bf16Local, x []uint16, ld int, trans bool, i0, m, K int) mat {
	loc.f = grow(loc.f, m*K)
	if !trans {
		for r := 0; r < m; r++ {
			bf16ToF32s(loc.f[r*K:(r+1)*K], x[(i0+r)*ld:][:K])
		}
		return mat{loc.f, K, false}
	}
	for k := 0; k < K; k++ {
		bf16ToF32s(loc.f[k*m:(k+1)*m], x[k*ld+i0:][:m])
	}
	return mat{loc.f, m, true}
}

package cpu

import "github.com/fleetml/fleet/backend"

// Blocking for the matrix product. A task owns one mc×nc tile of C and
// walks K in kc-deep panels. The micro-kernel keeps an mr×nr block of C in
// registers for a whole panel, reading A as row strips of mr rows and B as
// column strips of nr columns. Strips are packed k-major where the kernel
// needs it (the portable and AVX2 kernels, alpha ≠ 1, transposed B, ragged
// edges); the AVX-512 kernel reads full strips of the operands in place. A
// B panel (kc×nc floats, 256 KB) stays in L2, one B strip and the A block
// in L1/L2.
const (
	gemmMC = 64
	gemmNC = 256
	gemmKC = 256
	// maxMR and maxNR bound every micro-kernel's block (for scratch space).
	maxMR = 8
	maxNR = 32
)

// microKernel computes one mr×nr block of op(A)@op(B) over a kc-deep
// panel, from packed strips a (kc×mr) and b (kc×nr), and adds it into c
// (row stride ldc), or overwrites c when add is false (the first panel of a
// product with beta = 0, which saves clearing C). It always writes the full
// block; edge blocks go through scratch.
type microKernel struct {
	name   string
	mr, nr int
	fn     func(kc int, a, b, c []float32, ldc int, add bool)
	// ext, when set, is fn reading operands in place, so MatMul packs
	// only ragged edge strips: A row-major (rowA: row r at a[r*lda:]) or as
	// a strip (step k's mr values at a[k*lda:], which is how a transposed
	// A is stored, and a packed strip with lda = mr); B as a strip (step k's
	// nr values at b[k*ldb:]: a row-major B in place, or packed with
	// ldb = nr). A is read in place only when alpha = 1.
	ext func(kc int, a []float32, lda int, rowA bool, b []float32, ldb int, c []float32, ldc int, add bool)
}

// transpose8, where the CPU has a SIMD one, sets dst[k*dstK + c] =
// src[c*ld + k] for c < 8 and k < n&^7 and returns n&^7: packB's
// transposed B, eight columns at a time, in 8×8 blocks. It moves data
// only, so results are the same bits with or without it.
var transpose8 func(dst []float32, dstK int, src []float32, ld, n int) int

// gemm is the micro-kernel MatMul uses: the fastest one the CPU supports
// (see gemm_amd64.go), else the portable Go one. Tests swap it.
var gemm = goKernel

// goKernel is the portable micro-kernel.
var goKernel = microKernel{name: "go", mr: 4, nr: 16, fn: gemmKernelGo}

// gemmKernels lists the micro-kernels this CPU can run, fastest first.
func gemmKernels() []microKernel { return append(simdKernels(), goKernel) }

// gemmKernelGo computes a 4×16 block one row at a time, accumulating in a
// local array.
func gemmKernelGo(kc int, a, b, c []float32, ldc int, add bool) {
	const mr, nr = 4, 16
	a = a[:kc*mr]
	b = b[:kc*nr]
	for r := 0; r < mr; r++ {
		var acc [nr]float32
		for k := 0; k < kc; k++ {
			x := a[k*mr+r]
			bk := (*[nr]float32)(b[k*nr : k*nr+nr])
			for j := range acc {
				acc[j] += x * bk[j]
			}
		}
		row := (*[nr]float32)(c[r*ldc : r*ldc+nr])
		if !add {
			*row = acc
			continue
		}
		for j := range acc {
			row[j] += acc[j]
		}
	}
}

// mat is an operand as the packing routines read it: op(X)(i, j) is
// d[i*ld+j], or d[j*ld+i] when trans.
type mat struct {
	d     []float32
	ld    int
	trans bool
}

// gemmWork is one goroutine's packing space (see init).
type gemmWork struct {
	a, b []float32
	edge [maxMR * maxNR]float32
}

// init makes w's packing buffers if it has none yet.
func (w *gemmWork) init() {
	if w.a == nil {
		w.a, w.b = make([]float32, (gemmMC+maxMR)*gemmKC), make([]float32, gemmKC*(gemmNC+maxNR))
	}
}

var workPool pool[gemmWork]

// getWork borrows a gemmWork; return it with workPool.put.
func getWork() *gemmWork {
	w := workPool.get()
	w.init()
	return w
}

// packed holds whole operands packed for one MatMul call, reused across calls.
type packed struct{ a, b []float32 }

var packedPool pool[packed]

// scratch holds slices that kernels borrow for the length of one call,
// so steady-state steps do not allocate.
type scratch[T any] struct{ p pool[[]T] }

// get borrows n elements (contents unspecified); return them with put.
func (s *scratch[T]) get(n int) *[]T {
	b := s.p.get()
	*b = grow(*b, n)
	return b
}

func (s *scratch[T]) put(b *[]T) { s.p.put(b) }

// grow returns s resized to n elements, reallocating only when it is too small.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// MatMul implements backend.Backend. The strips that need packing are
// packed once, in parallel (A in strips of mr rows, B in strips of nr
// columns, per kc-deep panel), then tasks compute mc×nc tiles of C. Each
// element of C is computed by one task with a fixed order over K, so the
// result does not depend on the thread count.
func (c *CPU) MatMul(p backend.MatMul, a, b, cc, bias backend.Ref) {
	if isBF16(cc) || isBF16(bias) {
		if c.matmulBF16Out(p, a, b, cc, bias) {
			return // the product rounded its tiles into C itself
		}
		// bf16 activations: the product into F32 scratch (C widened
		// into it first where beta reads it), rounded into C once.
		w := widening{c: c}
		nc := p.M * p.N
		if p.Batch > 1 {
			nc += (p.Batch - 1) * p.StrideC
		}
		br := w.in(bias, p.N)
		// C is read with beta, and kept in the gaps between strided items.
		c.MatMul(p, a, b, w.dst(cc, nc, p.Beta != 0 || (p.Batch > 1 && p.StrideC != p.M*p.N)), br)
		w.done()
		return
	}
	if r := p.Rounds(); r != backend.F32 && a.S.DType() == backend.F32 && b.S.DType() == backend.F32 {
		c.matmulRounded(p, r, a, b, cc, bias)
		return
	}
	if a.S.DType() == backend.BF16 && b.S.DType() == backend.BF16 {
		c.matmulBF16(p, a, b, cc, bias)
		return
	}
	if a.S.DType() == backend.F16 && b.S.DType() == backend.F16 {
		c.matmulF16(p, a, b, cc, bias)
		return
	}
	t := matmulTasks.get()
	t.p, t.A, t.B, t.C = p, f32(a), f32(b), f32(cc)
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
	mk := gemm
	t.mk = mk
	t.directA = mk.ext != nil && p.Alpha == 1
	t.directB = mk.ext != nil && !p.TransB
	t.mPad, t.nPad = roundUp(p.M, mk.mr), roundUp(p.N, mk.nr)
	pk := packedPool.get()
	// Panel q of batch item bi starts at (bi*K + q*kc) * mPad in pk.a: each
	// panel holds all mPad rows of A for kr = min(kc, K - q*kc) columns.
	// Strips read in place are left unpacked.
	pk.a = grow(pk.a, p.Batch*p.K*t.mPad)
	pk.b = grow(pk.b, p.Batch*p.K*t.nPad)
	t.pa, t.pb = pk.a, pk.b
	t.panels = (p.K + gemmKC - 1) / gemmKC
	t.as, t.bs = t.mPad/mk.mr, t.nPad/mk.nr
	c.parallelFor(p.Batch*t.panels*(t.as+t.bs), 8, (*matmulPack)(t))
	t.tm = (p.M + gemmMC - 1) / gemmMC
	t.tn = (p.N + gemmNC - 1) / gemmNC
	c.parallelFor(p.Batch*t.tm*t.tn, 1, (*matmulTiles)(t))
	matmulTasks.put(t)
	packedPool.put(pk)
}

// matmulRounded computes a product whose F32 operands are to be rounded
// to r first: it casts them into temporary storage and multiplies those.
// The CPU does not report itself an OperandRounder (tensor casts for it,
// once per operand), but honours Round so that every caller gets one
// meaning of it.
func (c *CPU) matmulRounded(p backend.MatMul, r backend.DType, a, b, cc, bias backend.Ref) {
	na, nb := p.Extents()
	ra, rb := c.Alloc(r, na), c.Alloc(r, nb)
	defer c.Free(ra)
	defer c.Free(rb)
	c.Cast(backend.Ref{S: ra}, a, na)
	c.Cast(backend.Ref{S: rb}, b, nb)
	p.Round = 0
	c.MatMul(p, backend.Ref{S: ra}, backend.Ref{S: rb}, cc, bias)
}

// matmulTask is one F32 MatMul call: the operands, the packed copies (pa,
// pb), and the layout of the two parallel phases. As matmulPack a range is
// a range of strips to pack (per batch item and panel: as strips of A,
// then bs strips of B); as matmulTiles, a range of mc×nc tiles of C
// (per batch item, tm×tn).
type matmulTask struct {
	p                            backend.MatMul
	A, B, C, bias, pa, pb        []float32
	mk                           microKernel
	lda, ldb, mPad, nPad, panels int
	as, bs, tm, tn               int
	directA, directB             bool
}

type (
	matmulPack  matmulTask
	matmulTiles matmulTask
)

var matmulTasks taskPool[matmulTask]

func (t *matmulPack) do(lo, hi int) {
	p, mk, per := &t.p, &t.mk, t.panels*(t.as+t.bs)
	for ti := lo; ti < hi; ti++ {
		bi, r := ti/per, ti%per
		q, s := r/(t.as+t.bs), r%(t.as+t.bs)
		k0 := q * gemmKC
		kr := min(gemmKC, p.K-k0)
		if s < t.as {
			i := s * mk.mr
			if t.directA && p.M-i >= mk.mr {
				continue
			}
			packA(t.pa[(bi*p.K+k0)*t.mPad+i*kr:], mat{t.A[bi*p.StrideA:], t.lda, p.TransA}, p.Alpha, i, k0, min(mk.mr, p.M-i), kr, mk.mr)
		} else {
			j := (s - t.as) * mk.nr
			if t.directB && p.N-j >= mk.nr {
				continue
			}
			packB(t.pb[(bi*p.K+k0)*t.nPad+j*kr:], mat{t.B[bi*p.StrideB:], t.ldb, p.TransB}, k0, j, kr, min(mk.nr, p.N-j), mk.nr)
		}
	}
}

func (t *matmulTiles) do(lo, hi int) {
	p, lda, ldb := &t.p, t.lda, t.ldb
	w := getWork()
	defer workPool.put(w)
	for ti := lo; ti < hi; ti++ {
		bi, r := ti/(t.tm*t.tn), ti%(t.tm*t.tn)
		i0, j0 := (r/t.tn)*gemmMC, (r%t.tn)*gemmNC
		mr, nr := min(gemmMC, p.M-i0), min(gemmNC, p.N-j0)
		ct := t.C[bi*p.StrideC+i0*p.N+j0:]
		add := scaleRows(ct, p.N, mr, nr, p.Beta, p.K)
		for k0 := 0; k0 < p.K; k0 += gemmKC {
			kr := min(gemmKC, p.K-k0)
			op := operands{
				ap: t.pa[(bi*p.K+k0)*t.mPad+i0*kr:], bp: t.pb[(bi*p.K+k0)*t.nPad+j0*kr:],
				lda: lda, ldb: ldb, rowA: !p.TransA,
			}
			if t.directA && p.TransA {
				op.ad = t.A[bi*p.StrideA+k0*lda+i0:]
			} else if t.directA {
				op.ad = t.A[bi*p.StrideA+i0*lda+k0:]
			}
			if t.directB {
				op.bd = t.B[bi*p.StrideB+k0*ldb+j0:]
			}
			microTiles(t.mk, op, kr, ct, p.N, mr, nr, w.edge[:], add)
			add = true
		}
		addBias(ct, p.N, mr, nr, t.bias, j0)
	}
}

// gemmSerial computes C = alpha*op(A)@op(B) + beta*C for an m×n C with
// row stride ldc, on the calling goroutine. Fused kernels (attention) use
// it on their own slices.
func (w *gemmWork) gemmSerial(A, B mat, C []float32, ldc, m, n, k int, alpha, beta float32) {
	mk := gemm
	directA := mk.ext != nil && alpha == 1
	directB := mk.ext != nil && !B.trans
	for i0 := 0; i0 < m; i0 += gemmMC {
		for j0 := 0; j0 < n; j0 += gemmNC {
			mr, nr := min(gemmMC, m-i0), min(gemmNC, n-j0)
			ct := C[i0*ldc+j0:]
			add := scaleRows(ct, ldc, mr, nr, beta, k)
			for k0 := 0; k0 < k; k0 += gemmKC {
				kr := min(gemmKC, k-k0)
				op := operands{ap: w.a, bp: w.b, lda: A.ld, ldb: B.ld, rowA: !A.trans}
				if !directA {
					packA(w.a, A, alpha, i0, k0, mr, kr, mk.mr)
				} else {
					if A.trans {
						op.ad = A.d[k0*A.ld+i0:]
					} else {
						op.ad = A.d[i0*A.ld+k0:]
					}
					if full := mr / mk.mr * mk.mr; full < mr { // only the ragged strip is packed
						packA(w.a[full*kr:], A, alpha, i0+full, k0, mr-full, kr, mk.mr)
					}
				}
				if !directB {
					packB(w.b, B, k0, j0, kr, nr, mk.nr)
				} else {
					op.bd = B.d[k0*B.ld+j0:]
					if full := nr / mk.nr * mk.nr; full < nr {
						packB(w.b[full*kr:], B, k0, j0+full, kr, nr-full, mk.nr)
					}
				}
				microTiles(mk, op, kr, ct, ldc, mr, nr, w.edge[:], add)
				add = true
			}
		}
	}
}

// scaleRows prepares an mr×nr block of C (row stride ldc) for the
// product's panels and says whether the first panel adds into it. With
// beta = 0 the first panel overwrites C, so nothing needs clearing and NaNs
// already in C do not survive; with K = 0 there is no panel, so C is cleared.
func scaleRows(ct []float32, ldc, mr, nr int, beta float32, K int) (add bool) {
	if beta == 1 {
		return true
	}
	if beta == 0 && K > 0 {
		return false
	}
	for i := 0; i < mr; i++ {
		row := ct[i*ldc : i*ldc+nr]
		if beta == 0 {
			clear(row)
			continue
		}
		for j := range row {
			row[j] *= beta
		}
	}
	return true
}

func addBias(ct []float32, ldc, mr, nr int, bias []float32, j0 int) {
	if bias == nil {
		return
	}
	for i := 0; i < mr; i++ {
		axpy(ct[i*ldc:i*ldc+nr], bias[j0:j0+nr], 1)
	}
}

// operands locates a block's A and B for microTiles: packed strips (ap,
// bp; strip ib of A at ap[ib*kr:], strip jb of B at bp[jb*kr:]) and, when
// set, the same operands read in place (ad, bd) with their leading
// dimensions; rowA says A in place is row-major rather than transposed.
type operands struct {
	ap, bp, ad, bd []float32
	lda, ldb       int
	rowA           bool
}

// microTiles runs the micro-kernel over an mr×nr block of C. Full strips
// come from the in-place operands when set, ragged ones from the packed
// strips. Edge blocks go through scratch.
func microTiles(mk microKernel, op operands, kr int, ct []float32, ldc, mr, nr int, edge []float32, add bool) {
	for jb := 0; jb < nr; jb += mk.nr {
		cols := min(mk.nr, nr-jb)
		b, ldb := op.bp[jb*kr:(jb+mk.nr)*kr], mk.nr
		if op.bd != nil && cols == mk.nr {
			b, ldb = op.bd[jb:], op.ldb
		}
		for ib := 0; ib < mr; ib += mk.mr {
			rows := min(mk.mr, mr-ib)
			a, lda, rowA := op.ap[ib*kr:(ib+mk.mr)*kr], mk.mr, false
			if op.ad != nil && rows == mk.mr {
				if op.rowA {
					a, lda, rowA = op.ad[ib*op.lda:], op.lda, true
				} else {
					a, lda = op.ad[ib:], op.lda
				}
			}
			kernel := func(c []float32, ldc int, add bool) {
				if mk.ext != nil {
					mk.ext(kr, a, lda, rowA, b, ldb, c, ldc, add)
				} else {
					mk.fn(kr, a, b, c, ldc, add)
				}
			}
			if rows == mk.mr && cols == mk.nr {
				kernel(ct[ib*ldc+jb:], ldc, add)
				continue
			}
			e := edge[:mk.mr*mk.nr]
			kernel(e, mk.nr, false)
			for i := 0; i < rows; i++ {
				dst, src := ct[(ib+i)*ldc+jb:(ib+i)*ldc+jb+cols], e[i*mk.nr:i*mk.nr+cols]
				if add {
					axpy(dst, src, 1)
				} else {
					copy(dst, src)
				}
			}
		}
	}
}

// packA copies alpha * op(A)[i0:i0+mr, k0:k0+kr] into strips of MR rows:
// element (i, k) goes to dst[(i/MR)*kr*MR + k*MR + i%MR]. Rows past mr are
// zero.
func packA(dst []float32, A mat, alpha float32, i0, k0, mr, kr, MR int) {
	for ib := 0; ib < mr; ib += MR {
		strip := dst[ib*kr : (ib+MR)*kr]
		rows := min(MR, mr-ib)
		if A.trans && rows == 8 && MR == 8 {
			for k := 0; k < kr; k++ {
				src := (*[8]float32)(A.d[(k0+k)*A.ld+i0+ib:])
				d := (*[8]float32)(strip[k*8:])
				d[0], d[1], d[2], d[3] = alpha*src[0], alpha*src[1], alpha*src[2], alpha*src[3]
				d[4], d[5], d[6], d[7] = alpha*src[4], alpha*src[5], alpha*src[6], alpha*src[7]
			}
			continue
		}
		if A.trans {
			// Stored K×M: each k gives MR consecutive floats.
			for k := 0; k < kr; k++ {
				src := A.d[(k0+k)*A.ld+i0+ib : (k0+k)*A.ld+i0+ib+rows]
				d := strip[k*MR : k*MR+MR]
				for r, v := range src {
					d[r] = alpha * v
				}
				clear(d[rows:])
			}
			continue
		}
		if rows == 8 && MR == 8 {
			packA8(strip, A.d[(i0+ib)*A.ld+k0:], A.ld, kr, alpha)
			continue
		}
		for r := 0; r < MR; r++ {
			if r >= rows {
				for k := 0; k < kr; k++ {
					strip[k*MR+r] = 0
				}
				continue
			}
			src := A.d[(i0+ib+r)*A.ld+k0 : (i0+ib+r)*A.ld+k0+kr]
			for k, v := range src {
				strip[k*MR+r] = alpha * v
			}
		}
	}
}

// packA8 interleaves 8 rows of a row-major A (row stride ld) into a
// k-major strip: it reads eight rows side by side and writes each k's
// eight values contiguously.
func packA8(strip, a []float32, ld, kr int, alpha float32) {
	r0, r1, r2, r3 := a[:kr], a[ld:ld+kr], a[2*ld:2*ld+kr], a[3*ld:3*ld+kr]
	r4, r5, r6, r7 := a[4*ld:4*ld+kr], a[5*ld:5*ld+kr], a[6*ld:6*ld+kr], a[7*ld:7*ld+kr]
	strip = strip[:8*kr]
	for k := range r0 {
		d := (*[8]float32)(strip[8*k : 8*k+8])
		d[0], d[1], d[2], d[3] = alpha*r0[k], alpha*r1[k], alpha*r2[k], alpha*r3[k]
		d[4], d[5], d[6], d[7] = alpha*r4[k], alpha*r5[k], alpha*r6[k], alpha*r7[k]
	}
}

// packB copies op(B)[k0:k0+kr, j0:j0+nr] into strips of NR columns:
// element (k, j) goes to dst[(j/NR)*kr*NR + k*NR + j%NR]. Columns past nr
// are zero.
func packB(dst []float32, B mat, k0, j0, kr, nr, NR int) {
	for jb := 0; jb < nr; jb += NR {
		strip := dst[jb*kr : (jb+NR)*kr]
		w := min(NR, nr-jb)
		if !B.trans && w == 32 && NR == 32 {
			for k := 0; k < kr; k++ {
				*(*[32]float32)(strip[k*32:]) = *(*[32]float32)(B.d[(k0+k)*B.ld+j0+jb:])
			}
			continue
		}
		if !B.trans {
			for k := 0; k < kr; k++ {
				src := B.d[(k0+k)*B.ld+j0+jb : (k0+k)*B.ld+j0+jb+w]
				d := strip[k*NR : k*NR+NR]
				copy(d, src)
				clear(d[w:])
			}
			continue
		}
		c0 := 0
		if transpose8 != nil { // 8×8 blocks transposed in registers
			for ; c0+8 <= w; c0 += 8 {
				row := (j0+jb+c0)*B.ld + k0
				k := transpose8(strip[c0:], NR, B.d[row:], B.ld, kr)
				for ; k < kr; k++ {
					for c := c0; c < c0+8; c++ {
						strip[k*NR+c] = B.d[row+(c-c0)*B.ld+k]
					}
				}
			}
		}
		for c := c0; c < NR; c++ {
			if c >= w {
				for k := 0; k < kr; k++ {
					strip[k*NR+c] = 0
				}
				continue
			}
			src := B.d[(j0+jb+c)*B.ld+k0 : (j0+jb+c)*B.ld+k0+kr]
			for k, v := range src {
				strip[k*NR+c] = v
			}
		}
	}
}

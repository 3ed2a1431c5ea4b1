package cpu

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// opHash is the hash of one kernel call's outputs.
type opHash struct{ name, sum string }

// opHasher runs kernels on one backend and hashes what they write. Its
// inputs are slices of one pool of random values, at random offsets.
type opHasher struct {
	c   *CPU
	r   *rng.RNG
	out []opHash
}

// hashPool is the random values inputs are cut from: normal, and never
// near zero (|v| ≥ 0.01).
var hashPool = sync.OnceValue(func() []float32 {
	r := rng.New(99)
	v := make([]float32, 3<<20)
	for i := range v {
		x := r.Norm()
		if math.Abs(x) < 0.01 {
			x = math.Copysign(0.01, x)
		}
		v[i] = float32(x)
	}
	return v
})

// vals returns n pool values (n at most 2<<20), scaled by std.
func (h *opHasher) vals(n int, std float32) []float32 {
	pool := hashPool()
	off := h.r.Intn(len(pool) - n + 1)
	v := make([]float32, n)
	for i, x := range pool[off : off+n] {
		v[i] = std * x
	}
	return v
}

// f32 uploads n random values scaled by std.
func (h *opHasher) f32(n int, std float32) backend.Ref { return put(h.c, h.vals(n, std), 1) }

// pos uploads n random values v, 0.01 ≤ v ≤ 3.
func (h *opHasher) pos(n int) backend.Ref {
	v := h.vals(n, 1)
	for i, x := range v {
		v[i] = min(abs32(x), 3)
	}
	return put(h.c, v, 1)
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// half uploads n random values rounded to dt (BF16 or F16).
func (h *opHasher) half(dt backend.DType, n int) backend.Ref {
	bits := make([]uint16, n)
	for i, v := range h.vals(n, 1) {
		if dt == backend.F16 {
			bits[i] = backend.F32ToF16(v)
		} else {
			bits[i] = backend.F32ToBF16(v)
		}
	}
	s := h.c.Alloc(dt, n+2)
	r := backend.Ref{S: s, Off: 2}
	h.c.Upload(r, backend.AsBytes(bits))
	return r
}

func (h *opHasher) ids(n, v int, masked bool) backend.Ref {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(h.r.Intn(v))
		if masked && i%17 == 5 {
			ids[i] = -1
		}
	}
	return putI32(h.c, ids, 1)
}

// hash records the hash of n elements of r's storage at r, of any dtype.
func (h *opHasher) hash(name string, r backend.Ref, n int) {
	b := make([]byte, n*r.S.DType().Size())
	h.c.Download(b, r)
	s := sha256.Sum256(b)
	h.out = append(h.out, opHash{name, hex.EncodeToString(s[:8])})
}

// runAll runs every kernel of the backend at sizes that split into many
// chunks, with ragged ends, and returns the hashes of their outputs. The
// inputs depend only on seed.
func runAll(c *CPU, seed uint64) []opHash {
	h := &opHasher{c: c, r: rng.New(seed)}
	const n = 300007 // elementwise: 19 grains of 16K, not a multiple of 8
	const n2 = 100003

	// Matrix products (every micro-kernel is run by the caller swapping gemm).
	for _, mc := range []struct {
		batch, m, n, k int
		ta, tb         bool
		alpha, beta    float32
		bias           bool
		strideB0       bool
	}{
		{1, 150, 600, 300, false, false, 1, 0, false, false},
		{1, 150, 600, 300, false, true, 0.7, 0.5, true, false},
		{1, 131, 77, 519, true, false, 1, 1, false, false},
		{1, 67, 301, 45, true, true, -1.3, 0, true, false},
		{3, 70, 129, 260, false, true, 1, 0.5, true, true},
		{2, 257, 65, 128, true, false, 0.5, 1, false, false},
		{1, 768, 128, 384, false, false, 1, 0, true, false},
	} {
		p := backend.MatMul{Batch: mc.batch, M: mc.m, N: mc.n, K: mc.k, TransA: mc.ta, TransB: mc.tb,
			Alpha: mc.alpha, Beta: mc.beta, StrideA: mc.m * mc.k, StrideB: mc.k * mc.n, StrideC: mc.m * mc.n}
		if mc.strideB0 {
			p.StrideB = 0
		}
		a, b := h.f32(mc.batch*mc.m*mc.k, 1), h.f32(mc.batch*mc.k*mc.n, 1)
		cc := h.f32(mc.batch*mc.m*mc.n, 1)
		var bias backend.Ref
		if mc.bias {
			bias = h.f32(mc.n, 1)
		}
		c.MatMul(p, a, b, cc, bias)
		h.hash(fmt.Sprintf("matmul/%+v", mc), cc, mc.batch*mc.m*mc.n)
	}
	// BF16 products, rows-first (M ≥ N) and columns-first, both
	// transposes; and an F16 product.
	for _, mc := range []struct {
		batch, m, n, k int
		ta, tb         bool
		beta           float32
		bias           bool
	}{
		{1, 300, 70, 131, false, false, 0, true},
		{2, 150, 100, 67, false, true, 0.5, false},
		{1, 40, 600, 99, true, false, 1, true},
		{2, 33, 260, 130, true, true, 0, false},
		{1, 768, 384, 128, false, false, 0, true},
	} {
		p := backend.MatMul{Batch: mc.batch, M: mc.m, N: mc.n, K: mc.k, TransA: mc.ta, TransB: mc.tb,
			Alpha: 1, Beta: mc.beta, StrideA: mc.m * mc.k, StrideB: mc.k * mc.n, StrideC: mc.m * mc.n}
		for _, dt := range []backend.DType{backend.BF16, backend.F16} {
			a, b := h.half(dt, mc.batch*mc.m*mc.k), h.half(dt, mc.batch*mc.k*mc.n)
			cc := h.f32(mc.batch*mc.m*mc.n, 1)
			var bias backend.Ref
			if mc.bias {
				bias = h.f32(mc.n, 1)
			}
			c.MatMul(p, a, b, cc, bias)
			h.hash(fmt.Sprintf("matmul/%v/%+v", dt, mc), cc, mc.batch*mc.m*mc.n)
		}
	}

	// Elementwise.
	for op := backend.Add; op <= backend.Div; op++ {
		a, b, d := h.f32(n, 1), h.f32(n, 1), h.f32(n, 1)
		c.Binary(op, d, a, b, n)
		h.hash(fmt.Sprintf("binary/%d", op), d, n)
		c.Binary(op, a, a, b, n2) // in place
		h.hash(fmt.Sprintf("binary/%d/inplace", op), a, n2)
	}
	{
		x, d := h.f32(n, 1), h.f32(n, 1)
		c.Axpy(d, x, -0.37, n)
		h.hash("axpy", d, n)
		c.Scale(d, x, 1.7, n2)
		h.hash("scale", d, n)
		c.Scale(x, x, -0.3, n)
		h.hash("scale/inplace", x, n)
	}
	for op := backend.Neg; op <= backend.Sqrt; op++ {
		x, d := h.pos(n), h.f32(n, 1)
		c.Unary(op, d, x, n)
		h.hash(fmt.Sprintf("unary/%d", op), d, n)
	}
	{
		x, d, dx := h.f32(n, 2), h.f32(n, 1), h.f32(n, 1)
		c.GELU(d, x, n)
		h.hash("gelu", d, n)
		c.GELU(d, x, n2)
		h.hash("gelu/n2", d, n)
		c.GELUBackward(dx, x, d, n)
		h.hash("gelu_bwd", dx, n)
	}
	{
		w, g, m, v := h.f32(n, 1), h.f32(n, 1), h.f32(n, 0.1), h.pos(n)
		p := backend.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3}
		c.AdamW(p, w, g, m, v, n)
		h.hash("adamw/w", w, n)
		h.hash("adamw/m", m, n)
		h.hash("adamw/v", v, n)
	}

	// Reductions.
	for _, sh := range [][2]int{{700, 1000}, {3001, 37}, {64, 5000}, {5, 7}} {
		rows, cols := sh[0], sh[1]
		x, d := h.f32(rows*cols, 1), h.f32(cols, 1)
		c.SumRows(d, x, rows, cols, 0)
		h.hash(fmt.Sprintf("sumrows/%dx%d", rows, cols), d, cols)
		c.SumRows(d, x, rows, cols, 0.5)
		h.hash(fmt.Sprintf("sumrows/%dx%d/beta", rows, cols), d, cols)
		dc := h.f32(rows, 1)
		c.SumCols(dc, x, rows, cols, 1)
		h.hash(fmt.Sprintf("sumcols/%dx%d", rows, cols), dc, rows)
	}
	for _, m := range []int{300001, 2 << 20, 1000} {
		x, d := h.f32(m, 1), h.f32(1, 1)
		c.SumSquares(d, x, m, 1)
		h.hash(fmt.Sprintf("sumsquares/%d", m), d, 1)
	}

	// Row kernels.
	for _, sh := range [][2]int{{513, 77}, {1001, 64}} {
		rows, cols := sh[0], sh[1]
		x, y, dy, dx := h.f32(rows*cols, 2), h.f32(rows*cols, 1), h.f32(rows*cols, 1), h.f32(rows*cols, 1)
		c.Softmax(y, x, rows, cols)
		h.hash(fmt.Sprintf("softmax/%dx%d", rows, cols), y, rows*cols)
		c.SoftmaxBackward(dx, y, dy, rows, cols)
		h.hash(fmt.Sprintf("softmax_bwd/%dx%d", rows, cols), dx, rows*cols)
	}
	for _, sh := range [][2]int{{700, 48}, {1500, 50}, {513, 768}} {
		rows, cols := sh[0], sh[1]
		for _, withBias := range []bool{true, false} {
			x, w, out := h.f32(rows*cols, 1), h.f32(cols, 1), h.f32(rows*cols, 1)
			mean, rstd := h.f32(rows, 1), h.f32(rows, 1)
			var b, db backend.Ref
			if withBias {
				b, db = h.f32(cols, 1), h.f32(cols, 1)
			}
			name := fmt.Sprintf("layernorm/%dx%d/bias=%v", rows, cols, withBias)
			c.LayerNorm(out, mean, rstd, x, w, b, rows, cols, 1e-5)
			h.hash(name+"/out", out, rows*cols)
			h.hash(name+"/mean", mean, rows)
			h.hash(name+"/rstd", rstd, rows)
			dx, dw, g := h.f32(rows*cols, 1), h.f32(cols, 1), h.f32(rows*cols, 1)
			c.LayerNormBackward(dx, backend.Ref{}, dw, db, g, x, mean, rstd, w, rows, cols, backend.DropoutOut{})
			h.hash(name+"/dx", dx, rows*cols)
			h.hash(name+"/dw", dw, cols)
			if withBias {
				h.hash(name+"/db", db, cols)
			}
		}
	}
	for _, sh := range [][2]int{{700, 301}, {96, 50257 / 8}} {
		rows, v := sh[0], sh[1]
		logits, losses, lse := h.f32(rows*v, 3), h.f32(rows, 1), h.f32(rows, 1)
		tg := h.ids(rows, v, true)
		c.CrossEntropy(losses, lse, logits, tg, rows, v)
		h.hash(fmt.Sprintf("cross_entropy/%dx%d/loss", rows, v), losses, rows)
		h.hash(fmt.Sprintf("cross_entropy/%dx%d/lse", rows, v), lse, rows)
		dl, one := h.f32(rows*v, 1), put(c, []float32{1.25}, 0)
		c.CrossEntropyBackward(dl, logits, lse, tg, one, 1/float32(rows), rows, v)
		h.hash(fmt.Sprintf("cross_entropy_bwd/%dx%d", rows, v), dl, rows*v)
	}
	for _, sh := range [][3]int{{700, 96, 65}, {700, 1000, 50}, {3000, 37, 11}} {
		tokens, dim, vocab := sh[0], sh[1], sh[2]
		table, out, ids := h.f32(vocab*dim, 1), h.f32(tokens*dim, 1), h.ids(tokens, vocab, false)
		c.Embedding(out, table, ids, tokens, dim)
		h.hash(fmt.Sprintf("embedding/%dx%d", tokens, dim), out, tokens*dim)
		dt, g := h.f32(vocab*dim, 1), h.f32(tokens*dim, 1)
		c.EmbeddingBackward(dt, g, ids, tokens, dim)
		h.hash(fmt.Sprintf("embedding_bwd/%dx%d", tokens, dim), dt, vocab*dim)
	}

	// Attention.
	for _, p := range []backend.Attention{{B: 3, T: 150, C: 96, H: 4}, {B: 2, T: 64, C: 128, H: 4}, {B: 1, T: 37, C: 24, H: 3}} {
		qkv, out, saved := h.f32(p.B*p.T*3*p.C, 1), h.f32(p.B*p.T*p.C, 1), h.f32(p.SavedLen(), 1)
		c.Attention(p, out, saved, qkv)
		name := fmt.Sprintf("attention/%+v", p)
		h.hash(name+"/out", out, p.B*p.T*p.C)
		h.hash(name+"/lse", saved, p.SavedLen())
		dqkv, dout := h.f32(p.B*p.T*3*p.C, 1), h.f32(p.B*p.T*p.C, 1)
		c.AttentionBackward(p, dqkv, dout, out, saved, qkv)
		h.hash(name+"/dqkv", dqkv, p.B*p.T*3*p.C)
	}
	{
		p := backend.AttentionKV{B: 3, T: 5, C: 64, H: 4, Pos: 7, MaxT: 16}
		kc, vc := h.f32(p.B*p.MaxT*p.C, 1), h.f32(p.B*p.MaxT*p.C, 1)
		qkv, out := h.f32(p.B*p.T*3*p.C, 1), h.f32(p.B*p.T*p.C, 1)
		c.AttentionKV(p, out, qkv, kc, vc)
		h.hash("attention_kv/out", out, p.B*p.T*p.C)
		h.hash("attention_kv/k", kc, p.B*p.MaxT*p.C)
	}

	// The Llama-style kernels (backend.LlamaBlocks), with rows across
	// several lnChunk chunks for the weights' partial sums.
	{
		rows, cols := 300, 48
		x, w := h.f32(rows*cols, 1), h.f32(cols, 1)
		out, rstd := h.f32(rows*cols, 1), h.f32(rows, 1)
		c.RMSNorm(out, rstd, x, w, rows, cols, 1e-5)
		h.hash("rmsnorm/out", out, rows*cols)
		dx, dw, g := h.f32(rows*cols, 1), h.f32(cols, 1), h.f32(rows*cols, 1)
		c.RMSNormBackward(dx, backend.Ref{}, dw, g, x, rstd, w, rows, cols, backend.DropoutOut{})
		h.hash("rmsnorm/dx", dx, rows*cols)
		h.hash("rmsnorm/dw", dw, cols)

		gu, so := h.f32(2*rows*cols, 2), h.f32(rows*cols, 1)
		c.SwiGLU(so, gu, rows, cols)
		h.hash("swiglu/out", so, rows*cols)
		dgu := h.f32(2*rows*cols, 1)
		c.SwiGLUBackward(dgu, gu, g, rows, cols)
		h.hash("swiglu/dgu", dgu, 2*rows*cols)

		ro, rdx := h.f32(2*rows*cols, 1), h.f32(2*rows*cols, 1) // past elemGrain: two ranges
		c.ReLU2(ro, gu, 2*rows*cols)
		h.hash("relu2/out", ro, 2*rows*cols)
		c.ReLU2Backward(rdx, gu, dgu, 2*rows*cols)
		h.hash("relu2/dx", rdx, 2*rows*cols)

		rp := backend.Rotary{B: 3, T: 100, H: 4, KVH: 2, HD: 8, MaxPos: 100, Eps: 1e-6}
		nq := rp.B * rp.T * rp.Width()
		tab, qkv, ro := h.f32(rp.MaxPos*rp.HD, 1), h.f32(nq, 1), h.f32(nq, 1)
		qw, kw, rr := h.f32(rp.HD, 1), h.f32(rp.HD, 1), h.f32(rp.B*rp.T*(rp.H+rp.KVH), 1)
		c.Rotary(rp, ro, rr, qkv, qw, kw, tab)
		h.hash("rotary/out", ro, nq)
		dq, dqw, dkw, rg := h.f32(nq, 1), h.f32(rp.HD, 1), h.f32(rp.HD, 1), h.f32(nq, 1)
		c.RotaryBackward(rp, dq, dqw, dkw, rg, qkv, rr, qw, kw, tab)
		h.hash("rotary/dqkv", dq, nq)
		h.hash("rotary/dqw", dqw, rp.HD)
		h.hash("rotary/dkw", dkw, rp.HD)

		ap := backend.Attention{B: 2, T: 70, C: 32, H: 4, KVH: 2}
		aq, ao, saved, dqkv := h.f32(ap.B*ap.T*ap.Width(), 1), h.f32(ap.B*ap.T*ap.C, 1), h.f32(ap.SavedLen(), 1), h.f32(ap.B*ap.T*ap.Width(), 1)
		c.Attention(ap, ao, saved, aq)
		h.hash("grouped_attention/out", ao, ap.B*ap.T*ap.C)
		c.AttentionBackward(ap, dqkv, h.f32(ap.B*ap.T*ap.C, 1), ao, saved, aq)
		h.hash("grouped_attention/dqkv", dqkv, ap.B*ap.T*ap.Width())

		lp := backend.LSTMStep{B: 37, T: 3, H: 24, Step: 1}
		lu := lp.B * lp.H
		lxg, lout, lact, lc, lh := h.f32(lp.B*lp.T*4*lp.H, 2), h.f32(lp.B*lp.T*lp.H, 1), h.f32(4*lu, 1), h.f32(lu, 1), h.f32(lu, 1)
		lcp := h.f32(lu, 1)
		c.LSTMCell(lp, lact, lc, lh, lout, lxg, h.f32(4*lu, 2), lcp)
		h.hash("lstm/act", lact, 4*lu)
		h.hash("lstm/out", lout, lp.B*lp.T*lp.H)
		ldg, ldxg, ldc := h.f32(4*lu, 1), h.f32(lp.B*lp.T*4*lp.H, 1), h.f32(lu, 1)
		c.LSTMCellBackward(lp, ldg, ldxg, ldc, h.f32(lp.B*lp.T*lp.H, 1), h.f32(lu, 1), ldc, lact, lc, lcp)
		h.hash("lstm/dxg", ldxg, lp.B*lp.T*4*lp.H)
		h.hash("lstm/dc", ldc, lu)
	}

	// Conversions and copies.
	{
		x := h.f32(n, 100)
		for _, dt := range []backend.DType{backend.BF16, backend.F16} {
			s := c.Alloc(dt, n+3)
			d := backend.Ref{S: s, Off: 3}
			c.Cast(d, x, n)
			h.hash(fmt.Sprintf("cast/f32->%v", dt), d, n)
			back := h.f32(n, 1)
			c.Cast(back, d, n)
			h.hash(fmt.Sprintf("cast/%v->f32", dt), back, n)
		}
		ids := h.ids(n2, 1<<20, false)
		d := h.f32(n2, 1)
		c.Cast(d, ids, n2)
		h.hash("cast/i32->f32", d, n2)
		y := h.f32(n, 1)
		c.Copy(y, x, n2)
		c.Fill(backend.Ref{S: y.S, Off: y.Off + n2}, -2.5, 1000)
		h.hash("copy_fill", y, n)
	}
	return h.out
}

// kernelSet is one choice of the swappable kernels: the SIMD ones this
// CPU has, or the portable Go ones other CPUs run.
type kernelSet struct {
	name     string
	portable bool
	gemm     microKernel
	bf16     *bf16Product
}

// kernelSets lists every micro-kernel (with the widened BF16 product,
// which runs on it), the BF16 dot products, and everything portable. The
// BF16 product is chosen here, not by timing, so the sets are the same on
// every run.
func kernelSets() []kernelSet {
	bf16Chosen.Do(chooseBF16)
	var sets []kernelSet
	for _, mk := range gemmKernels() {
		sets = append(sets, kernelSet{name: mk.name, gemm: mk, bf16: widenProduct})
	}
	sets = append(sets, kernelSet{name: gemm.name + "/bf16dot", gemm: gemm, bf16: dotProduct})
	if amxProduct.offered() {
		sets = append(sets, kernelSet{name: gemm.name + "/bf16amx", gemm: gemm, bf16: amxProduct})
	}
	sets = append(sets, kernelSet{name: "portable", portable: true, gemm: goKernel, bf16: dotProduct})
	if !testing.Short() { // the AMX driver's split is the dot products' (tiles of C)
		sets = append(sets, kernelSet{name: "portable/bf16amx", portable: true, gemm: goKernel, bf16: amxProduct})
	}
	return sets
}

// useKernels swaps in ks's kernels and returns a function that restores
// the previous ones.
func useKernels(ks kernelSet) (restore func()) {
	saved := []any{gemm, bf16Use, binaryChunk, axpyChunk, scaleChunk, geluChunk, geluBackwardChunk, expChunk,
		adamwChunk, lnForwardRow, lnBackwardRow, f32ToBF16Block, bf16ToF32Block, bf16Kernel,
		interleaveRows32, interleaveRows8, transposePairs8, expAffineChunk, transpose8,
		rmsForwardRow, rmsBackwardRow, rotate}
	gemm, bf16Use = ks.gemm, ks.bf16
	savedAMX := amxKernel
	if ks.portable {
		binaryChunk, axpyChunk, scaleChunk = binaryGo, axpyGo, scaleGo
		geluChunk, geluBackwardChunk, expChunk, expAffineChunk = geluGo, geluBackwardGo, expGo, expAffineGo
		transpose8 = nil
		adamwChunk, lnForwardRow, lnBackwardRow = adamwGo, lnForwardRowGo, lnBackwardRowGo
		rmsForwardRow, rmsBackwardRow, rotate = rmsForwardRowGo, rmsBackwardRowGo, rotateGo
		f32ToBF16Block = func([]uint16, []float32) int { return 0 }
		bf16ToF32Block = func([]float32, []uint16) int { return 0 }
		bf16Kernel, interleaveRows32, interleaveRows8, amxKernel = bf16KernelGo, noPairs, noPairs, amxKernelGo
		transposePairs8 = func([]uint32, int, []uint16, int, int) int { return 0 }
	}
	return func() {
		gemm, bf16Use, amxKernel = saved[0].(microKernel), saved[1].(*bf16Product), savedAMX
		binaryChunk = saved[2].(func(int, []float32, []float32, []float32))
		axpyChunk = saved[3].(func([]float32, []float32, float32))
		scaleChunk = saved[4].(func([]float32, []float32, float32))
		geluChunk = saved[5].(func([]float32, []float32))
		geluBackwardChunk = saved[6].(func([]float32, []float32, []float32))
		expChunk = saved[7].(func([]float32, []float32))
		adamwChunk = saved[8].(func([]float32, []float32, []float32, []float32, *adamConsts))
		lnForwardRow = saved[9].(func([]float32, []float32, []float32, []float32, float32) (float32, float32))
		lnBackwardRow = saved[10].(func([]float32, []float32, []float32, []float32, []float32, []float32, float32, float32))
		f32ToBF16Block = saved[11].(func([]uint16, []float32) int)
		bf16ToF32Block = saved[12].(func([]float32, []uint16) int)
		bf16Kernel = saved[13].(func(int, []uint32, []uint32, []float32, int, bool))
		interleaveRows32 = saved[14].(func([]uint32, []uint16, int, int) int)
		interleaveRows8 = saved[15].(func([]uint32, []uint16, int, int) int)
		transposePairs8 = saved[16].(func([]uint32, int, []uint16, int, int) int)
		expAffineChunk = saved[17].(func([]float32, []float32, float32, float32) float32)
		transpose8 = saved[18].(func([]float32, int, []float32, int, int) int)
		rmsForwardRow = saved[19].(func([]float32, []float32, []float32, float32) float32)
		rmsBackwardRow = saved[20].(func([]float32, []float32, []float32, []float32, []float32, float32))
		rotate = saved[21].(func([]float32, []float32, []float32, []float32, float32))
	}
}

// TestThreadBudget requires every kernel to give bit-identical results
// with any thread budget, changed with SetThreads on one backend after it
// has run kernels: with each micro-kernel, both BF16 products, and the
// portable kernels other CPUs run.
func TestThreadBudget(t *testing.T) {
	sets := kernelSets()
	if testing.Short() {
		sets = []kernelSet{sets[0], sets[len(sets)-1]}
	}
	for i, ks := range sets {
		// Every budget with the default kernels, a few with the others.
		budgets := []int{1, 3, 4, 5, 8, 16, 2}
		if i > 0 || testing.Short() {
			budgets = []int{1, 3, 8}
		}
		t.Run(ks.name, func(t *testing.T) {
			defer useKernels(ks)()
			c := newCPU(2)
			base := runAll(c, 7)
			for _, n := range budgets {
				c.SetThreads(n)
				got := runAll(c, 7)
				for i, h := range got {
					if h != base[i] {
						t.Errorf("%d threads: %s hashes to %s, with 2 threads %s", n, h.name, h.sum, base[i].sum)
					}
				}
			}
		})
	}
}

// TestParallelForChunks checks parallelForChunks' split: every index
// handled once, by a range inside one of the chunks 2 threads give, that
// starts at a multiple of pieceAlign from its chunk's start and is a
// multiple of pieceAlign long unless it ends the chunk.
func TestParallelForChunks(t *testing.T) {
	for _, n := range []int{1, 5, 63, 64, 65, 1000, 4097, 100003, 300007, 1 << 20} {
		for _, grain := range []int{0, 1, 3, 64, 5000, elemGrain} {
			chunks := min((n+max(grain, 1)-1)/max(grain, 1), chunkCap)
			size := (n + chunks - 1) / chunks
			for _, th := range []int{1, 2, 3, 4, 7, 8, 16, 64} {
				c := newCPU(th)
				hits := make([]int32, n)
				var mu sync.Mutex
				var bad string
				c.parallelForChunks(n, grain, rangeFunc(func(lo, hi int) {
					ch := lo / size
					end := min((ch+1)*size, n)
					if lo >= hi || hi > end || (lo-ch*size)%pieceAlign != 0 || (hi-lo)%pieceAlign != 0 && hi != end {
						mu.Lock()
						bad = fmt.Sprintf("range [%d, %d) in chunk [%d, %d)", lo, hi, ch*size, end)
						mu.Unlock()
					}
					for i := lo; i < hi; i++ {
						hits[i]++
					}
				}))
				if bad != "" {
					t.Fatalf("threads %d n %d grain %d: %s", th, n, grain, bad)
				}
				for i, h := range hits {
					if h != 1 {
						t.Fatalf("threads %d n %d grain %d: index %d handled %d times", th, n, grain, i, h)
					}
				}
				c.SetThreads(1)
			}
		}
	}
}

// TestSetThreadsHelpers checks that SetThreads after kernels have run
// resizes the helper goroutines: a kernel that splits its work starts
// Threads()-1 of them, and SetThreads stops them, leaving none behind.
func TestSetThreadsHelpers(t *testing.T) {
	c := newCPU(1)
	r := rng.New(3)
	const n = 1 << 18
	x, y := put(c, randF32(r, n, 1), 0), put(c, make([]float32, n), 0)
	helpers := func() int {
		if w := c.crew.Load(); w != nil {
			return w.size
		}
		return 0
	}
	// goroutines waits (up to 2s) for the goroutine count to be want,
	// and returns it.
	goroutines := func(want int) int {
		got := runtime.NumGoroutine()
		for i := 0; i < 400 && got != want; i++ {
			time.Sleep(5 * time.Millisecond)
			got = runtime.NumGoroutine()
		}
		return got
	}
	c.GELU(y, x, n)
	want := get(c, y, n)
	before := runtime.NumGoroutine()
	for _, th := range []int{4, 2, 8, 3, 1, 6} {
		c.SetThreads(th)
		if h := helpers(); h != 0 {
			t.Fatalf("SetThreads(%d) left %d helpers running", th, h)
		}
		if g := goroutines(before); g != before {
			t.Fatalf("after SetThreads(%d): %d goroutines, %d before", th, g, before)
		}
		c.GELU(y, x, n)
		if h := helpers(); h != th-1 {
			t.Fatalf("%d threads: %d helpers", th, h)
		}
		if g := goroutines(before + th - 1); g != before+th-1 {
			t.Fatalf("%d threads: %d goroutines, want %d", th, g, before+th-1)
		}
		for i, v := range get(c, y, n) {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Fatalf("%d threads: gelu [%d] = %v, with 1 thread %v", th, i, v, want[i])
			}
		}
	}
	c.SetThreads(1)
	if g := goroutines(before); g != before {
		t.Fatalf("after SetThreads(1): %d goroutines, %d before", g, before)
	}
}

// TestSetThreadsWhileRunning changes a backend's budget from one
// goroutine while another runs kernels on it: SetThreads waits for the
// parallel work in flight, and results stay the same.
func TestSetThreadsWhileRunning(t *testing.T) {
	c := newCPU(2)
	r := rng.New(4)
	const n = 1 << 17
	x, y := put(c, randF32(r, n, 1), 0), put(c, make([]float32, n), 0)
	c.GELU(y, x, n)
	want := get(c, y, n)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 40; i++ {
			c.SetThreads(1 + i%4)
		}
	}()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		c.GELU(y, x, n)
		for i, v := range get(c, y, n) {
			if math.Float32bits(v) != math.Float32bits(want[i]) {
				t.Fatalf("gelu [%d] = %v, want %v", i, v, want[i])
			}
		}
	}
	c.SetThreads(1)
}

// TestConcurrentDevices runs two logical CPU devices with one thread each
// from two goroutines at once, as pipeline stages do (run it with -race),
// and requires each to compute what one device computes alone.
func TestConcurrentDevices(t *testing.T) {
	run := func(c *CPU, seed uint64) []opHash { return runSmall(c, seed) }
	want := [2][]opHash{run(newCPU(1), 1), run(newCPU(1), 2)}
	devs := [2]*CPU{New(backend.Device{Kind: "cpu", Index: 1}), New(backend.Device{Kind: "cpu", Index: 2})}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for d, c := range devs {
		c.SetThreads(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for rep := 0; rep < 3; rep++ {
				if rep == 1 {
					c.SetThreads(2) // the budget changes between kernels
				} else {
					c.SetThreads(1)
				}
				for i, h := range run(c, uint64(d+1)) {
					if h != want[d][i] {
						errs <- fmt.Sprintf("%v, round %d: %s hashes to %s, alone %s", c.Device(), rep, h.name, h.sum, want[d][i].sum)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// runSmall is a few of runAll's kernels at small sizes.
func runSmall(c *CPU, seed uint64) []opHash {
	h := &opHasher{c: c, r: rng.New(seed)}
	const n = 40000
	p := backend.MatMul{Batch: 2, M: 70, N: 90, K: 130, TransB: true, Alpha: 1, StrideA: 70 * 130, StrideB: 90 * 130, StrideC: 70 * 90}
	a, b, cc, bias := h.f32(2*70*130, 1), h.f32(2*90*130, 1), h.f32(2*70*90, 1), h.f32(90, 1)
	c.MatMul(p, a, b, cc, bias)
	h.hash("matmul", cc, 2*70*90)
	ab, bb := h.half(backend.BF16, 2*70*130), h.half(backend.BF16, 2*90*130)
	c.MatMul(p, ab, bb, cc, bias)
	h.hash("matmul/bf16", cc, 2*70*90)
	x, y, dx := h.f32(n, 1), h.f32(n, 1), h.f32(n, 1)
	c.GELU(y, x, n)
	c.GELUBackward(dx, x, y, n)
	h.hash("gelu_bwd", dx, n)
	rows, cols := 200, 48
	out, mean, rstd, w, bb2 := h.f32(rows*cols, 1), h.f32(rows, 1), h.f32(rows, 1), h.f32(cols, 1), h.f32(cols, 1)
	c.LayerNorm(out, mean, rstd, x, w, bb2, rows, cols, 1e-5)
	dw, db := h.f32(cols, 1), h.f32(cols, 1)
	c.LayerNormBackward(dx, backend.Ref{}, dw, db, y, x, mean, rstd, w, rows, cols, backend.DropoutOut{})
	h.hash("layernorm_bwd/dx", dx, rows*cols)
	h.hash("layernorm_bwd/dw", dw, cols)
	ap := backend.Attention{B: 2, T: 70, C: 32, H: 2}
	qkv, ao, saved, dqkv := h.f32(ap.B*ap.T*3*ap.C, 1), h.f32(ap.B*ap.T*ap.C, 1), h.f32(ap.SavedLen(), 1), h.f32(ap.B*ap.T*3*ap.C, 1)
	c.Attention(ap, ao, saved, qkv)
	c.AttentionBackward(ap, dqkv, y, ao, saved, qkv)
	h.hash("attention_bwd", dqkv, ap.B*ap.T*3*ap.C)
	v := 65
	logits, losses, lse, dl := h.f32(rows*v, 2), h.f32(rows, 1), h.f32(rows, 1), h.f32(rows*v, 1)
	ids := h.ids(rows, v, true)
	c.CrossEntropy(losses, lse, logits, ids, rows, v)
	c.CrossEntropyBackward(dl, logits, lse, ids, put(c, []float32{1}, 0), 1/float32(rows), rows, v)
	h.hash("cross_entropy_bwd", dl, rows*v)
	dt := h.f32(v*cols, 1)
	c.EmbeddingBackward(dt, x, h.ids(rows, v, false), rows, cols)
	h.hash("embedding_bwd", dt, v*cols)
	pw, pm, pv := h.f32(n, 1), h.f32(n, 0.1), h.pos(n)
	c.AdamW(backend.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 2}, pw, dx, pm, pv, n)
	h.hash("adamw", pw, n)
	ss := h.f32(1, 1)
	c.SumSquares(ss, pw, n, 1)
	h.hash("sumsquares", ss, 1)
	return h.out
}

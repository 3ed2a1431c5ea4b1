package cpu

import (
	"fmt"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// TestKernelsDoNotAllocate requires every kernel a training step uses to
// make no heap allocation once it has run at a shape, with one thread and
// with several. The sizes are a small GPT's (B=4, T=64, C=128, 4 heads,
// 4C hidden, 65-token vocabulary), large enough that every kernel splits
// its work into several chunks when it has two threads.
func TestKernelsDoNotAllocate(t *testing.T) {
	for _, threads := range []int{1, 2} {
		c := newCPU(threads)
		for _, k := range allocCases(c) {
			t.Run(fmt.Sprintf("threads=%d/%s", threads, k.name), func(t *testing.T) {
				k.run() // first call at this shape: pools and scratch fill
				if n := testing.AllocsPerRun(20, k.run); n != 0 {
					t.Errorf("%v allocations per call", n)
				}
			})
		}
	}
}

type allocCase struct {
	name string
	run  func()
}

// allocCases builds the operands of the kernels on c and returns one case
// per kernel call, with random inputs.
func allocCases(c *CPU) []allocCase {
	const (
		B, T, C, H = 4, 64, 128, 4
		rows       = B * T
		hidden     = 4 * C
		vocab      = 65
		params     = 100_000
	)
	r := rng.New(31)
	rnd := func(n int) backend.Ref { return put(c, randF32(r, n, 1), 1) }
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(r.Intn(vocab))
	}
	tok := putI32(c, ids, 2)
	hostIDs := append([]int32(nil), ids...)
	ids[3] = -1 // a masked target
	tgt := putI32(c, ids, 0)

	x, h, dh := rnd(rows*C), rnd(rows*hidden), rnd(rows*hidden)
	y, hy := rnd(rows*C), rnd(rows*hidden)
	wQKV, bQKV, qkv := rnd(C*3*C), rnd(3*C), rnd(rows*3*C)
	wFC, wProj := rnd(C*hidden), rnd(hidden*C)
	dW, dX := rnd(hidden*hidden), rnd(rows*hidden)
	table, dtable := rnd(vocab*C), rnd(vocab*C)
	logits, dlogits, probs := rnd(rows*vocab), rnd(rows*vocab), rnd(rows*vocab)
	losses, lse := rnd(rows), rnd(rows)
	dloss := put(c, []float32{1.5}, 0)
	lnW, lnB, mean, rstd := rnd(C), rnd(C), rnd(rows), rnd(rows)
	dlnW, dlnB := rnd(C), rnd(C)
	ap := backend.Attention{B: B, T: T, C: C, H: H}
	att, saved, datt, dqkv := rnd(rows*C), rnd(ap.SavedLen()), rnd(rows*C), rnd(rows*3*C)
	const maxT, pos = 96, 40
	kvp := backend.AttentionKV{B: B, T: 3, C: C, H: H, Pos: pos, MaxT: maxT}
	kc, vc, kvQKV, kvOut := rnd(B*maxT*C), rnd(B*maxT*C), rnd(B*3*3*C), rnd(B*3*C)
	pw, pg, pm, pv := rnd(params), rnd(params), rnd(params), rnd(params)
	c.Unary(backend.Exp, pv, pv, params) // second moments are positive
	sq := put(c, []float32{0}, 0)
	half := backend.Ref{S: c.Alloc(backend.BF16, rows*hidden)}
	half2 := backend.Ref{S: c.Alloc(backend.BF16, hidden*C)}
	c.Cast(half2, wProj, hidden*C)
	pos32 := backend.Ref{S: c.Alloc(backend.F32, rows*hidden)}
	hostLoss := make([]float32, 1)

	mm := func(m, n, k int, ta, tb bool, alpha, beta float32) backend.MatMul {
		return backend.MatMul{Batch: 1, M: m, N: n, K: k, TransA: ta, TransB: tb, Alpha: alpha, Beta: beta,
			StrideA: m * k, StrideB: k * n, StrideC: m * n}
	}
	// Per-head products (batch of B*H matrices of T×hd).
	hd := C / H
	batched := backend.MatMul{Batch: B * H, M: T, N: T, K: hd, TransB: true, Alpha: 1,
		StrideA: T * hd, StrideB: T * hd, StrideC: T * T}
	bq, bk, bs := rnd(B*H*T*hd), rnd(B*H*T*hd), rnd(B*H*T*T)
	adam := backend.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 7}

	return []allocCase{
		// Forward products: qkv (with bias), MLP up and down, the tied head.
		{"matmul_qkv_bias", func() { c.MatMul(mm(rows, 3*C, C, false, false, 1, 0), x, wQKV, qkv, bQKV) }},
		{"matmul_fc", func() { c.MatMul(mm(rows, hidden, C, false, false, 1, 0), x, wFC, h, backend.Ref{}) }},
		{"matmul_proj", func() { c.MatMul(mm(rows, C, hidden, false, false, 1, 0), h, wProj, y, backend.Ref{}) }},
		{"matmul_head_transB", func() { c.MatMul(mm(rows, vocab, C, false, true, 1, 0), x, table, logits, backend.Ref{}) }},
		// Backward products: dX = dY·Wᵀ, dW = Xᵀ·dY (accumulating), the head's.
		{"matmul_dX_transB", func() { c.MatMul(mm(rows, C, hidden, false, true, 1, 0), dh, wFC, y, backend.Ref{}) }},
		{"matmul_dW_transA_beta1", func() { c.MatMul(mm(C, hidden, rows, true, false, 1, 1), x, dh, dW, backend.Ref{}) }},
		{"matmul_head_dX", func() { c.MatMul(mm(rows, C, vocab, false, false, 1, 0), dlogits, table, y, backend.Ref{}) }},
		{"matmul_head_dW_transA", func() { c.MatMul(mm(vocab, C, rows, true, false, 1, 0), dlogits, x, dtable, backend.Ref{}) }},
		{"matmul_alpha_beta", func() { c.MatMul(mm(rows, hidden, C, false, false, 0.5, 0.25), x, wFC, dX, backend.Ref{}) }},
		{"matmul_batched", func() { c.MatMul(batched, bq, bk, bs, backend.Ref{}) }},
		{"matmul_bf16", func() { c.MatMul(mm(rows, C, hidden, false, false, 1, 0), half, half2, y, backend.Ref{}) }},

		{"binary", func() { c.Binary(backend.Add, hy, h, dh, rows*hidden) }},
		{"binary_mul", func() { c.Binary(backend.Mul, hy, h, dh, rows*hidden) }},
		{"axpy", func() { c.Axpy(dX, dh, 0.5, rows*hidden) }},
		{"scale", func() { c.Scale(dX, dh, 0.5, rows*hidden) }},
		{"unary", func() { c.Unary(backend.Tanh, hy, h, rows*hidden) }},
		{"sum_rows", func() { c.SumRows(bQKV, qkv, rows, 3*C, 0) }},
		{"sum_rows_beta", func() { c.SumRows(bQKV, qkv, rows, 3*C, 1) }},
		{"sum_cols", func() { c.SumCols(losses, x, rows, C, 1) }},
		{"sum_squares", func() { c.Fill(sq, 0, 1); c.SumSquares(sq, pw, params, 1) }},
		{"softmax", func() { c.Softmax(probs, logits, rows, vocab) }},
		{"softmax_backward", func() { c.SoftmaxBackward(dlogits, probs, logits, rows, vocab) }},
		{"layernorm", func() { c.LayerNorm(y, mean, rstd, x, lnW, lnB, rows, C, 1e-5) }},
		{"layernorm_backward", func() {
			c.LayerNormBackward(dX, backend.Ref{}, dlnW, dlnB, y, x, mean, rstd, lnW, rows, C, backend.DropoutOut{})
		}},
		{"gelu", func() { c.GELU(hy, h, rows*hidden) }},
		{"gelu_backward", func() { c.GELUBackward(dX, h, dh, rows*hidden) }},
		{"attention", func() { c.Attention(ap, att, saved, qkv) }},
		{"attention_backward", func() { c.AttentionBackward(ap, dqkv, datt, att, saved, qkv) }},
		{"attention_kv", func() { c.AttentionKV(kvp, kvOut, kvQKV, kc, vc) }},
		{"cross_entropy", func() { c.CrossEntropy(losses, lse, logits, tgt, rows, vocab) }},
		{"cross_entropy_backward", func() { c.CrossEntropyBackward(dlogits, logits, lse, tgt, dloss, 1.0/rows, rows, vocab) }},
		{"embedding", func() { c.Embedding(y, table, tok, rows, C) }},
		{"embedding_backward", func() { c.EmbeddingBackward(dtable, y, tok, rows, C) }},
		{"adamw", func() { c.AdamW(adam, pw, pg, pm, pv, params) }},
		{"cast_to_bf16", func() { c.Cast(half, h, rows*hidden) }},
		{"cast_from_bf16", func() { c.Cast(pos32, half, rows*hidden) }},
		{"fill", func() { c.Fill(hy, 0.25, rows*hidden) }},
		{"fill_zero", func() { c.Fill(hy, 0, rows*hidden) }},
		{"copy", func() { c.Copy(hy, h, rows*hidden) }},
		{"upload", func() { c.Upload(tok, backend.AsBytes(hostIDs)) }},
		{"download", func() { c.Download(backend.AsBytes(hostLoss), losses) }},
		{"mem_stats", func() { _ = c.MemStats() }},
		{"alloc_free", func() {
			s1, s2 := c.Alloc(backend.F32, 1234), c.Alloc(backend.I32, 77)
			c.Free(s1)
			c.Free(s2)
		}},
	}
}

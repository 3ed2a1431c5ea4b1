package cpu

import (
	"fmt"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// benchCPU is a backend with the default thread count ($FLEET_THREADS or
// GOMAXPROCS), as training uses.
func benchCPU() *CPU { return New(backend.CPU) }

func benchRand(c *CPU, r *rng.RNG, n int) backend.Ref { return put(c, randF32(r, n, 1), 0) }

// BenchmarkMatMul runs the matrix products of a small GPT (B·T = 768 rows,
// C = 128, 4C = 512, vocabulary 65) in their forward and backward forms.
func BenchmarkMatMul(b *testing.B) {
	cases := []struct {
		name           string
		m, k, n        int
		transA, transB bool
	}{
		{"qkv_768x128x384", 768, 128, 384, false, false},
		{"fc_768x128x512", 768, 128, 512, false, false},
		{"proj_768x512x128", 768, 512, 128, false, false},
		{"head_768x128x65", 768, 128, 65, false, false},
		{"dW_qkv_TransA_128x768x384", 128, 768, 384, true, false},
		{"dX_qkv_TransB_768x384x128", 768, 384, 128, false, true},
		{"dW_fc_TransA_128x768x512", 128, 768, 512, true, false},
		{"head_TransB_768x128x65", 768, 128, 65, false, true},
		{"square_512x512x512", 512, 512, 512, false, false},
		// The 6L/384 config's MLP products with B transposed.
		{"fc_TransB_1024x384x1536", 1024, 384, 1536, false, true},
		{"proj_TransB_1024x1536x384", 1024, 1536, 384, false, true},
	}
	for _, cs := range cases {
		b.Run(cs.name, func(b *testing.B) {
			c := benchCPU()
			r := rng.New(1)
			p := backend.MatMul{Batch: 1, M: cs.m, N: cs.n, K: cs.k, TransA: cs.transA, TransB: cs.transB,
				Alpha: 1, StrideA: cs.m * cs.k, StrideB: cs.k * cs.n, StrideC: cs.m * cs.n}
			a, bb, cc := benchRand(c, r, cs.m*cs.k), benchRand(c, r, cs.k*cs.n), benchRand(c, r, cs.m*cs.n)
			c.MatMul(p, a, bb, cc, backend.Ref{}) // warm the pack buffers
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.MatMul(p, a, bb, cc, backend.Ref{})
			}
			flops := 2 * float64(cs.m) * float64(cs.n) * float64(cs.k) * float64(b.N)
			b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkAttention runs causal attention forward and backward at
// B=12, T=64, C=128, H=4.
func BenchmarkAttention(b *testing.B) {
	// The reference config's attention, and the 6L/384 config's.
	for _, p := range []backend.Attention{{B: 12, T: 64, C: 128, H: 4}, {B: 8, T: 128, C: 384, H: 6}} {
		b.Run(fmt.Sprintf("T%d_C%d", p.T, p.C), func(b *testing.B) { benchAttention(b, p) })
	}
}

func benchAttention(b *testing.B, p backend.Attention) {
	c := benchCPU()
	r := rng.New(2)
	qkv := benchRand(c, r, p.B*p.T*3*p.C)
	out, saved := benchRand(c, r, p.B*p.T*p.C), benchRand(c, r, p.SavedLen())
	dout, dqkv := benchRand(c, r, p.B*p.T*p.C), benchRand(c, r, p.B*p.T*3*p.C)
	// q·k and p·v over the causal half, forward; about twice that backward.
	hd := p.C / p.H
	pairs := float64(p.B*p.H) * float64(p.T*(p.T+1)/2)
	fwd, bwd := 4*pairs*float64(hd), 8*pairs*float64(hd)
	b.Run("forward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c.Attention(p, out, saved, qkv)
		}
		b.ReportMetric(fwd*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
	b.Run("forward+backward", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			c.Attention(p, out, saved, qkv)
			c.AttentionBackward(p, dqkv, dout, out, saved, qkv)
		}
		b.ReportMetric((fwd+bwd)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	})
}

// BenchmarkLayerNorm runs the forward LayerNorm over B·T = 768 rows of C = 128.
func BenchmarkLayerNorm(b *testing.B) {
	for _, rows := range []int{768} {
		b.Run(fmt.Sprintf("fwd_%dx128", rows), func(b *testing.B) {
			cols := 128
			c := benchCPU()
			r := rng.New(3)
			x, w, bias := benchRand(c, r, rows*cols), benchRand(c, r, cols), benchRand(c, r, cols)
			out, mean, rstd := benchRand(c, r, rows*cols), benchRand(c, r, rows), benchRand(c, r, rows)
			b.SetBytes(int64(2 * rows * cols * 4))
			for i := 0; i < b.N; i++ {
				c.LayerNorm(out, mean, rstd, x, w, bias, rows, cols, 1e-5)
			}
		})
	}
}

// BenchmarkLlamaRows runs RMSNorm's and the rotation's forward and backward
// at the reference config's sizes (768 rows of 128; 4 heads of 32 for q
// and for k, with QK-norm) with the SIMD rows and with the portable ones,
// for a ratio within one run.
func BenchmarkLlamaRows(b *testing.B) {
	const rows, cols = 768, 128
	p := backend.Rotary{B: 12, T: 64, H: 4, KVH: 4, HD: 32, MaxPos: 64, Eps: 1e-6}
	for _, portable := range []bool{false, true} {
		name := "simd"
		if portable {
			name = "portable"
			saved := []any{rmsForwardRow, rmsBackwardRow, rotate}
			rmsForwardRow, rmsBackwardRow, rotate = rmsForwardRowGo, rmsBackwardRowGo, rotateGo
			defer func() {
				rmsForwardRow = saved[0].(func([]float32, []float32, []float32, float32) float32)
				rmsBackwardRow = saved[1].(func([]float32, []float32, []float32, []float32, []float32, float32))
				rotate = saved[2].(func([]float32, []float32, []float32, []float32, float32))
			}()
		}
		c := benchCPU()
		r := rng.New(3)
		x, w, g := benchRand(c, r, rows*cols), benchRand(c, r, cols), benchRand(c, r, rows*cols)
		out, rstd, dx, dw := benchRand(c, r, rows*cols), benchRand(c, r, rows), benchRand(c, r, rows*cols), benchRand(c, r, cols)
		b.Run("rmsnorm_fwd_bwd_"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				c.RMSNorm(out, rstd, x, w, rows, cols, 1e-6)
				c.RMSNormBackward(dx, backend.Ref{}, dw, g, x, rstd, w, rows, cols, backend.DropoutOut{})
			}
		})
		n := p.B * p.T * p.Width()
		tab, _, _ := rotaryTable(p.MaxPos, p.HD, 10000)
		qkv, ro, rg, rd := benchRand(c, r, n), benchRand(c, r, n), benchRand(c, r, n), benchRand(c, r, n)
		qw, kw, dqw, dkw := benchRand(c, r, p.HD), benchRand(c, r, p.HD), benchRand(c, r, p.HD), benchRand(c, r, p.HD)
		rrs, tb := benchRand(c, r, p.B*p.T*(p.H+p.KVH)), put(c, tab, 0)
		b.Run("rotary_qknorm_fwd_bwd_"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				c.Rotary(p, ro, rrs, qkv, qw, kw, tb)
				c.RotaryBackward(p, rd, dqw, dkw, rg, qkv, rrs, qw, kw, tb)
			}
		})
	}
}

// The remaining kernels at the reference config's sizes: 768 rows of 128
// (LayerNorm), 768×512 activations (GELU), 768×65 logits, 0.8M parameters.
func BenchmarkKernels(b *testing.B) {
	const rows, cols, hidden, vocab, params = 768, 128, 512, 65, 800_000
	c := benchCPU()
	r := rng.New(4)
	x, w, bias := benchRand(c, r, rows*cols), benchRand(c, r, cols), benchRand(c, r, cols)
	out, mean, rstd := benchRand(c, r, rows*cols), benchRand(c, r, rows), benchRand(c, r, rows)
	dx, dw, db := benchRand(c, r, rows*cols), benchRand(c, r, cols), benchRand(c, r, cols)
	h, hy, hd := benchRand(c, r, rows*hidden), benchRand(c, r, rows*hidden), benchRand(c, r, rows*hidden)
	logits, dlogits := benchRand(c, r, rows*vocab), benchRand(c, r, rows*vocab)
	losses, lse, one := benchRand(c, r, rows), benchRand(c, r, rows), put(c, []float32{1}, 0)
	ids := make([]int32, rows)
	for i := range ids {
		ids[i] = int32(r.Intn(vocab))
	}
	targets := putI32(c, ids, 0)
	table, dtable := benchRand(c, r, vocab*cols), benchRand(c, r, vocab*cols)
	pw, pg, pm, pv := benchRand(c, r, params), benchRand(c, r, params), benchRand(c, r, params), benchRand(c, r, params)
	c.Fill(pv, 0.01, params)
	cases := []struct {
		name  string
		bytes int
		run   func()
	}{
		{"layernorm_bwd_768x128", 4 * rows * cols * 4, func() {
			c.LayerNormBackward(dx, backend.Ref{}, dw, db, out, x, mean, rstd, w, rows, cols, backend.DropoutOut{})
		}},
		{"gelu_fwd_768x512", 2 * rows * hidden * 4, func() { c.GELU(hy, h, rows*hidden) }},
		{"gelu_bwd_768x512", 3 * rows * hidden * 4, func() { c.GELUBackward(hd, h, hy, rows*hidden) }},
		{"softmax_768x65", 2 * rows * vocab * 4, func() { c.Softmax(dlogits, logits, rows, vocab) }},
		{"cross_entropy_fwd_768x65", rows * vocab * 4, func() { c.CrossEntropy(losses, lse, logits, targets, rows, vocab) }},
		{"cross_entropy_bwd_768x65", 2 * rows * vocab * 4, func() {
			c.CrossEntropyBackward(dlogits, logits, lse, targets, one, 1.0/rows, rows, vocab)
		}},
		{"embedding_fwd_768x128", 2 * rows * cols * 4, func() { c.Embedding(out, table, targets, rows, cols) }},
		{"embedding_bwd_768x128", 2 * rows * cols * 4, func() { c.EmbeddingBackward(dtable, out, targets, rows, cols) }},
		{"adamw_800k", 7 * params * 4, func() {
			c.AdamW(backend.AdamW{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 10}, pw, pg, pm, pv, params)
		}},
	}
	c.LayerNorm(out, mean, rstd, x, w, bias, rows, cols, 1e-5)
	c.CrossEntropy(losses, lse, logits, targets, rows, vocab)
	for _, k := range cases {
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(int64(k.bytes))
			for i := 0; i < b.N; i++ {
				k.run()
			}
		})
	}
}

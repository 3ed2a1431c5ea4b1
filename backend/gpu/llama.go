package gpu

import (
	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// The kernels of Llama-style blocks on every driver: the op functions of
// backend/gpu/kernels (llama.go), over CUDA's llama.cu and OpenCL's
// llama.cl. Grouped-query attention is the attention kernels' (Attention,
// AttentionBackward and AttentionKV take Attention.KVH).

var _ backend.LlamaBlocks = (*Backend)(nil)

// RMSNorm implements backend.LlamaBlocks.
func (c *Backend) RMSNorm(out, rstd, x, w backend.Ref, rows, cols int, eps float32) {
	c.check("rms_norm", kernels.RMSNorm(c, c.dt(x), c.ptr(out), c.ptr(rstd), c.ptr(x), c.ptr(w), rows, cols, eps))
}

// AddRMSNorm implements backend.LlamaBlocks: one launch.
func (c *Backend) AddRMSNorm(sum, out, rstd, x, y, w backend.Ref, rows, cols int, eps float32, m backend.DropoutMask) {
	c.check("add_rms_norm", kernels.AddRMSNorm(c, c.dt(y), c.ptr(sum), c.ptr(out), c.ptr(rstd), c.ptr(x), c.ptr(y), c.ptr(w),
		rows, cols, eps, m, c.ptr(m.Base)))
}

// RMSNormBackward implements backend.LlamaBlocks: one launch (dx, the
// dropout's masked gradient and dw), as LayerNormBackward, with the same
// counters (lnCounters).
func (c *Backend) RMSNormBackward(dx, dres, dw, dout, x, rstd, w backend.Ref, rows, cols int, drop backend.DropoutOut) {
	done := c.lnCounters(kernels.LayerNormBackwardCounters(cols))
	c.check("rms_norm_backward", c.scratch(kernels.RMSNormBackwardScratch(rows, cols), func(s Ptr) error {
		return kernels.RMSNormBackward(c, c.dt(x), c.ptr(dx), c.ptr(dres), c.ptr(dw), c.ptr(dout), c.ptr(x), c.ptr(rstd), c.ptr(w), s, done, rows, cols,
			c.ptr(drop.Dst), drop.Mask, c.ptr(drop.Mask.Base))
	}))
}

// Rotary implements backend.LlamaBlocks: one pass over qkv.
func (c *Backend) Rotary(p backend.Rotary, out, rstd, qkv, qw, kw, table backend.Ref) {
	c.check("rotary", kernels.Rotary(c, c.dt(qkv), p, c.ptr(out), c.ptr(rstd), c.ptr(qkv), c.ptr(qw), c.ptr(kw), c.ptr(table)))
}

// RotaryBackward implements backend.LlamaBlocks: one pass over dout (and
// qkv with QK-norm), and with QK-norm a second launch that adds the
// weights' partial sums.
func (c *Backend) RotaryBackward(p backend.Rotary, dqkv, dqw, dkw, dout, qkv, rstd, qw, kw, table backend.Ref) {
	run := func(s Ptr) error {
		return kernels.RotaryBackward(c, c.dt(qkv), p, c.ptr(dqkv), c.ptr(dqw), c.ptr(dkw), c.ptr(dout), c.ptr(qkv), c.ptr(rstd),
			c.ptr(qw), c.ptr(kw), c.ptr(table), s)
	}
	if qw.Nil() {
		c.check("rotary_backward", run(Ptr{}))
		return
	}
	c.check("rotary_backward", c.scratch(kernels.RotaryBackwardScratch(p), run))
}

// SwiGLU implements backend.LlamaBlocks.
func (c *Backend) SwiGLU(out, gu backend.Ref, rows, hidden int) {
	c.check("swiglu", kernels.SwiGLU(c, c.dt(gu), c.ptr(out), c.ptr(gu), rows, hidden))
}

// SwiGLUBackward implements backend.LlamaBlocks.
func (c *Backend) SwiGLUBackward(dgu, gu, dout backend.Ref, rows, hidden int) {
	c.check("swiglu_backward", kernels.SwiGLUBackward(c, c.dt(gu), c.ptr(dgu), c.ptr(gu), c.ptr(dout), rows, hidden))
}

// ReLU2 implements backend.LlamaBlocks.
func (c *Backend) ReLU2(out, x backend.Ref, n int) {
	c.check("relu2", kernels.ReLU2(c, c.dt(x), c.ptr(out), c.ptr(x), n))
}

// ReLU2Backward implements backend.LlamaBlocks.
func (c *Backend) ReLU2Backward(dx, x, dout backend.Ref, n int) {
	c.check("relu2_backward", kernels.ReLU2Backward(c, c.dt(x), c.ptr(dx), c.ptr(x), c.ptr(dout), n))
}

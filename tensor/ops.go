package tensor

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// like allocates an output with a's device and dtype and the given shape.
func like(op string, a *Tensor, shape Shape) *Tensor { return alloc(op, a.dev, a.dtype, shape) }

func binary(op string, kind backend.BinaryOp, a, b *Tensor) *Tensor {
	check(op, a, b)
	sameShape(op, a, b)
	wantDType(op, F32, a, b)
	out := like(op, a, a.shape)
	a.be.Binary(kind, out.ref(), a.ref(), b.ref(), a.Numel())
	return out
}

// Add returns a + b (same shapes).
func Add(a, b *Tensor) *Tensor {
	out := binary("add", backend.Add, a, b)
	record(out, "add", []*Tensor{a, b}, func(g *Tensor) []*Tensor { return []*Tensor{g, g} })
	return out
}

// Sub returns a - b (same shapes).
func Sub(a, b *Tensor) *Tensor {
	out := binary("sub", backend.Sub, a, b)
	record(out, "sub", []*Tensor{a, b}, func(g *Tensor) []*Tensor { return []*Tensor{g, Scale(g, -1)} })
	return out
}

// Mul returns the elementwise product a * b (same shapes).
func Mul(a, b *Tensor) *Tensor {
	out := binary("mul", backend.Mul, a, b)
	record(out, "mul", []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		var ga, gb *Tensor
		if a.requiresGrad {
			ga = Mul(g, b)
		}
		if b.requiresGrad {
			gb = Mul(g, a)
		}
		return []*Tensor{ga, gb}
	})
	return out
}

// Scale returns s * a.
func Scale(a *Tensor, s float32) *Tensor {
	wantDType("scale", F32, a)
	out := like("scale", a, a.shape)
	a.be.Scale(out.ref(), a.ref(), s, a.Numel())
	record(out, "scale", []*Tensor{a}, func(g *Tensor) []*Tensor { return []*Tensor{Scale(g, s)} })
	return out
}

// ScaleInPlace multiplies t by s outside autograd.
func ScaleInPlace(t *Tensor, s float32) { t.be.Scale(t.ref(), t.ref(), s, t.Numel()) }

// AddInPlace adds alpha*x into t outside autograd.
func AddInPlace(t, x *Tensor, alpha float32) {
	check("add_in_place", t, x)
	sameShape("add_in_place", t, x)
	t.be.Axpy(t.ref(), x.ref(), alpha, t.Numel())
}

// Fill sets every element of t to v outside autograd.
func Fill(t *Tensor, v float32) { t.be.Fill(t.ref(), v, t.Numel()) }

// gemm runs one backend matrix product on tensor operands.
func gemm(p backend.MatMul, a, b, c, bias *Tensor) {
	var br backend.Ref
	if bias != nil {
		br = bias.ref()
	}
	if p.Alpha == 0 {
		p.Alpha = 1
	}
	a.be.MatMul(p, a.ref(), b.ref(), c.ref(), br)
}

// rowsOf views a tensor of shape [..., k] as rows×k.
func rowsOf(t *Tensor) (rows, k int) {
	k = t.shape[len(t.shape)-1]
	if k == 0 {
		return 0, 0
	}
	return t.Numel() / k, k
}

func wantRank(op string, t *Tensor, min int) {
	if len(t.shape) < min {
		panic(&Error{Op: op, Msg: fmt.Sprintf("want at least %d dimensions", min), Operands: []*Tensor{t}})
	}
}

// MatMul returns a @ b. a is [..., M, K]; b is [K, N] (shared by every
// matrix of a) or [..., K, N] with the same leading dimensions as a.
func MatMul(a, b *Tensor) *Tensor {
	const op = "matmul"
	check(op, a, b)
	wantDType(op, F32, a, b)
	wantRank(op, a, 2)
	wantRank(op, b, 2)
	K := a.Dim(-1)
	if b.Dim(-2) != K {
		panic(&Error{Op: op, Msg: fmt.Sprintf("inner dimensions %d and %d differ", K, b.Dim(-2)), Operands: []*Tensor{a, b}})
	}
	N := b.Dim(-1)
	outShape := append(append(Shape(nil), a.shape[:len(a.shape)-1]...), N)
	if len(b.shape) == 2 {
		rows, _ := rowsOf(a)
		out := like(op, a, outShape)
		gemm(backend.MatMul{Batch: 1, M: rows, N: N, K: K}, a, b, out, nil)
		record(out, op, []*Tensor{a, b}, func(g *Tensor) []*Tensor {
			var ga, gb *Tensor
			if a.requiresGrad {
				ga = like(op, a, a.shape)
				gemm(backend.MatMul{Batch: 1, M: rows, N: K, K: N, TransB: true}, g, b, ga, nil)
			}
			if b.requiresGrad {
				gb = like(op, b, b.shape)
				gemm(backend.MatMul{Batch: 1, M: K, N: N, K: rows, TransA: true}, a, g, gb, nil)
			}
			return []*Tensor{ga, gb}
		})
		return out
	}
	if !Shape(a.shape[:len(a.shape)-2]).Equal(b.shape[:len(b.shape)-2]) {
		panic(&Error{Op: op, Msg: "batch dimensions differ", Operands: []*Tensor{a, b}})
	}
	M := a.Dim(-2)
	batch := Shape(a.shape[:len(a.shape)-2]).Numel()
	out := like(op, a, outShape)
	gemm(backend.MatMul{Batch: batch, M: M, N: N, K: K, StrideA: M * K, StrideB: K * N, StrideC: M * N}, a, b, out, nil)
	record(out, op, []*Tensor{a, b}, func(g *Tensor) []*Tensor {
		var ga, gb *Tensor
		if a.requiresGrad {
			ga = like(op, a, a.shape)
			gemm(backend.MatMul{Batch: batch, M: M, N: K, K: N, TransB: true, StrideA: M * N, StrideB: K * N, StrideC: M * K}, g, b, ga, nil)
		}
		if b.requiresGrad {
			gb = like(op, b, b.shape)
			gemm(backend.MatMul{Batch: batch, M: K, N: N, K: M, TransA: true, StrideA: M * K, StrideB: M * N, StrideC: K * N}, a, g, gb, nil)
		}
		return []*Tensor{ga, gb}
	})
	return out
}

// Linear returns x @ w + bias for x [..., in], w [in, out] (the Conv1D
// layout of GPT-2 checkpoints) and bias [out] or nil, with the bias added
// in the matmul's epilogue.
func Linear(x, w, bias *Tensor) *Tensor {
	const op = "linear"
	check(op, x, w)
	wantDType(op, F32, x, w)
	wantRank(op, w, 2)
	rows, in := rowsOf(x)
	if w.Dim(0) != in {
		panic(&Error{Op: op, Msg: fmt.Sprintf("input has %d features, weight expects %d", in, w.Dim(0)), Operands: []*Tensor{x, w}})
	}
	outF := w.Dim(1)
	inputs := []*Tensor{x, w}
	if bias != nil {
		check(op, x, bias)
		if len(bias.shape) != 1 || bias.shape[0] != outF {
			panic(&Error{Op: op, Msg: fmt.Sprintf("bias shape %v, want [%d]", bias.shape, outF), Operands: []*Tensor{x, w, bias}})
		}
		inputs = append(inputs, bias)
	}
	out := like(op, x, append(append(Shape(nil), x.shape[:len(x.shape)-1]...), outF))
	gemm(backend.MatMul{Batch: 1, M: rows, N: outF, K: in}, x, w, out, bias)
	record(out, op, inputs, func(g *Tensor) []*Tensor {
		grads := make([]*Tensor, len(inputs))
		if x.requiresGrad {
			grads[0] = like(op, x, x.shape)
			gemm(backend.MatMul{Batch: 1, M: rows, N: in, K: outF, TransB: true}, g, w, grads[0], nil)
		}
		if w.requiresGrad {
			grads[1] = like(op, w, w.shape)
			gemm(backend.MatMul{Batch: 1, M: in, N: outF, K: rows, TransA: true}, x, g, grads[1], nil)
		}
		if bias != nil && bias.requiresGrad {
			grads[2] = like(op, bias, bias.shape)
			g.be.SumRows(grads[2].ref(), g.ref(), rows, outF, 0)
		}
		return grads
	})
	return out
}

// LinearT returns x @ wᵀ for x [..., in] and w [out, in]: the language
// model head that shares the token embedding matrix.
func LinearT(x, w *Tensor) *Tensor {
	const op = "linear_t"
	check(op, x, w)
	wantDType(op, F32, x, w)
	wantRank(op, w, 2)
	rows, in := rowsOf(x)
	if w.Dim(1) != in {
		panic(&Error{Op: op, Msg: fmt.Sprintf("input has %d features, weight has %d", in, w.Dim(1)), Operands: []*Tensor{x, w}})
	}
	outF := w.Dim(0)
	out := like(op, x, append(append(Shape(nil), x.shape[:len(x.shape)-1]...), outF))
	gemm(backend.MatMul{Batch: 1, M: rows, N: outF, K: in, TransB: true}, x, w, out, nil)
	record(out, op, []*Tensor{x, w}, func(g *Tensor) []*Tensor {
		var gx, gw *Tensor
		if x.requiresGrad {
			gx = like(op, x, x.shape)
			gemm(backend.MatMul{Batch: 1, M: rows, N: in, K: outF}, g, w, gx, nil)
		}
		if w.requiresGrad {
			gw = like(op, w, w.shape)
			gemm(backend.MatMul{Batch: 1, M: outF, N: in, K: rows, TransA: true}, g, x, gw, nil)
		}
		return []*Tensor{gx, gw}
	})
	return out
}

// GELU applies the tanh approximation of GELU elementwise.
func GELU(x *Tensor) *Tensor {
	wantDType("gelu", F32, x)
	out := like("gelu", x, x.shape)
	x.be.GELU(out.ref(), x.ref(), x.Numel())
	record(out, "gelu", []*Tensor{x}, func(g *Tensor) []*Tensor {
		dx := like("gelu_backward", x, x.shape)
		x.be.GELUBackward(dx.ref(), x.ref(), g.ref(), x.Numel())
		return []*Tensor{dx}
	})
	return out
}

// Softmax normalises over the last axis.
func Softmax(x *Tensor) *Tensor {
	wantDType("softmax", F32, x)
	rows, cols := rowsOf(x)
	out := like("softmax", x, x.shape)
	x.be.Softmax(out.ref(), x.ref(), rows, cols)
	record(out, "softmax", []*Tensor{x}, func(g *Tensor) []*Tensor {
		dx := like("softmax_backward", x, x.shape)
		x.be.SoftmaxBackward(dx.ref(), out.ref(), g.ref(), rows, cols)
		return []*Tensor{dx}
	})
	return out
}

// LayerNorm normalises the last axis of x and applies weight w and bias b
// (b may be nil). It is one fused node with its own backward kernel.
func LayerNorm(x, w, b *Tensor, eps float32) *Tensor {
	const op = "layer_norm"
	check(op, x, w)
	wantDType(op, F32, x, w)
	rows, cols := rowsOf(x)
	if len(w.shape) != 1 || w.shape[0] != cols {
		panic(&Error{Op: op, Msg: fmt.Sprintf("weight shape %v, want [%d]", w.shape, cols), Operands: []*Tensor{x, w}})
	}
	inputs := []*Tensor{x, w}
	var br backend.Ref
	if b != nil {
		check(op, x, b)
		sameShape(op, w, b)
		inputs = append(inputs, b)
		br = b.ref()
	}
	out := like(op, x, x.shape)
	mean := like(op, x, Shape{rows})
	rstd := like(op, x, Shape{rows})
	x.be.LayerNorm(out.ref(), mean.ref(), rstd.ref(), x.ref(), w.ref(), br, rows, cols, eps)
	record(out, op, inputs, func(g *Tensor) []*Tensor {
		dx := like(op, x, x.shape)
		dw := ZerosLike(w)
		var dbr backend.Ref
		var db *Tensor
		if b != nil {
			db = ZerosLike(b)
			dbr = db.ref()
		}
		x.be.LayerNormBackward(dx.ref(), dw.ref(), dbr, g.ref(), x.ref(), mean.ref(), rstd.ref(), w.ref(), rows, cols)
		grads := []*Tensor{dx, dw}
		if b != nil {
			grads = append(grads, db)
		}
		return grads
	})
	return out
}

// CrossEntropy returns the mean over rows of -log softmax(logits)[target]
// for logits [..., V] and I32 targets [...]. It is one fused node: the
// backward pass recomputes the softmax from the saved log-sum-exp instead
// of keeping a copy of the logits' size.
func CrossEntropy(logits, targets *Tensor) *Tensor {
	const op = "cross_entropy"
	check(op, logits, targets)
	wantDType(op, F32, logits)
	wantDType(op, I32, targets)
	n, v := rowsOf(logits)
	if targets.Numel() != n {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d rows of logits, %d targets", n, targets.Numel()), Operands: []*Tensor{logits, targets}})
	}
	losses := like(op, logits, Shape{n})
	lse := like(op, logits, Shape{n})
	logits.be.CrossEntropy(losses.ref(), lse.ref(), logits.ref(), targets.ref(), n, v)
	out := like(op, logits, Shape{})
	logits.be.SumCols(out.ref(), losses.ref(), 1, n)
	logits.be.Scale(out.ref(), out.ref(), 1/float32(n), 1)
	record(out, op, []*Tensor{logits}, func(g *Tensor) []*Tensor {
		d := like(op, logits, logits.shape)
		logits.be.CrossEntropyBackward(d.ref(), logits.ref(), lse.ref(), targets.ref(), g.ref(), 1/float32(n), n, v)
		return []*Tensor{d}
	})
	return out
}

// Embedding gathers rows of table [V, C] for I32 ids [...], giving [..., C].
func Embedding(table, ids *Tensor) *Tensor {
	const op = "embedding"
	check(op, table, ids)
	wantDType(op, F32, table)
	wantDType(op, I32, ids)
	wantRank(op, table, 2)
	dim := table.Dim(1)
	n := ids.Numel()
	out := like(op, table, append(append(Shape(nil), ids.shape...), dim))
	table.be.Embedding(out.ref(), table.ref(), ids.ref(), n, dim)
	record(out, op, []*Tensor{table}, func(g *Tensor) []*Tensor {
		dt := ZerosLike(table)
		table.be.EmbeddingBackward(dt.ref(), g.ref(), ids.ref(), n, dim)
		return []*Tensor{dt}
	})
	return out
}

// Attention is causal multi-head self-attention on a packed qkv
// [B, T, 3C] (q, k and v side by side, each split into nHead heads),
// returning [B, T, C]. It is one fused node with its own backward kernel.
func Attention(qkv *Tensor, nHead int) *Tensor {
	const op = "attention"
	wantDType(op, F32, qkv)
	if len(qkv.shape) != 3 || qkv.shape[2]%3 != 0 {
		panic(&Error{Op: op, Msg: "want qkv of shape [B, T, 3C]", Operands: []*Tensor{qkv}})
	}
	C := qkv.shape[2] / 3
	if nHead <= 0 || C%nHead != 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d channels do not split into %d heads", C, nHead), Operands: []*Tensor{qkv}})
	}
	p := backend.Attention{B: qkv.shape[0], T: qkv.shape[1], C: C, H: nHead}
	out := like(op, qkv, Shape{p.B, p.T, C})
	saved := like(op, qkv, Shape{p.SavedLen()})
	qkv.be.Attention(p, out.ref(), saved.ref(), qkv.ref())
	record(out, op, []*Tensor{qkv}, func(g *Tensor) []*Tensor {
		d := like(op, qkv, qkv.shape)
		qkv.be.AttentionBackward(p, d.ref(), g.ref(), out.ref(), saved.ref(), qkv.ref())
		return []*Tensor{d}
	})
	return out
}

// Sum returns the sum of all elements as a one-element tensor.
func Sum(x *Tensor) *Tensor {
	wantDType("sum", F32, x)
	out := like("sum", x, Shape{})
	x.be.SumCols(out.ref(), x.ref(), 1, x.Numel())
	record(out, "sum", []*Tensor{x}, func(g *Tensor) []*Tensor {
		// The one scalar gradient is read on the host to broadcast it.
		return []*Tensor{Full(x.dev, g.Item(), x.shape...)}
	})
	return out
}

// Mean returns the mean of all elements.
func Mean(x *Tensor) *Tensor { return Scale(Sum(x), 1/float32(x.Numel())) }

// Dropout zeroes each element with probability p and scales the rest by
// 1/(1-p), drawing the mask from r. With p == 0 it returns x.
func Dropout(x *Tensor, p float32, r *RNG) *Tensor {
	if p == 0 {
		return x
	}
	if p < 0 || p >= 1 {
		panic(&Error{Op: "dropout", Msg: fmt.Sprintf("probability %v outside [0, 1)", p), Operands: []*Tensor{x}})
	}
	mask := make([]float32, x.Numel())
	keep := 1 / (1 - p)
	for i := range mask {
		if r.Float64() >= float64(p) {
			mask[i] = keep
		}
	}
	return Mul(x, FromFloat32s(x.dev, mask, x.shape...))
}

// Cast converts x to dtype dt (rounding to nearest even for BF16 and F16).
// Gradients flow back through the inverse cast.
func Cast(x *Tensor, dt DType) *Tensor {
	if x.dtype == dt {
		return x
	}
	out := alloc("cast", x.dev, dt, x.shape)
	x.be.Cast(out.ref(), x.ref(), x.Numel())
	record(out, "cast", []*Tensor{x}, func(g *Tensor) []*Tensor { return []*Tensor{Cast(g, x.dtype)} })
	return out
}

// SumSquares returns the sum of the squares of every element of ts, as a
// one-element F32 tensor on their device (for gradient-norm clipping).
func SumSquares(ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic(&Error{Op: "sum_squares", Msg: "no tensors"})
	}
	check("sum_squares", ts...)
	out := Zeros(ts[0].dev)
	for _, t := range ts {
		wantDType("sum_squares", F32, t)
		t.be.SumSquares(out.ref(), t.ref(), t.Numel())
	}
	return out
}

// AdamWStep applies one AdamW update to param in place from its Grad and
// the moment tensors m and v, outside autograd.
func AdamWStep(param, m, v *Tensor, hp backend.AdamW) {
	check("adamw", param, param.Grad, m, v)
	sameShape("adamw", param, param.Grad)
	param.be.AdamW(hp, param.ref(), param.Grad.ref(), m.ref(), v.ref(), param.Numel())
}

// AttentionKV is causal attention for inference with a key/value cache.
// qkv [B, T, 3C] holds positions [pos, pos+T); their keys and values are
// written into kc and vc ([B, MaxT, C]) and each position attends to every
// cached position up to itself. It is not differentiable.
func AttentionKV(qkv, kc, vc *Tensor, nHead, pos int) *Tensor {
	const op = "attention_kv"
	check(op, qkv, kc, vc)
	wantDType(op, F32, qkv, kc, vc)
	if len(qkv.shape) != 3 || qkv.shape[2]%3 != 0 || len(kc.shape) != 3 || !kc.shape.Equal(vc.shape) {
		panic(&Error{Op: op, Msg: "want qkv [B, T, 3C] and caches [B, MaxT, C]", Operands: []*Tensor{qkv, kc, vc}})
	}
	p := backend.AttentionKV{B: qkv.shape[0], T: qkv.shape[1], C: qkv.shape[2] / 3, H: nHead, Pos: pos, MaxT: kc.shape[1]}
	if kc.shape[0] != p.B || kc.shape[2] != p.C || pos < 0 || pos+p.T > p.MaxT || nHead <= 0 || p.C%nHead != 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("positions [%d, %d) do not fit the cache, or heads do not divide channels", pos, pos+p.T), Operands: []*Tensor{qkv, kc, vc}})
	}
	out := like(op, qkv, Shape{p.B, p.T, p.C})
	qkv.be.AttentionKV(p, out.ref(), qkv.ref(), kc.ref(), vc.ref())
	return out
}

package tensor

import (
	"fmt"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
)

// like allocates an output with a's device and dtype and the given shape.
func like(op string, a *Tensor, shape Shape) *Tensor { return alloc(op, a.dev, a.dtype, shape) }

func binary(op string, kind backend.BinaryOp, a, b *Tensor) *Tensor {
	check(op, a, b)
	sameShape(op, a, b)
	wantFloat(op, a, b)
	out := like(op, a, a.shape)
	a.be.Binary(kind, out.ref(), a.ref(), b.ref(), a.Numel())
	return out
}

// Add returns a + b (same shapes).
func Add(a, b *Tensor) *Tensor {
	out := binary("add", backend.Add, a, b)
	record(out, "add", addBackward, a, b)
	return out
}

func addBackward(n *node, g *Tensor) { n.gin[0], n.gin[1] = g, g }

// Sub returns a - b (same shapes).
func Sub(a, b *Tensor) *Tensor {
	out := binary("sub", backend.Sub, a, b)
	record(out, "sub", subBackward, a, b)
	return out
}

func subBackward(n *node, g *Tensor) {
	n.gin[0] = g
	if n.in[1].requiresGrad {
		n.gin[1] = Scale(g, -1)
	}
}

// Mul returns the elementwise product a * b (same shapes).
func Mul(a, b *Tensor) *Tensor {
	out := binary("mul", backend.Mul, a, b)
	record(out, "mul", mulBackward, a, b)
	return out
}

func mulBackward(n *node, g *Tensor) {
	a, b := n.in[0], n.in[1]
	if a.requiresGrad {
		n.gin[0] = Mul(g, b)
	}
	if b.requiresGrad {
		n.gin[1] = Mul(g, a)
	}
}

// Scale returns s * a.
func Scale(a *Tensor, s float32) *Tensor {
	wantFloat("scale", a)
	out := like("scale", a, a.shape)
	a.be.Scale(out.ref(), a.ref(), s, a.Numel())
	if n := record(out, "scale", scaleBackward, a); n != nil {
		n.f = s
	}
	return out
}

func scaleBackward(n *node, g *Tensor) { n.gin[0] = Scale(g, n.f) }

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

// withLast returns s with its last axis replaced by last, in buf.
func withLast(buf *[maxInlineRank]int, s Shape, last int) Shape {
	out := append(buf[:0], s[:len(s)-1]...)
	return append(out, last)
}

// maxInlineRank is the rank up to which ops build output shapes without
// allocating.
const maxInlineRank = 8

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
	if len(b.shape) > 2 && !Shape(a.shape[:len(a.shape)-2]).Equal(b.shape[:len(b.shape)-2]) {
		panic(&Error{Op: op, Msg: "batch dimensions differ", Operands: []*Tensor{a, b}})
	}
	var buf [maxInlineRank]int
	out := like(op, a, withLast(&buf, a.shape, b.Dim(-1)))
	gemm(matmulParams(a, b, false, false), a, b, out, nil)
	record(out, op, matmulBackward, a, b)
	return out
}

// matmulParams describes op(a)@op(b)-shaped products for MatMul's operand
// shapes: forward (false, false), a's gradient g@bᵀ (false, true) and b's
// gradient aᵀ@g (true, false), reading the sizes from a and b.
func matmulParams(a, b *Tensor, ta, tb bool) backend.MatMul {
	K, N := a.Dim(-1), b.Dim(-1)
	if len(b.shape) == 2 {
		rows, _ := rowsOf(a)
		switch {
		case tb: // ga[rows,K] = g[rows,N] @ bᵀ
			return backend.MatMul{Batch: 1, M: rows, N: K, K: N, TransB: true}
		case ta: // gb[K,N] = aᵀ @ g
			return backend.MatMul{Batch: 1, M: K, N: N, K: rows, TransA: true}
		}
		return backend.MatMul{Batch: 1, M: rows, N: N, K: K}
	}
	M := a.Dim(-2)
	batch := Shape(a.shape[:len(a.shape)-2]).Numel()
	switch {
	case tb:
		return backend.MatMul{Batch: batch, M: M, N: K, K: N, TransB: true, StrideA: M * N, StrideB: K * N, StrideC: M * K}
	case ta:
		return backend.MatMul{Batch: batch, M: K, N: N, K: M, TransA: true, StrideA: M * K, StrideB: M * N, StrideC: K * N}
	}
	return backend.MatMul{Batch: batch, M: M, N: N, K: K, StrideA: M * K, StrideB: K * N, StrideC: M * N}
}

func matmulBackward(n *node, g *Tensor) {
	a, b := n.in[0], n.in[1]
	if a.requiresGrad {
		n.gin[0] = like("matmul", a, a.shape)
		gemm(matmulParams(a, b, false, true), g, b, n.gin[0], nil)
	}
	if b.requiresGrad {
		n.gin[1] = like("matmul", b, b.shape)
		gemm(matmulParams(a, b, true, false), a, g, n.gin[1], nil)
	}
}

// Linear returns x @ w + bias for x [..., in], w [in, out] (the Conv1D
// layout of GPT-2 checkpoints) and bias [out] or nil, with the bias added
// in the matmul's epilogue. Under Autocast(BF16) with x in BF16 (bf16
// activations) the output is BF16 too, and w and bias are read as BF16
// (their half copies where they have them: see SetHalf).
func Linear(x, w, bias *Tensor) *Tensor {
	const op = "linear"
	check(op, x, w)
	x, w, wo, odt, round := lowPrecision(op, x, w)
	wantRank(op, w, 2)
	rows, in := rowsOf(x)
	if w.Dim(0) != in {
		panic(&Error{Op: op, Msg: fmt.Sprintf("input has %d features, weight expects %d", in, w.Dim(0)), Operands: []*Tensor{x, w}})
	}
	outF := w.Dim(1)
	var bo *Tensor
	if bias != nil {
		check(op, x, bias)
		if len(bias.shape) != 1 || bias.shape[0] != outF {
			panic(&Error{Op: op, Msg: fmt.Sprintf("bias shape %v, want [%d]", bias.shape, outF), Operands: []*Tensor{x, w, bias}})
		}
		bo = asOperand(bias, odt)
	}
	var buf [maxInlineRank]int
	out := alloc(op, x.dev, odt, withLast(&buf, x.shape, outF))
	gemm(backend.MatMul{Batch: 1, M: rows, N: outF, K: in, Round: round}, x, wo, out, bo)
	if n := record(out, op, linearBackward, x, w, bias); n != nil {
		n.i[0] = int(round)
		n.saved[2] = wo
	}
	return out
}

func linearBackward(n *node, g *Tensor) { linearGrads(n, g, true) }

// linearGrads computes a Linear node's gradients: x's too where withX.
func linearGrads(n *node, g *Tensor, withX bool) {
	x, w, bias := n.in[0], n.in[1], n.in[2]
	rows, in := rowsOf(x)
	outF := w.Dim(1)
	round := DType(n.i[0])
	gl := Cast(g, x.dtype) // the products run in the forward's precision
	if x.requiresGrad && withX {
		// x's gradient has the output's dtype: BF16 for bf16 activations,
		// F32 for F32 ones (also where autocast cast x for the product).
		n.gin[0] = alloc("linear", x.dev, g.dtype, x.shape)
		gemm(backend.MatMul{Batch: 1, M: rows, N: in, K: outF, TransB: true, Round: round}, gl, operandOf(n, w), n.gin[0], nil)
	}
	pw := backend.MatMul{Batch: 1, M: in, N: outF, K: rows, TransA: true, Round: round}
	if w.requiresGrad && bias != nil && bias.requiresGrad && gl.dtype == F32 {
		// One product for both, where the backend's products sum the
		// bias gradient in their epilogue: into the bias's own gradient
		// where there is none yet, else a sum added into it.
		if bg, ok := g.be.(backend.BiasGradProducts); ok {
			db := like("linear", bias, bias.shape)
			if weightGradWith(n, pw, x, gl, func(p backend.MatMul, c *Tensor) bool {
				p.Alpha = 1
				return bg.MatMulBiasGrad(p, x.ref(), gl.ref(), c.ref(), db.ref())
			}) {
				if s := gradSink(bias); s != nil {
					s.be.Axpy(s.ref(), db.ref(), 1, outF)
				} else {
					n.gin[2] = db
				}
				return
			}
		}
	}
	if w.requiresGrad {
		weightGrad(n, pw, x, gl)
	}
	if bias != nil && bias.requiresGrad {
		sumBiasGrad(n, 2, bias, g, rows, outF)
	}
}

// sumBiasGrad sums g [rows, cols] over its rows into bias's gradient:
// straight into the bias's own gradient where it has a sink (gradSink),
// else into a new tensor, node n's gradient for its input k.
func sumBiasGrad(n *node, k int, bias, g *Tensor, rows, cols int) {
	if s := gradSink(bias); s != nil {
		g.be.SumRows(s.ref(), g.ref(), rows, cols, 1)
		return
	}
	n.gin[k] = like("bias_grad", bias, bias.shape)
	g.be.SumRows(n.gin[k].ref(), g.ref(), rows, cols, 0)
}

// MLP returns Linear(GELU(Linear(x, w1, b1)), w2, b2), GPT-2's
// feed-forward block (b1 and b2 may be nil). On a backend whose products
// apply GELU in their epilogue (backend.GELUProducts) it takes no GELU
// launches: the first product writes GELU's input and output at once, and
// in the backward pass the second product's gradient for its input comes
// out multiplied by GELU's derivative. It is then two nodes, the hidden
// activation's gradient passing between them already through GELU: the
// hidden activation is used by nothing else. Elsewhere it is the three ops.
func MLP(x, w1, b1, w2, b2 *Tensor) *Tensor {
	gp, ok := x.be.(backend.GELUProducts)
	var round DType // under autocast, the products round their F32 operands
	bf16 := false   // bf16 activations: BF16 x, hidden activations and output
	if dt := ProgramOf(x.dev).autocast; dt == BF16 && x.dtype == BF16 {
		bf16 = true
	} else if dt != F32 {
		r, rounds := x.be.(backend.OperandRounder)
		ok = ok && rounds && r.RoundsOperands() && x.dtype == F32
		round = dt
	}
	if !ok || !gp.GELUEpilogues() || (x.dtype != F32 && !bf16) || w1.dtype != F32 || w2.dtype != F32 {
		// The bias and GELU in one pass where the backend has it.
		if bg, fused := x.be.(backend.BiasGELUer); fused && b1 != nil && b1.dtype == F32 {
			return Linear(biasGELU(bg, Linear(x, w1, nil), b1), w2, b2)
		}
		return Linear(GELU(Linear(x, w1, b1)), w2, b2)
	}
	const op = "mlp"
	check(op, x, w1)
	check(op, x, w2)
	wantRank(op, w1, 2)
	wantRank(op, w2, 2)
	rows, in := rowsOf(x)
	hid := w1.Dim(1)
	if w1.Dim(0) != in || w2.Dim(0) != hid {
		panic(&Error{Op: op, Msg: fmt.Sprintf("input has %d features, weights are %v and %v", in, w1.shape, w2.shape), Operands: []*Tensor{x, w1, w2}})
	}
	if b1 != nil && (len(b1.shape) != 1 || b1.shape[0] != hid) {
		panic(&Error{Op: op, Msg: fmt.Sprintf("bias shape %v, want [%d]", b1.shape, hid), Operands: []*Tensor{x, w1, b1}})
	}
	var buf [maxInlineRank]int
	pre := alloc(op, x.dev, x.dtype, withLast(&buf, x.shape, hid))
	h := alloc(op, x.dev, x.dtype, pre.shape)
	var b1r backend.Ref
	if b1 != nil {
		check(op, x, b1)
		b1r = asOperand(b1, x.dtype).ref()
	}
	w1o := asOperand(w1, x.dtype)
	gp.MatMulGELU(backend.MatMul{Batch: 1, M: rows, N: hid, K: in, Alpha: 1, Round: round}, x.ref(), w1o.ref(), h.ref(), pre.ref(), b1r)
	// Its gradient arrives already through GELU (see mlpProjBackward).
	if n := record(h, "mlp_fc", linearBackward, x, w1, b1); n != nil {
		n.saved[0] = pre
		n.i[0] = int(round)
		if w1o != w1 {
			n.saved[2] = w1o
		}
	}
	out := Linear(h, w2, b2)
	if n := out.node; n != nil && n.op == "linear" {
		n.op, n.back, n.saved[0] = "mlp_proj", mlpProjBackward, pre
	}
	return out
}

// biasGELU returns gelu(y + b) for y [..., cols] and b [cols] in one pass
// (backend.BiasGELUer), adding b into y in place: y is MLP's hidden
// pre-activation, a product's output that nothing else reads (the
// product's backward reads its inputs), and GELU's backward reads it. b is
// read in y's dtype (asOperand); its gradient is b's.
func biasGELU(bg backend.BiasGELUer, y, b *Tensor) *Tensor {
	const op = "bias_gelu"
	check(op, y, b)
	wantFloat(op, y)
	rows, cols := rowsOf(y)
	if len(b.shape) != 1 || b.shape[0] != cols {
		panic(&Error{Op: op, Msg: fmt.Sprintf("bias shape %v, want [%d]", b.shape, cols), Operands: []*Tensor{y, b}})
	}
	h := like(op, y, y.shape)
	bg.BiasGELU(y.ref(), h.ref(), asOperand(b, y.dtype).ref(), rows, cols)
	record(h, op, biasGELUBackward, y, b)
	return h
}

// biasGELUBackward: the pre-activation's gradient through GELU, and the
// bias's, its sum over rows.
func biasGELUBackward(n *node, g *Tensor) {
	pre, b := n.in[0], n.in[1]
	rows, cols := rowsOf(pre)
	d := like("bias_gelu", pre, pre.shape)
	pre.be.GELUBackward(d.ref(), pre.ref(), g.ref(), pre.Numel())
	n.gin[0] = d
	if b.requiresGrad {
		sumBiasGrad(n, 1, b, d, rows, cols)
	}
}

// mlpProjBackward is linearBackward for MLP's second product, whose input
// is the GELU output h: the gradient it returns for h is the product's
// times GELU's derivative at pre, computed in the product's epilogue, which
// mlpFCBackward takes as is.
func mlpProjBackward(n *node, g *Tensor) {
	h, w := n.in[0], n.in[1]
	pre := n.saved[0]
	rows, hid := rowsOf(h)
	outF := w.Dim(1)
	linearGrads(n, g, false)
	if h.requiresGrad {
		n.gin[0] = alloc("mlp", h.dev, g.dtype, h.shape)
		h.be.(backend.GELUProducts).MatMulGELUGrad(backend.MatMul{Batch: 1, M: rows, N: hid, K: outF, TransB: true, Alpha: 1, Round: DType(n.i[0])},
			g.ref(), operandOf(n, w).ref(), n.gin[0].ref(), pre.ref())
	}
}

// model head that shares the token embedding matrix.
func LinearT(x, w *Tensor) *Tensor {
	const op = "linear_t"
	check(op, x, w)
	x, w, wo, odt, round := lowPrecision(op, x, w)
	wantRank(op, w, 2)
	rows, in := rowsOf(x)
	if w.Dim(1) != in {
		panic(&Error{Op: op, Msg: fmt.Sprintf("input has %d features, weight has %d", in, w.Dim(1)), Operands: []*Tensor{x, w}})
	}
	outF := w.Dim(0)
	var buf [maxInlineRank]int
	out := alloc(op, x.dev, odt, withLast(&buf, x.shape, outF))
	gemm(backend.MatMul{Batch: 1, M: rows, N: outF, K: in, TransB: true, Round: round}, x, wo, out, nil)
	if n := record(out, op, linearTBackward, x, w); n != nil {
		n.i[0] = int(round)
		n.saved[2] = wo
	}
	return out
}

func linearTBackward(n *node, g *Tensor) {
	x, w := n.in[0], n.in[1]
	rows, in := rowsOf(x)
	outF := w.Dim(0)
	round := DType(n.i[0])
	gl := Cast(g, x.dtype)
	if x.requiresGrad {
		n.gin[0] = alloc("linear_t", x.dev, g.dtype, x.shape)
		gemm(backend.MatMul{Batch: 1, M: rows, N: in, K: outF, Round: round}, gl, operandOf(n, w), n.gin[0], nil)
	}
	if w.requiresGrad {
		weightGrad(n, backend.MatMul{Batch: 1, M: outF, N: in, K: rows, TransA: true, Round: round}, gl, x)
	}
}

// weightGrad computes the gradient of n's weight, its second input, as the
// product p of a and b: added into the weight's Grad where gradSink allows
// (beta 1), else into a new tensor in gin.
func weightGrad(n *node, p backend.MatMul, a, b *Tensor) {
	weightGradWith(n, p, a, b, func(p backend.MatMul, c *Tensor) bool { gemm(p, a, b, c, nil); return true })
}

// weightGradWith is weightGrad with the product prod (which may decline,
// reporting false: nothing is then changed and weightGradWith reports
// false too).
func weightGradWith(n *node, p backend.MatMul, a, b *Tensor, prod func(p backend.MatMul, c *Tensor) bool) bool {
	w := n.in[1]
	if s := gradSink(w); s != nil {
		p.Beta = 1
		return prod(p, s)
	}
	c := alloc(n.op, w.dev, F32, w.shape)
	if !prod(p, c) {
		c.Free()
		return false
	}
	n.gin[1] = c
	return true
}

// Autocast runs fn with the default program's products in dt: see
// Program.Autocast.
func Autocast(dt DType, fn func()) { defaultProgram.Autocast(dt, fn) }

// Autocast runs fn with Linear, LinearT and MLP (every matrix product of
// the GPT) on p's devices casting F32 operands to dt, BF16 or F16, for the
// product: low precision inputs, F32 accumulation and F32 outputs (F16
// needs loss scaling to keep small gradients from flushing to zero). The
// casts are ops of their own, so gradients reach the F32 tensors (master
// weights stay F32), and the backward products run in BF16 too. On a
// backend that rounds operands within its products (CUDA, see
// backend.OperandRounder) there are no casts: the products, forward and
// backward, get F32 operands and round them as they load them. Softmax,
// LayerNorm, the loss and the optimizer stay in F32. Autocast(F32, fn)
// turns it off inside fn.
func (p *Program) Autocast(dt DType, fn func()) {
	if dt != F32 && dt != BF16 && dt != F16 {
		panic(&Error{Op: "autocast", Msg: fmt.Sprintf("products in %v are not supported (want f32, bf16 or f16)", dt)})
	}
	prev := p.autocast
	p.autocast = dt
	defer func() { p.autocast = prev }()
	fn()
}

// AutocastDType is the dtype p's products are computed in (see Autocast):
// F32 when autocast is off.
func (p *Program) AutocastDType() DType { return p.autocast }

// lowPrecision applies the autocast policy of the operands' program to a
// product's input x and weight w. It returns the tensors the product's
// node records (x and w: gradients flow to them), the weight as the
// product reads it (wo), the output's dtype and round:
//
//   - bf16 activations (autocast BF16, x in BF16, w in F32): x as it is,
//     w read through asOperand (its half copy, or a cast outside
//     autograd), a BF16 output;
//   - a backend that rounds operands within its products (an
//     backend.OperandRounder) with F32 x and w: both as they are, round
//     naming the type the product rounds them to, an F32 output;
//   - other autocast products: x and w cast (ops of their own, so their
//     gradients reach the F32 tensors), an F32 output.
//
// The product's operands must then share an F32, BF16 or F16 dtype.
func lowPrecision(op string, x, w *Tensor) (_, _, wo *Tensor, odt DType, round DType) {
	odt = F32
	if dt := ProgramOf(x.dev).autocast; dt != F32 {
		switch {
		case x.dtype == BF16 && dt == BF16 && (w.dtype == F32 || w.dtype == BF16):
			odt = BF16
			wo = asOperand(w, BF16)
		case x.dtype == F32 && w.dtype == F32:
			if r, ok := x.be.(backend.OperandRounder); ok && r.RoundsOperands() {
				round = dt
			} else {
				x, w = Cast(x, dt), Cast(w, dt)
			}
		default:
			x, w = Cast(x, dt), Cast(w, dt)
		}
	} else if x.dtype == BF16 {
		odt = BF16 // bf16 activations evaluated without autocast: as they come
	}
	if wo == nil {
		wo = w
	}
	if x.dtype != wo.dtype || (x.dtype != F32 && x.dtype != BF16 && x.dtype != F16) {
		panic(&Error{Op: op, Msg: fmt.Sprintf("operands are %v and %v (want both f32, both bf16 or both f16)", x.dtype, wo.dtype), Operands: []*Tensor{x, w}})
	}
	return x, w, wo, odt, round
}

// asOperand returns parameter p as a product or fused kernel reads it in
// dtype dt: p itself where it is stored so, its half copy where it has one
// of that dtype (SetHalf: kept current by the optimizer, so no forward pass
// casts a weight), else a cast made outside autograd. Gradients go to p
// all the same: the ops record p, not the operand.
func asOperand(p *Tensor, dt DType) *Tensor {
	if p.dtype == dt {
		return p
	}
	if h := p.half; h != nil && h.dtype == dt && !h.freed {
		return h
	}
	out := alloc("cast", p.dev, dt, p.shape)
	p.be.Cast(out.ref(), p.ref(), p.Numel())
	return out
}

// operandOf is the weight a product node's forward pass read (saved[2]
// where it was not w itself: a half copy or a cast).
func operandOf(n *node, w *Tensor) *Tensor {
	if wo := n.saved[2]; wo != nil {
		return wo
	}
	return w
}

// GELU applies the tanh approximation of GELU elementwise.
func GELU(x *Tensor) *Tensor {
	wantFloat("gelu", x)
	out := like("gelu", x, x.shape)
	x.be.GELU(out.ref(), x.ref(), x.Numel())
	record(out, "gelu", geluBackward, x)
	return out
}

func geluBackward(n *node, g *Tensor) {
	x := n.in[0]
	dx := like("gelu_backward", x, x.shape)
	x.be.GELUBackward(dx.ref(), x.ref(), g.ref(), x.Numel())
	n.gin[0] = dx
}

// Softmax normalises over the last axis.
func Softmax(x *Tensor) *Tensor {
	wantFloat("softmax", x)
	rows, cols := rowsOf(x)
	out := like("softmax", x, x.shape)
	x.be.Softmax(out.ref(), x.ref(), rows, cols)
	if n := record(out, "softmax", softmaxBackward, x); n != nil {
		n.saved[0] = out
	}
	return out
}

func softmaxBackward(n *node, g *Tensor) {
	x, out := n.in[0], n.saved[0]
	rows, cols := rowsOf(x)
	dx := like("softmax_backward", x, x.shape)
	x.be.SoftmaxBackward(dx.ref(), out.ref(), g.ref(), rows, cols)
	n.gin[0] = dx
}

// LayerNorm normalises the last axis of x and applies weight w and bias b
// (b may be nil). It is one fused node with its own backward kernel.
func LayerNorm(x, w, b *Tensor, eps float32) *Tensor {
	const op = "layer_norm"
	rows, cols, br := layerNormOperands(op, x, w, b)
	out := like(op, x, x.shape)
	mean := alloc(op, x.dev, F32, Shape{rows})
	rstd := alloc(op, x.dev, F32, Shape{rows})
	x.be.LayerNorm(out.ref(), mean.ref(), rstd.ref(), x.ref(), w.ref(), br, rows, cols, eps)
	if n := record(out, op, layerNormBackward, x, w, b); n != nil {
		n.saved[0], n.saved[1] = mean, rstd
	}
	return out
}

// layerNormOperands checks the operands of a LayerNorm of x (F32) with
// weight w ([cols]) and bias b (nil, or w's shape), and returns x's rows
// and columns and b's reference.
func layerNormOperands(op string, x, w, b *Tensor) (rows, cols int, br backend.Ref) {
	check(op, x, w)
	wantFloat(op, x)
	wantDType(op, F32, w)
	rows, cols = rowsOf(x)
	if len(w.shape) != 1 || w.shape[0] != cols {
		panic(&Error{Op: op, Msg: fmt.Sprintf("weight shape %v, want [%d]", w.shape, cols), Operands: []*Tensor{x, w}})
	}
	if b != nil {
		check(op, x, b)
		sameShape(op, w, b)
		br = b.ref()
	}
	return rows, cols, br
}

func layerNormBackward(n *node, g *Tensor) {
	x, w, b := n.in[0], n.in[1], n.in[2]
	mean, rstd := n.saved[0], n.saved[1]
	rows, cols := rowsOf(x)
	dx := like("layer_norm", x, x.shape)
	// The kernel adds into dw and db: the leaves' own Grad where it can,
	// else zeroed tensors returned in gin. dx gets the gradient x gathered
	// from its other uses (the residual stream's) added in the same pass.
	dw := gradSink(w)
	if dw == nil {
		dw = ZerosLike(w)
		n.gin[1] = dw
	}
	var dbr backend.Ref
	if b != nil {
		db := gradSink(b)
		if db == nil {
			db = ZerosLike(b)
			n.gin[2] = db
		}
		dbr = db.ref()
	}
	var res backend.Ref
	if r := takePending(x); r != nil {
		res = r.ref()
	}
	// Where x is a dropout's output, dx (all of x's gradient so far) is
	// masked for the dropout's input in the same pass.
	drop := stashDropoutGrad(x, dx)
	x.be.LayerNormBackward(dx.ref(), res, dw.ref(), dbr, g.ref(), x.ref(), mean.ref(), rstd.ref(), w.ref(), rows, cols, drop)
	n.gin[0] = dx
}

// CrossEntropy returns the mean over rows of -log softmax(logits)[target]
// for logits [..., V] and I32 targets [...]. It is one fused node: the
// backward pass recomputes the softmax from the saved log-sum-exp instead
// of keeping a copy of the logits' size.
func CrossEntropy(logits, targets *Tensor) *Tensor { return crossEntropy(logits, targets, false) }

// CrossEntropyInPlace is CrossEntropy whose backward pass writes the
// logits' gradient over the logits themselves (as llm.c's fused
// classifier does): for logits that nothing else reads after the loss (a
// model's head), it saves an array of their size, the largest of a GPT's
// step. The logits must not be read after Backward (under SetLossGrad,
// after CrossEntropyInPlace: its gradient is then written in the forward
// pass).
func CrossEntropyInPlace(logits, targets *Tensor) *Tensor { return crossEntropy(logits, targets, true) }

func crossEntropy(logits, targets *Tensor, inPlace bool) *Tensor {
	const op = "cross_entropy"
	check(op, logits, targets)
	wantFloat(op, logits)
	wantDType(op, I32, targets)
	n, v := rowsOf(logits)
	if targets.Numel() != n {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d rows of logits, %d targets", n, targets.Numel()), Operands: []*Tensor{logits, targets}})
	}
	losses := alloc(op, logits.dev, F32, Shape{n})
	if p := ProgramOf(logits.dev); inPlace && p.lossGrad != nil && p.gradEnabled && logits.requiresGrad {
		return crossEntropyFused(p.lossGrad, logits, targets, losses, n, v)
	}
	lse := alloc(op, logits.dev, F32, Shape{n})
	logits.be.CrossEntropy(losses.ref(), lse.ref(), logits.ref(), targets.ref(), n, v)
	out := alloc(op, logits.dev, F32, Shape{})
	logits.be.SumCols(out.ref(), losses.ref(), 1, n, 1/float32(n)) // the mean
	if nd := record(out, op, crossEntropyBackward, logits); nd != nil {
		nd.saved[0], nd.saved[1] = lse, targets
		if inPlace {
			nd.i[0] = 1
		}
	}
	return out
}

func crossEntropyBackward(nd *node, g *Tensor) {
	logits, lse, targets := nd.in[0], nd.saved[0], nd.saved[1]
	n, v := rowsOf(logits)
	var d *Tensor
	if nd.i[0] == 1 { // over the logits (CrossEntropyInPlace)
		d = logits.Reshape(logits.shape...)
	} else {
		d = like("cross_entropy", logits, logits.shape)
	}
	logits.be.CrossEntropyBackward(d.ref(), logits.ref(), lse.ref(), targets.ref(), g.ref(), 1/float32(n), n, v)
	nd.gin[0] = d
}

// SetLossGrad sets the default program's loss gradient: see
// Program.SetLossGrad.
func SetLossGrad(g *Tensor) (prev *Tensor) { return defaultProgram.SetLossGrad(g) }

// SetLossGrad announces that the loss made next (until it is set again;
// nil ends it) will be differentiated with BackwardWith(g): g, a
// one-element F32 tensor on p's device, holds that gradient from now on.
// A CrossEntropyInPlace that records a gradient then forms the logits'
// gradient in the same pass over the logits as the loss (backend's
// CrossEntropyFused, the same values as the two passes), over the logits,
// and its backward pass hands it on; a backward pass that brings it
// another gradient tensor panics. It returns the gradient it replaces.
// (A setter, not a function taking a closure: a training step calls it
// without allocating.)
func (p *Program) SetLossGrad(g *Tensor) (prev *Tensor) {
	if g != nil && (g.dtype != F32 || g.Numel() != 1) {
		panic(&Error{Op: "set_loss_grad", Msg: "the loss's gradient must be a one-element F32 tensor", Operands: []*Tensor{g}})
	}
	prev, p.lossGrad = p.lossGrad, g
	return prev
}

// crossEntropyFused is CrossEntropyInPlace under SetLossGrad(g): the
// logits' gradient, for the loss's gradient g, written over the logits in
// the forward pass.
func crossEntropyFused(g, logits, targets, losses *Tensor, n, v int) *Tensor {
	const op = "cross_entropy"
	check(op, logits, g)
	logits.be.CrossEntropyFused(losses.ref(), logits.ref(), logits.ref(), targets.ref(), g.ref(), 1/float32(n), n, v)
	out := alloc(op, logits.dev, F32, Shape{})
	logits.be.SumCols(out.ref(), losses.ref(), 1, n, 1/float32(n)) // the mean
	if nd := record(out, op, crossEntropyFusedBackward, logits); nd != nil {
		nd.saved[0] = g
	}
	return out
}

func crossEntropyFusedBackward(nd *node, g *Tensor) {
	if g != nd.saved[0] {
		panic(&Error{Op: "cross_entropy", Msg: "the loss is differentiated with another gradient than the one SetLossGrad announced, which its forward pass used", Operands: []*Tensor{g, nd.saved[0]}})
	}
	logits := nd.in[0]
	nd.gin[0] = logits.Reshape(logits.shape...)
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
	if len(ids.shape) >= maxInlineRank {
		panic(&Error{Op: op, Msg: fmt.Sprintf("ids of rank %d", len(ids.shape)), Operands: []*Tensor{table, ids}})
	}
	var buf [maxInlineRank]int
	shape := append(append(buf[:0], ids.shape...), dim)
	out := like(op, table, shape)
	table.be.Embedding(out.ref(), table.ref(), ids.ref(), n, dim)
	if nd := record(out, op, embeddingBackward, table); nd != nil {
		nd.saved[0] = ids
	}
	return out
}

func embeddingBackward(nd *node, g *Tensor) {
	table, ids := nd.in[0], nd.saved[0]
	dt := gradSink(table) // the kernel adds: into the table's Grad where it can
	if dt == nil {
		dt = ZerosLike(table)
		nd.gin[0] = dt
	}
	table.be.EmbeddingBackward(dt.ref(), g.ref(), ids.ref(), ids.Numel(), table.Dim(1))
}

// Attention is causal multi-head self-attention on a packed qkv
// [B, T, 3C] (q, k and v side by side, each split into nHead heads),
// returning [B, T, C]. It is one fused node with its own backward kernel.
// Under Autocast(BF16) or Autocast(F16), on a backend that rounds operands
// within its products (backend.OperandRounder), its products, forward and
// backward, round their operands to that type (backend.Attention.Round: on
// CUDA from compute capability 8.0, the tensor-core kernels; below it, the
// F32 kernels); elsewhere it computes in F32.
func Attention(qkv *Tensor, nHead int) *Tensor { return GroupedAttention(qkv, nHead, nHead) }

// GroupedAttention is Attention with nKVHead key/value heads (dividing
// nHead; 1 is multi-query attention): qkv is [B, T, C + 2·nKVHead·C/nHead],
// the queries' C columns, then the keys', then the values', and query head
// h attends with key/value head h/(nHead/nKVHead), read where it lies. The
// output is [B, T, C]. Grouped heads (nKVHead < nHead) need a backend
// with backend.LlamaBlocks.
func GroupedAttention(qkv *Tensor, nHead, nKVHead int) *Tensor {
	return DroppedAttention(qkv, nHead, nKVHead, 0, DropoutStream{}, nil)
}

// DroppedAttention is GroupedAttention with dropout of probability drop on
// the attention probabilities, as nanoGPT's attn_dropout (the kept ones
// scaled by 1/(1-drop)); the softmax's log-sum-exp is unchanged. Its mask
// (backend.Attention.Drop) is r's site r.Site for the windows from r.Row0
// on, an element per (window, head, query, key); unlike Dropout it does
// not move r on, so the caller names the site. base is DropoutAt's. With
// drop 0 it is GroupedAttention.
func DroppedAttention(qkv *Tensor, nHead, nKVHead int, drop float32, r DropoutStream, base *Tensor) *Tensor {
	const op = "attention"
	if drop < 0 || drop >= 1 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("dropout probability %v outside [0, 1)", drop), Operands: []*Tensor{qkv}})
	}
	if base != nil {
		check(op, qkv, base)
		wantDType(op, I32, base)
	}
	wantFloat(op, qkv)
	if nHead <= 0 || nKVHead <= 0 || nHead%nKVHead != 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d key/value heads do not divide %d heads", nKVHead, nHead), Operands: []*Tensor{qkv}})
	}
	if len(qkv.shape) != 3 || (qkv.shape[2]*nHead)%(nHead+2*nKVHead) != 0 {
		panic(&Error{Op: op, Msg: "want qkv of shape [B, T, 3C] (C + 2·KVH·C/H with grouped heads)", Operands: []*Tensor{qkv}})
	}
	C := qkv.shape[2] * nHead / (nHead + 2*nKVHead)
	if C%nHead != 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d channels do not split into %d heads", C, nHead), Operands: []*Tensor{qkv}})
	}
	p := backend.Attention{B: qkv.shape[0], T: qkv.shape[1], C: C, H: nHead}
	if nKVHead != nHead {
		llamaKernels(op, qkv)
		p.KVH = nKVHead
	}
	if r, ok := qkv.be.(backend.OperandRounder); ok && r.RoundsOperands() {
		if dt := ProgramOf(qkv.dev).autocast; dt == BF16 || dt == F16 {
			p.Round = dt
		}
	}
	if drop != 0 {
		p.Drop = attnMask(p, drop, r, base)
	}
	out := like(op, qkv, Shape{p.B, p.T, C})
	saved := alloc(op, qkv.dev, F32, Shape{p.SavedLen()}) // the log-sum-exps
	qkv.be.Attention(p, out.ref(), saved.ref(), qkv.ref())
	if n := record(out, op, attentionBackward, qkv); n != nil {
		n.saved[0], n.saved[1] = out, saved
		// The mask is made again from p, the key, the site and the first
		// window: i[0] holds the heads and the site, i[1] Round, KVH and
		// the first window, saved[2] the base.
		n.i[0], n.i[1], n.u = nHead|int(r.Site)<<32, int(p.Round)|p.KVH<<8|int(r.Row0)<<32, r.Key
		n.f, n.saved[2] = drop, base
	}
	return out
}

// attnMask is the mask of DroppedAttention's probabilities for p.
func attnMask(p backend.Attention, drop float32, r DropoutStream, base *Tensor) backend.DropoutMask {
	m := backend.NewDropoutMask(r.Key, r.Site, r.Row0*int64(p.H)*int64(p.T)*int64(p.T), drop)
	if base != nil {
		m.Base = base.ref()
	}
	return m
}

func attentionBackward(n *node, g *Tensor) {
	qkv, out, saved := n.in[0], n.saved[0], n.saved[1]
	p := backend.Attention{B: qkv.shape[0], T: qkv.shape[1], C: out.shape[2], H: n.i[0] & (1<<32 - 1), KVH: n.i[1] >> 8 & (1<<24 - 1), Round: DType(n.i[1] & 0xff)}
	if n.f != 0 {
		p.Drop = attnMask(p, n.f, DropoutStream{Key: n.u, Site: uint32(n.i[0] >> 32), Row0: int64(n.i[1] >> 32)}, n.saved[2])
	}
	d := like("attention", qkv, qkv.shape)
	qkv.be.AttentionBackward(p, d.ref(), g.ref(), out.ref(), saved.ref(), qkv.ref())
	n.gin[0] = d
}

// Sum returns the sum of all elements as a one-element tensor.
func Sum(x *Tensor) *Tensor {
	wantFloat("sum", x)
	out := alloc("sum", x.dev, F32, Shape{})
	x.be.SumCols(out.ref(), x.ref(), 1, x.Numel(), 1)
	record(out, "sum", sumBackward, x)
	return out
}

// sumBackward broadcasts the one scalar gradient, read on the host.
func sumBackward(n *node, g *Tensor) {
	in := n.in[0]
	n.gin[0] = Full(in.dev, g.Item(), in.shape...)
	if in.dtype != F32 {
		n.gin[0] = Cast(n.gin[0], in.dtype)
	}
}

// Mean returns the mean of all elements.
func Mean(x *Tensor) *Tensor { return Scale(Sum(x), 1/float32(x.Numel())) }

// DropoutStream is where the dropout ops of a forward pass take their
// masks from (backend.DropoutMask, Philox4x32-10): each op takes site Site
// and moves it on by one. Key is the step's key (backend.DropoutKey), and
// Row0 the index, in the step's global batch, of the first row (along the
// first axis) of the tensors the ops drop elements of, so that a row's
// masks are the same whichever micro-step or rank it falls to. The same
// stream gives the same masks (RecomputeRNG relies on it).
type DropoutStream struct {
	Key  uint64
	Site uint32
	Row0 int64
}

// Dropout zeroes each element with probability p and scales the rest by
// 1/(1-p), taking its mask from s (and s to its next site). The device
// draws each element's number where it applies the mask, so no mask is
// stored or crosses the bus. With p == 0 it returns x.
func Dropout(x *Tensor, p float32, s *DropoutStream) *Tensor { return DropoutAt(x, p, s, nil) }

// AddDropout returns x + Dropout(y, p, s) in one pass: a residual add of
// a branch that ends in dropout.
func AddDropout(x, y *Tensor, p float32, s *DropoutStream) *Tensor {
	return AddDropoutAt(x, y, p, s, nil)
}

// DropoutAt and AddDropoutAt are Dropout and AddDropout for a step replayed
// from a graph: s's key is an offset, and the key it offsets, two I32 (the
// low half first), is read on the device when the step runs
// (backend.DropoutMask.Base), where StepDropoutKey writes it every step.
// base nil is Dropout and AddDropout.
func DropoutAt(x *Tensor, p float32, r *DropoutStream, base *Tensor) *Tensor {
	if p == 0 {
		return x
	}
	return dropout("dropout", nil, x, p, r, base)
}

// AddDropoutAt: see DropoutAt.
func AddDropoutAt(x, y *Tensor, p float32, r *DropoutStream, base *Tensor) *Tensor {
	if p == 0 {
		return Add(x, y)
	}
	return dropout("add_dropout", x, y, p, r, base)
}

// AddLayerNorm returns sum = x + DropoutAt(y, p, r, base) (x nil: the
// dropout alone; p 0: a plain add) and LayerNorm(sum, w, b, eps), computed
// in one pass (backend.Backend.AddLayerNorm): a residual add fused with
// the LayerNorm that reads its result. The values and the graph are those
// of the two ops.
func AddLayerNorm(x, y *Tensor, p float32, r *DropoutStream, base *Tensor, w, b *Tensor, eps float32) (sum, out *Tensor) {
	const op = "add_layer_norm"
	if x == nil && p == 0 {
		return y, LayerNorm(y, w, b, eps)
	}
	rows, cols, br := layerNormOperands(op, y, w, b)
	xr, m := dropoutOperands(op, x, y, p, r, base)
	sum = like(op, y, y.shape)
	out = like(op, y, y.shape)
	mean := alloc(op, y.dev, F32, Shape{rows})
	rstd := alloc(op, y.dev, F32, Shape{rows})
	y.be.AddLayerNorm(sum.ref(), out.ref(), mean.ref(), rstd.ref(), xr, y.ref(), w.ref(), br, rows, cols, eps, m)
	// The graph of the two ops: the add (or dropout), then the LayerNorm.
	recordDropout(sum, x, y, p, m, base)
	if nd := record(out, "layer_norm", layerNormBackward, sum, w, b); nd != nil {
		nd.saved[0], nd.saved[1] = mean, rstd
	}
	return sum, out
}

// StepDropoutKey writes the dropout key of a step replayed from a graph
// into key (two I32), from the step clock in stats: see
// backend.Backend.StepDropoutKey.
func StepDropoutKey(key, stats *Tensor, seed uint64) {
	const op = "step_dropout_key"
	check(op, key, stats)
	wantDType(op, I32, key)
	wantStats(op, stats)
	if key.Numel() != 2 {
		panic(&Error{Op: op, Msg: "want a key of 2 I32", Operands: []*Tensor{key}})
	}
	stats.be.StepDropoutKey(key.ref(), stats.ref(), seed)
}

// dropout is Dropout (x nil) and AddDropout. Its node keeps the mask
// (recordDropout). Its backward pass masks the output's gradient for y
// and hands it on unchanged to x; where a LayerNorm reading the output
// has masked that gradient already, in its own backward pass (see
// stashDropoutGrad), it takes the masked copy instead of another pass.
func dropout(op string, x, y *Tensor, p float32, r *DropoutStream, base *Tensor) *Tensor {
	xr, m := dropoutOperands(op, x, y, p, r, base)
	out := like(op, y, y.shape)
	y.be.DropoutAdd(out.ref(), xr, y.ref(), y.Numel(), m)
	recordDropout(out, x, y, p, m, base)
	return out
}

// dropoutOperands checks the operands of x + Dropout(y, p) (x nil: the
// dropout alone) and takes the mask from r, moving r to its next site;
// with p 0 the mask keeps every element, times 1: a plain add.
func dropoutOperands(op string, x, y *Tensor, p float32, r *DropoutStream, base *Tensor) (xr backend.Ref, m backend.DropoutMask) {
	if p < 0 || p >= 1 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("probability %v outside [0, 1)", p), Operands: []*Tensor{y}})
	}
	wantFloat(op, y)
	if x != nil {
		check(op, x, y)
		wantFloat(op, y, x)
		sameShape(op, x, y)
		xr = x.ref()
	}
	if p == 0 {
		return xr, backend.DropoutMask{Scale: 1}
	}
	if r == nil {
		panic(&Error{Op: op, Msg: "dropout without a mask stream", Operands: []*Tensor{y}})
	}
	perRow := int64(y.Numel())
	if len(y.shape) > 0 && y.shape[0] > 0 {
		perRow /= int64(y.shape[0])
	}
	m = backend.NewDropoutMask(r.Key, r.Site, r.Row0*perRow, p)
	if base != nil {
		check(op, y, base)
		wantDType(op, I32, base)
		if base.Numel() != 2 {
			panic(&Error{Op: op, Msg: "want a base of 2 I32", Operands: []*Tensor{base}})
		}
		m.Base = base.ref()
	}
	r.Site++
	return xr, m
}

// recordDropout records sum = x + Dropout(y, p) with mask m (x nil: the
// dropout alone) in the graph: with p 0, a plain add.
// The node keeps the mask: the key in u, the offset and the site in i, p
// in f, the base in saved[0].
func recordDropout(sum, x, y *Tensor, p float32, m backend.DropoutMask, base *Tensor) {
	if p == 0 {
		record(sum, "add", addBackward, x, y)
		return
	}
	op := "add_dropout"
	if x == nil {
		op = "dropout"
	}
	if nd := record(sum, op, dropoutBackward, y, x); nd != nil {
		nd.u, nd.f = m.Seed, p
		nd.i[0], nd.i[1] = int(m.Offset), int(m.Site)
		nd.saved[0] = base
	}
}

func dropoutBackward(n *node, g *Tensor) {
	y := n.in[0]
	if n.in[1] != nil {
		n.gin[1] = g
	}
	masked, whole := n.saved[2], n.saved[1]
	n.saved[1], n.saved[2] = nil, nil
	if !y.requiresGrad {
		return
	}
	if masked != nil && whole == g { // the whole gradient, masked already
		fusedDropoutGrads.Add(1)
		n.gin[0] = masked
		return
	}
	dy := like("dropout_backward", g, g.shape)
	g.be.DropoutAdd(dy.ref(), backend.Ref{}, g.ref(), g.Numel(), maskOf(n))
	n.gin[0] = dy
}

// stashDropoutGrad prepares the fusion of a dropout's backward pass into
// the backward kernel of an op reading its output x, whose gradient g that
// kernel is about to write in full (the gradient x gathered from its other
// uses added in): where x is a Dropout's or AddDropout's output whose
// input needs a gradient, it returns where the kernel writes g masked,
// and records that on x's node. The dropout's backward pass takes the
// masked copy if the gradient it gets is g itself, so nothing was added to
// it after the kernel; otherwise it masks what it gets.
func stashDropoutGrad(x, g *Tensor) backend.DropoutOut {
	xn := x.node
	if xn == nil || xn.ck != nil || !isDropout(xn) || !xn.in[0].requiresGrad || g.dtype != x.dtype {
		return backend.DropoutOut{}
	}
	masked := like("dropout_backward", g, g.shape)
	xn.saved[1], xn.saved[2] = g, masked
	return backend.DropoutOut{Dst: masked.ref(), Mask: maskOf(xn)}
}

// maskOf is the mask a dropout's node recorded.
func maskOf(n *node) backend.DropoutMask {
	m := backend.NewDropoutMask(n.u, uint32(n.i[1]), int64(n.i[0]), n.f)
	if b := n.saved[0]; b != nil {
		m.Base = b.ref()
	}
	return m
}

// fusedDropoutGrads counts the dropout gradients taken from a LayerNorm's
// backward kernel (tests check the fusion happens).
var fusedDropoutGrads atomic.Int64

// isDropout reports whether n is a Dropout's or an AddDropout's node.
func isDropout(n *node) bool { return n.op == "dropout" || n.op == "add_dropout" }

// Cast converts x to dtype dt (rounding to nearest even for BF16 and F16).
// Gradients flow back through the inverse cast.
func Cast(x *Tensor, dt DType) *Tensor {
	if x.dtype == dt {
		return x
	}
	out := alloc("cast", x.dev, dt, x.shape)
	x.be.Cast(out.ref(), x.ref(), x.Numel())
	record(out, "cast", castBackward, x)
	return out
}

func castBackward(n *node, g *Tensor) { n.gin[0] = Cast(g, n.in[0].dtype) }

// SumSquares returns the sum of the squares of every element of ts, as a
// one-element F32 tensor on their device (for gradient-norm clipping).
func SumSquares(ts ...*Tensor) *Tensor {
	if len(ts) == 0 {
		panic(&Error{Op: "sum_squares", Msg: "no tensors"})
	}
	out := Zeros(ts[0].dev)
	for _, t := range ts {
		AddSumSquares(out, t)
	}
	return out
}

// AddSumSquares adds the sum of the squares of t's elements into acc, a
// one-element F32 tensor on t's device, outside autograd.
func AddSumSquares(acc, t *Tensor) { sumSquares(acc, t, 1) }

// SetSumSquares writes the sum of the squares of t's elements into acc,
// as AddSumSquares does into a zeroed acc, with no pass to zero it.
func SetSumSquares(acc, t *Tensor) { sumSquares(acc, t, 0) }

func sumSquares(acc, t *Tensor, beta float32) {
	check("sum_squares", acc, t)
	wantDType("sum_squares", F32, acc, t)
	if acc.Numel() != 1 {
		panic(&Error{Op: "sum_squares", Msg: "accumulator must have one element", Operands: []*Tensor{acc}})
	}
	t.be.SumSquares(acc.ref(), t.ref(), t.Numel(), beta)
}

// AdamWStep applies one AdamW update to param in place from its Grad and
// the moment tensors m and v, outside autograd. gradScale, where not nil,
// is a one-element F32 tensor on param's device that the gradient is
// multiplied by first (a clip coefficient computed there, see ClipCoef);
// where it is not finite, the step leaves param, m and v as they are. The
// gradient may be left scaled. Where param has a bf16 copy (SetHalf), the
// update writes it too, in the same pass.
func AdamWStep(param, m, v *Tensor, hp backend.AdamW, gradScale *Tensor) {
	AdamWStepSched(param, m, v, hp, gradScale, nil)
}

// AdamWStepSched is AdamWStep with the learning rate and the step's
// constants read on the device from sched, three F32 elements (a view of
// a loss scaler's state from backend.ScalerLR on, which ScalerCoef
// writes); nil is AdamWStep.
func AdamWStepSched(param, m, v *Tensor, hp backend.AdamW, gradScale, sched *Tensor) {
	check("adamw", param, param.Grad, m, v)
	if sched != nil {
		check("adamw", param, sched)
		wantDType("adamw", F32, sched)
		if sched.Numel() != 3 {
			panic(&Error{Op: "adamw", Msg: "want a schedule of 3 elements (lr, step size, 1/sqrt(1-b2^t))", Operands: []*Tensor{sched}})
		}
		hp.Sched = sched.ref()
	}
	sameShape("adamw", param, param.Grad)
	if gradScale != nil {
		check("adamw", param, gradScale)
		wantDType("adamw", F32, gradScale)
		wantScalar("adamw", gradScale)
		hp.GradScale = gradScale.ref()
	}
	if h := param.half; h != nil { // its bf16 copy, in the same pass
		hp.Half = h.ref()
	}
	param.be.AdamW(hp, param.ref(), param.Grad.ref(), m.ref(), v.ref(), param.Numel())
}

// StatsLen is the size of a trainer's step statistics (see TrackLoss).
const StatsLen = 5

// NewStats returns a trainer's step statistics on dev, F32 [StatsLen]:
// the loss summed since last read (0), the first step whose loss was not
// finite (-1: none), the last gradient norm (0), the first step whose
// gradients were not finite (-1: none), and the step clock of steps
// replayed from a graph (StepClock). TrackLoss and ClipCoef update them on
// the device, so that a training step reads nothing back; given a negative
// step, they take the step number from the clock.
func NewStats(dev Device) *Tensor {
	return FromFloat32s(dev, []float32{0, -1, 0, -1, 0}, StatsLen)
}

// TrackLoss adds loss*scale (loss a one-element F32 tensor) into stats[0]
// and records step in stats[1] the first time the loss is not finite, on
// the device, outside autograd.
func TrackLoss(stats, loss *Tensor, scale float32, step int) {
	const op = "track_loss"
	check(op, stats, loss)
	wantDType(op, F32, stats, loss)
	wantStats(op, stats)
	wantScalar(op, loss)
	stats.be.TrackLoss(stats.ref(), loss.ref(), scale, step)
}

// ClipCoef turns a sum of squared gradients (one F32 element) into the
// gradient norm, kept in stats[2], and the coefficient that clips it to
// maxNorm, written into coef (one F32 element): maxNorm/(norm+1e-6) where
// maxNorm > 0 and norm > maxNorm, else 1. Where the norm is not finite,
// coef holds it (AdamWStep then skips) and stats[3] records step the first
// time. All on the device.
func ClipCoef(coef, stats, sumsq *Tensor, maxNorm float64, step int) {
	const op = "clip_coef"
	check(op, coef, stats, sumsq)
	wantDType(op, F32, coef, stats, sumsq)
	wantStats(op, stats)
	wantScalar(op, coef)
	wantScalar(op, sumsq)
	stats.be.ClipCoef(coef.ref(), stats.ref(), sumsq.ref(), maxNorm, step)
}

// StepClock starts a step replayed from a graph: it advances the clock in
// stats (which must hold the step's index from 0) to the step's number,
// which the step's TrackLoss and ClipCoef (given step -1) record, and,
// unless sched is nil, writes AdamW's learning rate and constants for the
// step into sched (three F32, for AdamWStepSched) from the schedule lrs.
// backend.Backend.StepClock has the details.
func StepClock(stats, sched, lrs *Tensor, beta1, beta2 float32) {
	const op = "step_clock"
	check(op, stats)
	wantStats(op, stats)
	var sr, lr backend.Ref
	n := 0
	if sched != nil {
		check(op, stats, sched, lrs)
		wantDType(op, F32, sched, lrs)
		if sched.Numel() != 3 || lrs.Numel() == 0 {
			panic(&Error{Op: op, Msg: "want a schedule of 3 elements and a non-empty table", Operands: []*Tensor{sched, lrs}})
		}
		sr, lr, n = sched.ref(), lrs.ref(), lrs.Numel()
	}
	stats.be.StepClock(stats.ref(), sr, lr, n, beta1, beta2)
}

// ScalerCoef is ClipCoef for fp16's dynamic loss scaling on the device
// (backend.Backend.ScalerCoef): sumsq is of the gradients scaled by the
// scale in state (backend.ScalerStateLen F32 elements), lrs the
// learning-rate schedule (F32), step the optimizer step's index from 0.
// The scaler's decision, its new scale and the step's AdamW constants
// stay on the device.
func ScalerCoef(coef, stats, sumsq, state, lrs *Tensor, maxNorm float64, step int, growthInterval int, seedFactor, beta1, beta2 float32) {
	const op = "scaler_coef"
	check(op, coef, stats, sumsq, state, lrs)
	wantDType(op, F32, coef, stats, sumsq, state, lrs)
	wantStats(op, stats)
	wantScalar(op, coef)
	wantScalar(op, sumsq)
	if state.Numel() != backend.ScalerStateLen || lrs.Numel() == 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("want a state of %d elements and a non-empty schedule", backend.ScalerStateLen), Operands: []*Tensor{state, lrs}})
	}
	stats.be.ScalerCoef(coef.ref(), stats.ref(), sumsq.ref(), maxNorm, step, backend.Scaler{
		State: state.ref(), LRs: lrs.ref(), NLR: lrs.Numel(), GrowthInterval: growthInterval,
		SeedFactor: seedFactor, Beta1: beta1, Beta2: beta2})
}

func wantScalar(op string, t *Tensor) {
	if t.Numel() != 1 {
		panic(&Error{Op: op, Msg: "want a one-element tensor", Operands: []*Tensor{t}})
	}
}

func wantStats(op string, t *Tensor) {
	if t.Numel() != StatsLen {
		panic(&Error{Op: op, Msg: fmt.Sprintf("want step statistics of %d elements (NewStats)", StatsLen), Operands: []*Tensor{t}})
	}
}

// AttentionKV is causal attention for inference with a key/value cache.
// qkv [B, T, 3C] holds positions [pos, pos+T); their keys and values are
// written into kc and vc ([B, MaxT, C]) and each position attends to every
// cached position up to itself. It is not differentiable.
func AttentionKV(qkv, kc, vc *Tensor, nHead, pos int) *Tensor {
	return GroupedAttentionKV(qkv, kc, vc, nHead, nHead, pos)
}

// GroupedAttentionKV is AttentionKV with nKVHead key/value heads (see
// GroupedAttention): the caches are [B, MaxT, nKVHead·C/nHead].
func GroupedAttentionKV(qkv, kc, vc *Tensor, nHead, nKVHead, pos int) *Tensor {
	const op = "attention_kv"
	check(op, qkv, kc, vc)
	wantDType(op, F32, qkv, kc, vc)
	if nHead <= 0 || nKVHead <= 0 || nHead%nKVHead != 0 || len(qkv.shape) != 3 || (qkv.shape[2]*nHead)%(nHead+2*nKVHead) != 0 ||
		len(kc.shape) != 3 || !kc.shape.Equal(vc.shape) {
		panic(&Error{Op: op, Msg: "want qkv [B, T, C + 2·KVH·C/H] and caches [B, MaxT, KVH·C/H]", Operands: []*Tensor{qkv, kc, vc}})
	}
	C := qkv.shape[2] * nHead / (nHead + 2*nKVHead)
	p := backend.AttentionKV{B: qkv.shape[0], T: qkv.shape[1], C: C, H: nHead, Pos: pos, MaxT: kc.shape[1]}
	if nKVHead != nHead {
		llamaKernels(op, qkv)
		p.KVH = nKVHead
	}
	if kc.shape[0] != p.B || C%nHead != 0 || kc.shape[2] != C/nHead*nKVHead || pos < 0 || pos+p.T > p.MaxT {
		panic(&Error{Op: op, Msg: fmt.Sprintf("positions [%d, %d) do not fit the cache, or heads do not divide channels", pos, pos+p.T), Operands: []*Tensor{qkv, kc, vc}})
	}
	out := like(op, qkv, Shape{p.B, p.T, p.C})
	qkv.be.AttentionKV(p, out.ref(), qkv.ref(), kc.ref(), vc.ref())
	return out
}

package tensor

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
)

// The ops of Llama-style blocks: RMSNorm (and its fused residual add),
// rotary position embeddings with the optional QK-norm, SwiGLU and
// grouped-query attention. Each is one node with its own backward kernel
// (backend.LlamaBlocks), on the devices whose backend has them.

// llamaKernels is x's backend's LlamaBlocks kernels, or a panic naming
// the device that has none.
func llamaKernels(op string, x *Tensor) backend.LlamaBlocks {
	k, ok := x.be.(backend.LlamaBlocks)
	if !ok {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%v has no kernels for Llama-style blocks (RMSNorm, rotary embeddings, SwiGLU, ReLU², grouped-query attention) yet", x.dev), Operands: []*Tensor{x}})
	}
	return k
}

// RMSNorm normalises the last axis of x by its root mean square and
// applies weight w: x·w/sqrt(mean(x²) + eps), the statistics in F32.
func RMSNorm(x, w *Tensor, eps float32) *Tensor {
	const op = "rms_norm"
	k := llamaKernels(op, x)
	rows, cols, _ := layerNormOperands(op, x, w, nil)
	out := like(op, x, x.shape)
	rstd := alloc(op, x.dev, F32, Shape{rows})
	k.RMSNorm(out.ref(), rstd.ref(), x.ref(), w.ref(), rows, cols, eps)
	if n := record(out, op, rmsNormBackward, x, w); n != nil {
		n.saved[0] = rstd
	}
	return out
}

// AddRMSNorm returns sum = x + DropoutAt(y, p, r, base) (x nil: the
// dropout alone; p 0: a plain add) and RMSNorm(sum, w, eps), in one pass
// (backend.LlamaBlocks.AddRMSNorm), as AddLayerNorm.
func AddRMSNorm(x, y *Tensor, p float32, r *DropoutStream, base *Tensor, w *Tensor, eps float32) (sum, out *Tensor) {
	const op = "add_rms_norm"
	if x == nil && p == 0 {
		return y, RMSNorm(y, w, eps)
	}
	k := llamaKernels(op, y)
	rows, cols, _ := layerNormOperands(op, y, w, nil)
	xr, m := dropoutOperands(op, x, y, p, r, base)
	sum = like(op, y, y.shape)
	out = like(op, y, y.shape)
	rstd := alloc(op, y.dev, F32, Shape{rows})
	k.AddRMSNorm(sum.ref(), out.ref(), rstd.ref(), xr, y.ref(), w.ref(), rows, cols, eps, m)
	recordDropout(sum, x, y, p, m, base)
	if nd := record(out, "rms_norm", rmsNormBackward, sum, w); nd != nil {
		nd.saved[0] = rstd
	}
	return sum, out
}

func rmsNormBackward(n *node, g *Tensor) {
	x, w, rstd := n.in[0], n.in[1], n.saved[0]
	rows, cols := rowsOf(x)
	dx := like("rms_norm", x, x.shape)
	dw := gradSink(w)
	if dw == nil {
		dw = ZerosLike(w)
		n.gin[1] = dw
	}
	var res backend.Ref
	if r := takePending(x); r != nil {
		res = r.ref()
	}
	drop := stashDropoutGrad(x, dx)
	llamaKernels("rms_norm", x).RMSNormBackward(dx.ref(), res, dw.ref(), g.ref(), x.ref(), rstd.ref(), w.ref(), rows, cols, drop)
	n.gin[0] = dx
}

// RotaryTable returns the table Rotary reads for heads of hd at positions
// [0, maxPos): the cos of every angle, then the sin, angle (t, j) =
// t·invFreq[j] for j < hd/2, computed in float64 from the float32 product
// and rounded, on dev.
func RotaryTable(dev Device, invFreq []float32, maxPos int) *Tensor {
	half := len(invFreq)
	tab := make([]float32, 2*maxPos*half)
	for t := 0; t < maxPos; t++ {
		for j, f := range invFreq {
			a := float64(float32(t) * f) // the angle as float32 products give it (Hugging Face's)
			tab[t*half+j] = float32(math.Cos(a))
			tab[(maxPos+t)*half+j] = float32(math.Sin(a))
		}
	}
	return FromFloat32s(dev, tab, 2*maxPos*half)
}

// Rotary applies rotary position embeddings (Hugging Face's rotate_half
// convention) to the query and key heads of qkv [B, T, (H + 2·KVH)·HD]:
// nHead query heads, then nKVHead key heads and nKVHead value heads (left
// as they are); row t is at position pos+t. table is RotaryTable's. Where
// qw and kw ([HD]) are given (QK-norm), each query head is first
// RMS-normalised with qw and each key head with kw (eps).
func Rotary(qkv, table, qw, kw *Tensor, nHead, nKVHead, pos int, eps float32) *Tensor {
	const op = "rotary"
	k := llamaKernels(op, qkv)
	check(op, qkv, table)
	wantFloat(op, qkv)
	wantDType(op, F32, table)
	p, err := rotaryShape(qkv, table, nHead, nKVHead, pos)
	if err != "" {
		panic(&Error{Op: op, Msg: err, Operands: []*Tensor{qkv, table}})
	}
	p.Eps = eps
	if (qw == nil) != (kw == nil) {
		panic(&Error{Op: op, Msg: "QK-norm needs both weights", Operands: []*Tensor{qkv}})
	}
	var qr, kr, rr backend.Ref
	var rstd *Tensor
	if qw != nil {
		check(op, qkv, qw, kw)
		wantDType(op, F32, qw, kw)
		if qw.Numel() != p.HD || kw.Numel() != p.HD {
			panic(&Error{Op: op, Msg: fmt.Sprintf("QK-norm weights of %d and %d, want %d", qw.Numel(), kw.Numel(), p.HD), Operands: []*Tensor{qw, kw}})
		}
		rstd = alloc(op, qkv.dev, F32, Shape{p.B * p.T * (p.H + p.KVH)})
		qr, kr, rr = qw.ref(), kw.ref(), rstd.ref()
	}
	out := like(op, qkv, qkv.shape)
	k.Rotary(p, out.ref(), rr, qkv.ref(), qr, kr, table.ref())
	if n := record(out, op, rotaryBackward, qkv, qw, kw); n != nil {
		n.saved[0], n.saved[1] = table, rstd
		n.i[0], n.i[1], n.u, n.f = nHead, nKVHead, uint64(pos), eps
	}
	return out
}

// rotaryShape is the backend.Rotary of a Rotary call, or what is wrong
// with its operands.
func rotaryShape(qkv, table *Tensor, nHead, nKVHead, pos int) (backend.Rotary, string) {
	if len(qkv.shape) != 3 || nHead <= 0 || nKVHead <= 0 || qkv.shape[2]%(nHead+2*nKVHead) != 0 {
		return backend.Rotary{}, fmt.Sprintf("want qkv [B, T, (H + 2·KVH)·HD] for %d query and %d key/value heads", nHead, nKVHead)
	}
	p := backend.Rotary{B: qkv.shape[0], T: qkv.shape[1], H: nHead, KVH: nKVHead, HD: qkv.shape[2] / (nHead + 2*nKVHead), Pos: pos}
	if p.HD%2 != 0 || table.Numel()%p.HD != 0 {
		return p, fmt.Sprintf("head width %d is odd or does not fit the table's %d elements", p.HD, table.Numel())
	}
	if p.MaxPos = table.Numel() / p.HD; pos < 0 || pos+p.T > p.MaxPos {
		return p, fmt.Sprintf("positions [%d, %d) past the table's %d", pos, pos+p.T, p.MaxPos)
	}
	return p, ""
}

func rotaryBackward(n *node, g *Tensor) {
	qkv, qw, kw, table, rstd := n.in[0], n.in[1], n.in[2], n.saved[0], n.saved[1]
	p, _ := rotaryShape(qkv, table, n.i[0], n.i[1], int(n.u))
	p.Eps = n.f
	d := like("rotary", qkv, qkv.shape)
	var qr, kr, dq, dk, rr backend.Ref
	if qw != nil {
		for i, w := range []*Tensor{qw, kw} {
			dw := gradSink(w)
			if dw == nil {
				dw = ZerosLike(w)
				n.gin[1+i] = dw
			}
			if i == 0 {
				dq = dw.ref()
			} else {
				dk = dw.ref()
			}
		}
		qr, kr, rr = qw.ref(), kw.ref(), rstd.ref()
	}
	llamaKernels("rotary", qkv).RotaryBackward(p, d.ref(), dq, dk, g.ref(), qkv.ref(), rr, qr, kr, table.ref())
	n.gin[0] = d
}

// SwiGLU returns silu(gate)·up for gu [..., 2·hidden] holding the gate's
// columns, then the up projection's: [..., hidden].
func SwiGLU(gu *Tensor) *Tensor {
	const op = "swiglu"
	k := llamaKernels(op, gu)
	wantFloat(op, gu)
	rows, w := rowsOf(gu)
	if w%2 != 0 {
		panic(&Error{Op: op, Msg: fmt.Sprintf("want an even last axis (gate, then up), got %d", w), Operands: []*Tensor{gu}})
	}
	shape := append(Shape(nil), gu.shape...)
	shape[len(shape)-1] = w / 2
	out := like(op, gu, shape)
	k.SwiGLU(out.ref(), gu.ref(), rows, w/2)
	record(out, op, swigluBackward, gu)
	return out
}

func swigluBackward(n *node, g *Tensor) {
	gu := n.in[0]
	rows, w := rowsOf(gu)
	d := like("swiglu", gu, gu.shape)
	llamaKernels("swiglu", gu).SwiGLUBackward(d.ref(), gu.ref(), g.ref(), rows, w/2)
	n.gin[0] = d
}

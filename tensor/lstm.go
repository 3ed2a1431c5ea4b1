package tensor

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// The LSTM's recurrence as one op with its own backward pass: the
// recurrent products are the backend's MatMul (one per step forward, one
// per step backward, and one for the recurrent weight's gradient over
// every step at once), the gates the backend's fused step kernels
// (backend.LSTMCells), on the devices whose backend has them.

// lstmKernels is x's backend's LSTMCells kernels, or a panic naming the
// device that has none.
func lstmKernels(op string, x *Tensor) backend.LSTMCells {
	k, ok := x.be.(backend.LSTMCells)
	if !ok {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%v has no LSTM kernels yet", x.dev), Operands: []*Tensor{x}})
	}
	return k
}

// LSTMState is an LSTM layer's state between calls, for inference: H and
// C, F32 [B, hidden], the hidden state and the cell.
type LSTMState struct{ H, C *Tensor }

// LSTM runs one LSTM layer over a batch of sequences: xg [B, T, 4H] is the
// input's projection with the bias (x·W_ih + b, the gates H wide each in
// PyTorch's order i, f, g, o) and whh [H, 4H] the recurrent weight. It
// returns the hidden state of every step, [B, T, H]:
//
//	a_t = xg_t + h_{t−1}·whh
//	i, f, g, o = σ(a_i), σ(a_f), tanh(a_g), σ(a_o)
//	c_t = f·c_{t−1} + i·g,  h_t = o·tanh(c_t)
//
// The state starts at zero, or where state is not nil at state.H and
// state.C, which then receive the last step's state (inference: no
// gradient flows into a given state). Gradients flow to xg and whh,
// backpropagated through all T steps. F32 only.
func LSTM(xg, whh *Tensor, state *LSTMState) *Tensor {
	const op = "lstm"
	k := lstmKernels(op, xg)
	check(op, xg, whh)
	wantDType(op, F32, xg, whh)
	p, err := lstmShape(xg, whh)
	if err != "" {
		panic(&Error{Op: op, Msg: err, Operands: []*Tensor{xg, whh}})
	}
	B, T, H := p.B, p.T, p.H
	be := xg.be
	hs := alloc(op, xg.dev, F32, Shape{T + 1, B, H}) // h_{t−1} at slot t: the products' operands
	cs := alloc(op, xg.dev, F32, Shape{T + 1, B, H}) // c_{t−1} at slot t
	act := alloc(op, xg.dev, F32, Shape{T, B, 4 * H})
	rec := alloc(op, xg.dev, F32, Shape{B, 4 * H})
	out := alloc(op, xg.dev, F32, Shape{B, T, H})
	if state != nil {
		check(op, xg, state.H, state.C)
		wantDType(op, F32, state.H, state.C)
		if state.H.Numel() != B*H || state.C.Numel() != B*H {
			panic(&Error{Op: op, Msg: fmt.Sprintf("state of %d and %d elements, want [%d, %d]", state.H.Numel(), state.C.Numel(), B, H), Operands: []*Tensor{state.H, state.C}})
		}
		be.Copy(hs.ref(), state.H.ref(), B*H)
		be.Copy(cs.ref(), state.C.ref(), B*H)
	} else {
		be.Fill(hs.ref(), 0, B*H)
		be.Fill(cs.ref(), 0, B*H)
	}
	recProduct := backend.MatMul{Batch: 1, M: B, N: 4 * H, K: H, Alpha: 1}
	for s := 0; s < T; s++ {
		p.Step = s
		var r backend.Ref
		if s > 0 || state != nil {
			be.MatMul(recProduct, stepSlot(hs, s, B*H), whh.ref(), rec.ref(), backend.Ref{})
			r = rec.ref()
		}
		k.LSTMCell(p, stepSlot(act, s, 4*B*H), stepSlot(cs, s+1, B*H), stepSlot(hs, s+1, B*H), out.ref(), xg.ref(), r, stepSlot(cs, s, B*H))
	}
	if state != nil {
		be.Copy(state.H.ref(), stepSlot(hs, T, B*H), B*H)
		be.Copy(state.C.ref(), stepSlot(cs, T, B*H), B*H)
	}
	if n := record(out, op, lstmBackward, xg, whh); n != nil {
		n.saved = [3]*Tensor{hs, cs, act}
	}
	return out
}

// lstmShape is the backend.LSTMStep of an LSTM call, or what is wrong
// with its operands.
func lstmShape(xg, whh *Tensor) (backend.LSTMStep, string) {
	if len(xg.shape) != 3 || len(whh.shape) != 2 {
		return backend.LSTMStep{}, fmt.Sprintf("want xg [B, T, 4H] and whh [H, 4H], got %v and %v", xg.shape, whh.shape)
	}
	H := whh.shape[0]
	if whh.shape[1] != 4*H || xg.shape[2] != 4*H || H == 0 {
		return backend.LSTMStep{}, fmt.Sprintf("want xg [B, T, 4H] and whh [H, 4H] of one H, got %v and %v", xg.shape, whh.shape)
	}
	return backend.LSTMStep{B: xg.shape[0], T: xg.shape[1], H: H}, ""
}

// stepSlot is element i·n of t: slot i of a tensor of n-element slots.
func stepSlot(t *Tensor, i, n int) backend.Ref {
	r := t.ref()
	r.Off += i * n
	return r
}

// lstmBackward runs the steps backwards: each step's gate kernel gives its
// gates' gradient (time-major, for the products, and batch-major, xg's
// gradient) and the cell's carry, a product gives the carry of h; whh's
// gradient is then one product over every step, hs[0:T]ᵀ·dgates.
func lstmBackward(n *node, g *Tensor) {
	const op = "lstm"
	xg, whh := n.in[0], n.in[1]
	hs, cs, act := n.saved[0], n.saved[1], n.saved[2]
	p, _ := lstmShape(xg, whh)
	B, T, H := p.B, p.T, p.H
	k, be := lstmKernels(op, xg), xg.be
	dgates := alloc(op, xg.dev, F32, Shape{T, B, 4 * H})
	dxg := alloc(op, xg.dev, F32, xg.shape)
	dh := alloc(op, xg.dev, F32, Shape{B, H})
	dc := alloc(op, xg.dev, F32, Shape{B, H})
	gr := Cast(g, F32)
	carry := backend.MatMul{Batch: 1, M: B, N: H, K: 4 * H, TransB: true, Alpha: 1}
	for s := T - 1; s >= 0; s-- {
		p.Step = s
		var dhr, dcr backend.Ref
		if s < T-1 {
			dhr, dcr = dh.ref(), dc.ref()
		}
		k.LSTMCellBackward(p, stepSlot(dgates, s, 4*B*H), dxg.ref(), dc.ref(), gr.ref(), dhr, dcr, stepSlot(act, s, 4*B*H), stepSlot(cs, s+1, B*H), stepSlot(cs, s, B*H))
		if s > 0 {
			be.MatMul(carry, stepSlot(dgates, s, 4*B*H), whh.ref(), dh.ref(), backend.Ref{})
		}
	}
	if xg.requiresGrad {
		n.gin[0] = dxg
	}
	if whh.requiresGrad {
		dw, beta := gradSink(whh), float32(1)
		if dw == nil {
			dw, beta = alloc(op, whh.dev, F32, whh.shape), 0
			n.gin[1] = dw
		}
		be.MatMul(backend.MatMul{Batch: 1, M: H, N: 4 * H, K: T * B, TransA: true, Alpha: 1, Beta: beta},
			hs.ref(), dgates.ref(), dw.ref(), backend.Ref{})
	}
}

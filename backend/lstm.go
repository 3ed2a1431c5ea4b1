package backend

// LSTMCells is a Backend with the kernels of an LSTM layer
// (model.Config.Arch "lstm"): the fused gate step of one timestep and its
// backward pass. The products are MatMul's: the input's projection of
// every timestep is one product before the sequence, the recurrent
// product h_{t-1}·W_hh one per step, and the recurrent weight's gradient
// one product after it (tensor.LSTM drives them). A backend without these
// kernels cannot run such a model; the tensor op says so.
//
// A step's operands: xg [B, T, 4H] is the input's projection with the
// bias, batch-major (row b·T + t); the gates are H wide each, in PyTorch's
// order i, f, g, o. act [B, 4H] holds the step's gates after their
// nonlinearities (σ(i), σ(f), tanh(g), σ(o)); c, h, cprev, the carries dh
// and dc are [B, H]; out and dout are [B, T, H], batch-major. All are F32.
type LSTMCells interface {
	// LSTMCell runs step p.Step: with a = xg[b, t] + rec[b] (rec Nil: the
	// recurrent part is zero, h_{t-1} = 0), it writes act = (σ(a_i),
	// σ(a_f), tanh(a_g), σ(a_o)), c = f·cprev + i·g (cprev Nil: 0),
	// h = o·tanh(c), and out[b, t] = h.
	LSTMCell(p LSTMStep, act, c, h, out, xg, rec, cprev Ref)
	// LSTMCellBackward is step p.Step's backward pass, from the
	// gradient of its output dout[b, t] plus dh (the next step's
	// gradient through the recurrent product; Nil: none) and the cell's
	// gradient dc from the next step (Nil: none). With tc = tanh(c) and
	// dct = dc + (dout + dh)·o·(1 − tc²), it writes the gradient of the
	// gates' pre-activations a into dgate [B, 4H] and into dxg[b, t]
	// (the same values; dxg is batch-major as xg), and dcprev = dct·f.
	// cprev is as LSTMCell's. dcprev may be dc (each element is read
	// before it is written).
	LSTMCellBackward(p LSTMStep, dgate, dxg, dcprev, dout, dh, dc, act, c, cprev Ref)
}

// LSTMStep is one timestep of an LSTM layer over a batch of B sequences
// of T steps, H wide: Step is the timestep, in [0, T).
type LSTMStep struct {
	B, T, H, Step int
}

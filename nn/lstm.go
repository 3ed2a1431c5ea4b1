package nn

import "github.com/fleetml/fleet/tensor"

// LSTM is one LSTM layer: the input's projection IH (x·W_ih + b, a Linear
// [in, 4H] in fleet's layout, the gates H wide each in PyTorch's order
// i, f, g, o) and the recurrent weight HH [H, 4H] (h_{t−1}·W_hh).
// PyTorch's two biases b_ih and b_hh are one here, their sum.
type LSTM struct {
	IH *Linear
	HH *Parameter
}

// NewLSTM makes a layer of hidden units over inputs of nIn features,
// its weights from N(0, std²) and its bias (where bias) zero. Its
// parameters are name.ih.weight, name.ih.bias and name.hh.weight.
func NewLSTM(name string, in Init, nIn, hidden int, bias bool, std float32) *LSTM {
	return &LSTM{
		IH: NewLinear(name+".ih", in, nIn, 4*hidden, bias, std),
		HH: NewParameter(name+".hh.weight", in.Normal(std, hidden, 4*hidden)),
	}
}

// Forward runs the layer over x [B, T, in] and returns the hidden state
// of every step, [B, T, H]: the input's projection of every step in one
// product, then the recurrence (tensor.LSTM). The state starts at zero,
// or at state where it is not nil (inference), which then receives the
// last step's.
func (l *LSTM) Forward(x *tensor.Tensor, state *tensor.LSTMState) *tensor.Tensor {
	return tensor.LSTM(l.IH.Forward(x), l.HH.T, state)
}

// Hidden is the layer's width H.
func (l *LSTM) Hidden() int { return l.HH.T.Dim(0) }

// Parameters lists the layer's parameters: W_ih, b (where present), W_hh.
func (l *LSTM) Parameters() []*Parameter { return append(l.IH.Parameters(), l.HH) }

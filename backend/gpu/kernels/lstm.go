package kernels

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
)

// The op functions of the LSTM's gate kernels (backend.LSTMCells): one
// timestep's gates, cell and output, and its backward pass, in lstm.cu
// (CUDA) and lstm.cl (OpenCL). The products around them are the
// runtime's (tensor.LSTM drives the sequence).

// lstmCheck validates an LSTM step's shape.
func lstmCheck(op string, p backend.LSTMStep) error {
	if p.B < 0 || p.T < 1 || p.H < 1 || p.Step < 0 || p.Step >= p.T {
		return fmt.Errorf("kernels: %s: bad shape %+v (want B >= 0, T, H >= 1, Step in [0, T))", op, p)
	}
	if int64(p.B)*int64(p.T)*4*int64(p.H) > math.MaxInt32 {
		return fmt.Errorf("kernels: %s: shape %+v too large", op, p)
	}
	return nil
}

// LSTMCell runs step p.Step of an LSTM layer (backend.LSTMCells.LSTMCell):
// act [B, 4H], c, h [B, H] and out [B, T, H] written from xg [B, T, 4H],
// rec [B, 4H] (nil: zero) and cprev [B, H] (nil: zero), all F32.
// fleet_lstm_cell_f32, a thread per (row, unit).
func LSTMCell[B comparable](l Launcher[B], p backend.LSTMStep, act, c, h, out, xg, rec, cprev B) error {
	if err := lstmCheck("lstm cell", p); err != nil {
		return err
	}
	return elementwise(l, "fleet_lstm_cell_f32", p.B*p.H, *new(Args[B]).Buf(act, c, h, out, xg, rec, cprev).
		Int(int32(p.B), int32(p.T), int32(p.H), int32(p.Step)))
}

// LSTMCellBackward is step p.Step's backward pass
// (backend.LSTMCells.LSTMCellBackward): dgate [B, 4H], dxg [B, T, 4H] at
// the step, and dcprev [B, H] (which may be dc) from dout [B, T, H], dh
// and dc (nil: none), act, c and cprev (nil: zero), all F32.
// fleet_lstm_cell_backward_f32, a thread per (row, unit).
func LSTMCellBackward[B comparable](l Launcher[B], p backend.LSTMStep, dgate, dxg, dcprev, dout, dh, dc, act, c, cprev B) error {
	if err := lstmCheck("lstm cell backward", p); err != nil {
		return err
	}
	return elementwise(l, "fleet_lstm_cell_backward_f32", p.B*p.H, *new(Args[B]).Buf(dgate, dxg, dcprev, dout, dh, dc, act, c, cprev).
		Int(int32(p.B), int32(p.T), int32(p.H), int32(p.Step)))
}

// lstmFLOPs is FLOPs for the kernels of lstm.cu (name without fleet_ and
// the storage suffix), 0 for any other: per unit, the forward's four adds,
// three sigmoids and two tanh (counted 4 each: the exp, the add, the
// division, a scale) and the cell's 4; the backward's tanh and about 25
// products and sums.
func lstmFLOPs(name string, arg func(param string) float64) float64 {
	units := arg("B") * arg("H")
	switch name {
	case "lstm_cell":
		return 44 * units
	case "lstm_cell_backward":
		return 29 * units
	}
	return 0
}

// lstmExtent is Extent for the kernels of lstm.cu, as their comments'
// Traffic lines say: a step's rows of xg, dxg, out and dout, the rest
// whole.
func lstmExtent(name, param string, arg func(param string) float64) (elems, passes float64, ok bool) {
	units := arg("B") * arg("H")
	switch name + "." + param {
	case "lstm_cell.act", "lstm_cell.xg", "lstm_cell.rec",
		"lstm_cell_backward.dgate", "lstm_cell_backward.dxg", "lstm_cell_backward.act":
		return 4 * units, 1, true
	case "lstm_cell.c", "lstm_cell.h", "lstm_cell.out", "lstm_cell.cprev",
		"lstm_cell_backward.dcprev", "lstm_cell_backward.dout", "lstm_cell_backward.dh", "lstm_cell_backward.dc",
		"lstm_cell_backward.c", "lstm_cell_backward.cprev":
		return units, 1, true
	}
	return 0, 0, false
}

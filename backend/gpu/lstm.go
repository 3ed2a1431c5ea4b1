package gpu

import (
	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// The LSTM's gate kernels on every driver: the op functions of
// backend/gpu/kernels (lstm.go), over CUDA's lstm.cu and OpenCL's
// lstm.cl. The products around them (the input's projection, each step's
// recurrent product, the weights' gradients) are the runtime's MatMul.

var _ backend.LSTMCells = (*Backend)(nil)

// LSTMCell implements backend.LSTMCells: one launch.
func (c *Backend) LSTMCell(p backend.LSTMStep, act, cell, h, out, xg, rec, cprev backend.Ref) {
	c.check("lstm_cell", kernels.LSTMCell(c, p, c.ptr(act), c.ptr(cell), c.ptr(h), c.ptr(out), c.ptr(xg), c.ptr(rec), c.ptr(cprev)))
}

// LSTMCellBackward implements backend.LSTMCells: one launch.
func (c *Backend) LSTMCellBackward(p backend.LSTMStep, dgate, dxg, dcprev, dout, dh, dc, act, cell, cprev backend.Ref) {
	c.check("lstm_cell_backward", kernels.LSTMCellBackward(c, p, c.ptr(dgate), c.ptr(dxg), c.ptr(dcprev), c.ptr(dout), c.ptr(dh), c.ptr(dc),
		c.ptr(act), c.ptr(cell), c.ptr(cprev)))
}

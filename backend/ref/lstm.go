package ref

import "math"

// The LSTM's kernels in float64 (backend.LSTMCells' semantics), and a
// whole layer over a sequence. Gates are H wide each, in PyTorch's order
// i, f, g, o.

func sigmoid(x float64) float64 { return 1 / (1 + math.Exp(-x)) }

// LSTMCell is backend.LSTMCells.LSTMCell for step s of B sequences of T
// steps: xg [B, T, 4H]; rec [B, 4H] and cprev [B, H] may be nil (zero).
// It returns act [B, 4H], c and h [B, H]; out [B, T, H] gets h at step s.
func LSTMCell(xg, rec, cprev, out []float64, b, t, h, s int) (act, c, hh []float64) {
	act, c, hh = make([]float64, b*4*h), make([]float64, b*h), make([]float64, b*h)
	for r := 0; r < b; r++ {
		for j := 0; j < h; j++ {
			var a [4]float64
			for k := range a {
				a[k] = xg[(r*t+s)*4*h+k*h+j]
				if rec != nil {
					a[k] += rec[r*4*h+k*h+j]
				}
			}
			i, f, g, o := sigmoid(a[0]), sigmoid(a[1]), math.Tanh(a[2]), sigmoid(a[3])
			var cp float64
			if cprev != nil {
				cp = cprev[r*h+j]
			}
			cv := f*cp + i*g
			hv := o * math.Tanh(cv)
			for k, v := range [4]float64{i, f, g, o} {
				act[r*4*h+k*h+j] = v
			}
			c[r*h+j], hh[r*h+j] = cv, hv
			out[(r*t+s)*h+j] = hv
		}
	}
	return act, c, hh
}

// LSTMCellBackward is backend.LSTMCells.LSTMCellBackward for step s: dh,
// dc and cprev may be nil (zero). It returns dgate [B, 4H] and dcprev
// [B, H], and writes dgate's values into dxg [B, T, 4H] at step s.
func LSTMCellBackward(dout, dh, dc, act, c, cprev, dxg []float64, b, t, h, s int) (dgate, dcprev []float64) {
	dgate, dcprev = make([]float64, b*4*h), make([]float64, b*h)
	for r := 0; r < b; r++ {
		for j := 0; j < h; j++ {
			i, f, g, o := act[r*4*h+j], act[r*4*h+h+j], act[r*4*h+2*h+j], act[r*4*h+3*h+j]
			tc := math.Tanh(c[r*h+j])
			d := dout[(r*t+s)*h+j]
			if dh != nil {
				d += dh[r*h+j]
			}
			dct := d * o * (1 - tc*tc)
			if dc != nil {
				dct += dc[r*h+j]
			}
			var cp float64
			if cprev != nil {
				cp = cprev[r*h+j]
			}
			da := [4]float64{dct * g * i * (1 - i), dct * cp * f * (1 - f), dct * i * (1 - g*g), d * tc * o * (1 - o)}
			for k, v := range da {
				dgate[r*4*h+k*h+j] = v
				dxg[(r*t+s)*4*h+k*h+j] = v
			}
			dcprev[r*h+j] = dct * f
		}
	}
	return dgate, dcprev
}

// LSTM runs one layer over B sequences of T steps from a zero state:
// x [B, T, I], wih [I, 4H], bias [4H] (nil: none), whh [H, 4H]. It
// returns h of every step, [B, T, H].
func LSTM(x, wih, bias, whh []float64, b, t, in, h int) []float64 {
	xg := make([]float64, b*t*4*h)
	MatMul(x, wih, xg, bias, b*t, 4*h, in, false, false, 1, 0)
	return LSTMRecurrence(xg, whh, b, t, h)
}

// LSTMRecurrence is LSTM from the input's projection xg [B, T, 4H].
func LSTMRecurrence(xg, whh []float64, b, t, h int) []float64 {
	out := make([]float64, b*t*h)
	var hprev, cprev, rec []float64
	for s := 0; s < t; s++ {
		if hprev != nil {
			rec = make([]float64, b*4*h)
			MatMul(hprev, whh, rec, nil, b, 4*h, h, false, false, 1, 0)
		}
		_, cprev, hprev = LSTMCell(xg, rec, cprev, out, b, t, h, s)
	}
	return out
}

package ref

import "math"

// RMSNorm normalises each row of x [rows, cols] by its root mean square
// and applies w: x·w/sqrt(mean(x²) + eps).
func RMSNorm(x, w []float64, rows, cols int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		var ss float64
		for _, v := range row {
			ss += v * v
		}
		rstd := 1 / math.Sqrt(ss/float64(cols)+eps)
		for j, v := range row {
			out[r*cols+j] = v * rstd * w[j]
		}
	}
	return out
}

// RotaryAngles returns the cos and sin of the rotary angles of positions
// [0, maxPos) for a head of hd, Hugging Face's convention: angle (t, j) =
// t·invFreq[j] for j < hd/2, with invFreq[j] = theta^(−2j/hd) where
// invFreq is nil.
func RotaryAngles(maxPos, hd int, theta float64, invFreq []float64) (cos, sin []float64) {
	if invFreq == nil {
		invFreq = make([]float64, hd/2)
		for j := range invFreq {
			invFreq[j] = 1 / math.Pow(theta, float64(2*j)/float64(hd))
		}
	}
	cos, sin = make([]float64, maxPos*hd/2), make([]float64, maxPos*hd/2)
	for t := 0; t < maxPos; t++ {
		for j := 0; j < hd/2; j++ {
			a := float64(t) * invFreq[j]
			cos[t*hd/2+j], sin[t*hd/2+j] = math.Cos(a), math.Sin(a)
		}
	}
	return cos, sin
}

// Rotary applies rotary position embeddings to the q and k heads of a
// packed qkv of b·t rows (h query heads, kvh key heads, kvh value heads,
// each hd wide), row (bb, tt) at position pos0+tt, with the angles' cos
// and sin (RotaryAngles). Where qw and kw are not nil, each q (k) head is
// first RMS-normalised with qw (kw). The pairs are element j and j+hd/2
// (rotate_half). The v heads are copied.
func Rotary(qkv []float64, b, t, h, kvh, hd, pos0 int, cos, sin, qw, kw []float64, eps float64) []float64 {
	w := (h + 2*kvh) * hd
	out := append([]float64(nil), qkv...)
	half := hd / 2
	for r := 0; r < b*t; r++ {
		pos := pos0 + r%t
		for head := 0; head < h+kvh; head++ {
			x := out[r*w+head*hd : r*w+(head+1)*hd]
			nw := qw
			if head >= h {
				nw = kw
			}
			if nw != nil {
				copy(x, RMSNorm(x, nw, 1, hd, eps))
			}
			for j := 0; j < half; j++ {
				c, s := cos[pos*half+j], sin[pos*half+j]
				a, bb := x[j], x[j+half]
				x[j], x[j+half] = a*c-bb*s, bb*c+a*s
			}
		}
	}
	return out
}

// SwiGLU is silu(gate)·up for gu [rows, 2·hidden], the gate's columns
// first: out [rows, hidden].
func SwiGLU(gu []float64, rows, hidden int) []float64 {
	out := make([]float64, rows*hidden)
	for r := 0; r < rows; r++ {
		for j := 0; j < hidden; j++ {
			g, u := gu[r*2*hidden+j], gu[r*2*hidden+hidden+j]
			out[r*hidden+j] = g / (1 + math.Exp(-g)) * u
		}
	}
	return out
}

// ReLU2 is max(x, 0)² elementwise.
func ReLU2(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		out[i] = v * v
	}
	return out
}

// ReLU2Backward is dx = 2·max(x, 0)·dout elementwise.
func ReLU2Backward(x, dout []float64) []float64 {
	dx := make([]float64, len(x))
	for i, v := range x {
		if v < 0 {
			v = 0
		}
		dx[i] = 2 * v * dout[i]
	}
	return dx
}

// Package ref holds plain float64 reference versions of fleet's kernels.
// They are written for clarity, not speed: tests hold every fast kernel to
// them, and gradient checks take finite differences of them.
package ref

import "math"

// MatMul computes C = alpha*op(A)@op(B) + beta*C (+bias) for one matrix,
// with A M×K (K×M if transA) and B K×N (N×K if transB).
func MatMul(a, b, c, bias []float64, m, n, k int, transA, transB bool, alpha, beta float64) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				av := a[i*k+p]
				if transA {
					av = a[p*m+i]
				}
				bv := b[p*n+j]
				if transB {
					bv = b[j*k+p]
				}
				s += av * bv
			}
			v := alpha*s + beta*c[i*n+j]
			if bias != nil {
				v += bias[j]
			}
			c[i*n+j] = v
		}
	}
}

// Softmax over each row of a rows×cols matrix.
func Softmax(x []float64, rows, cols int) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		m := math.Inf(-1)
		for _, v := range row {
			m = math.Max(m, v)
		}
		var s float64
		for j, v := range row {
			out[r*cols+j] = math.Exp(v - m)
			s += out[r*cols+j]
		}
		for j := range row {
			out[r*cols+j] /= s
		}
	}
	return out
}

// LayerNorm normalises each row and applies w and b (b may be nil).
func LayerNorm(x, w, b []float64, rows, cols int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		var mean, v float64
		for _, x := range row {
			mean += x
		}
		mean /= float64(cols)
		for _, x := range row {
			v += (x - mean) * (x - mean)
		}
		v /= float64(cols)
		rstd := 1 / math.Sqrt(v+eps)
		for j, x := range row {
			y := (x - mean) * rstd * w[j]
			if b != nil {
				y += b[j]
			}
			out[r*cols+j] = y
		}
	}
	return out
}

// GELU is the tanh approximation used by GPT-2.
func GELU(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	}
	return out
}

// Attention is causal multi-head self-attention on packed qkv [B, T, 3C].
func Attention(qkv []float64, bsz, t, c, h int) []float64 {
	return GroupedAttention(qkv, bsz, t, c, h, h)
}

// GroupedAttention is causal grouped-query attention on packed qkv
// [B, T, C + 2·kvh·C/h]: h query heads of C/h, then kvh key heads and kvh
// value heads; query head hh reads key/value head hh/(h/kvh). The output
// is [B, T, C].
func GroupedAttention(qkv []float64, bsz, t, c, h, kvh int) []float64 {
	return DroppedAttention(qkv, bsz, t, c, h, kvh, nil)
}

// DroppedAttention is GroupedAttention with dropout on the probabilities:
// the probability of query i and key j in window b, head hh is multiplied
// by factor(((b·h + hh)·t + i)·t + j) in the product with V (nil: 1).
func DroppedAttention(qkv []float64, bsz, t, c, h, kvh int, factor func(i int64) float64) []float64 {
	hd := c / h
	w := c + 2*kvh*hd
	out := make([]float64, bsz*t*c)
	for b := 0; b < bsz; b++ {
		for hh := 0; hh < h; hh++ {
			g := hh / (h / kvh)
			for i := 0; i < t; i++ {
				q := qkv[(b*t+i)*w+hh*hd:]
				scores := make([]float64, i+1)
				m := math.Inf(-1)
				for j := 0; j <= i; j++ {
					k := qkv[(b*t+j)*w+c+g*hd:]
					var s float64
					for d := 0; d < hd; d++ {
						s += q[d] * k[d]
					}
					scores[j] = s / math.Sqrt(float64(hd))
					m = math.Max(m, scores[j])
				}
				var sum float64
				for j := range scores {
					scores[j] = math.Exp(scores[j] - m)
					sum += scores[j]
				}
				for j := 0; j <= i; j++ {
					v := qkv[(b*t+j)*w+c+kvh*hd+g*hd:]
					p := scores[j] / sum
					if factor != nil {
						p *= factor((int64(b*h+hh)*int64(t)+int64(i))*int64(t) + int64(j))
					}
					for d := 0; d < hd; d++ {
						out[(b*t+i)*c+hh*hd+d] += p * v[d]
					}
				}
			}
		}
	}
	return out
}

// CrossEntropy returns -log softmax(logits)[target] per row; rows whose
// target is outside [0, v) give 0.
func CrossEntropy(logits []float64, targets []int32, n, v int) []float64 {
	out := make([]float64, n)
	for r := 0; r < n; r++ {
		row := logits[r*v : (r+1)*v]
		m := math.Inf(-1)
		for _, x := range row {
			m = math.Max(m, x)
		}
		var s float64
		for _, x := range row {
			s += math.Exp(x - m)
		}
		t := int(targets[r])
		if t < 0 || t >= v {
			continue
		}
		out[r] = m + math.Log(s) - row[t]
	}
	return out
}

// Embedding gathers rows of table.
func Embedding(table []float64, ids []int32, dim int) []float64 {
	out := make([]float64, len(ids)*dim)
	for i, id := range ids {
		copy(out[i*dim:(i+1)*dim], table[int(id)*dim:(int(id)+1)*dim])
	}
	return out
}

// AdamW applies one AdamW step (PyTorch's formulation) in place.
func AdamW(w, g, m, v []float64, lr, b1, b2, eps, wd float64, step int) {
	bc1 := 1 - math.Pow(b1, float64(step))
	bc2 := 1 - math.Pow(b2, float64(step))
	for i := range w {
		w[i] *= 1 - lr*wd
		m[i] = b1*m[i] + (1-b1)*g[i]
		v[i] = b2*v[i] + (1-b2)*g[i]*g[i]
		w[i] -= lr / bc1 * m[i] / (math.Sqrt(v[i])/math.Sqrt(bc2) + eps)
	}
}

package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

const elemGrain = 1 << 14

// Binary implements backend.Backend.
func (c *CPU) Binary(op backend.BinaryOp, dst, a, b backend.Ref, n int) {
	d, x, y := f32(dst)[:n], f32(a)[:n], f32(b)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) { binaryChunk(int(op), d[lo:hi], x[lo:hi], y[lo:hi]) })
}

// The elementwise kernels, replaced by SIMD versions (elementwise_amd64.s)
// that give bit-identical results where the CPU has them.
var (
	binaryChunk = binaryGo
	axpyChunk   = axpyGo
	scaleChunk  = scaleGo
)

// binaryGo computes d = x op y; op is a backend.BinaryOp.
func binaryGo(op int, d, x, y []float32) {
	x, y = x[:len(d)], y[:len(d)]
	switch backend.BinaryOp(op) {
	case backend.Add:
		for i := range d {
			d[i] = x[i] + y[i]
		}
	case backend.Sub:
		for i := range d {
			d[i] = x[i] - y[i]
		}
	case backend.Mul:
		for i := range d {
			d[i] = x[i] * y[i]
		}
	case backend.Div:
		for i := range d {
			d[i] = x[i] / y[i]
		}
	}
}

// Axpy implements backend.Backend.
func (c *CPU) Axpy(dst, x backend.Ref, alpha float32, n int) {
	d, s := f32(dst)[:n], f32(x)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) { axpyChunk(d[lo:hi], s[lo:hi], alpha) })
}

// axpy computes d += alpha·s with the fastest available kernel.
func axpy(d, s []float32, alpha float32) { axpyChunk(d, s, alpha) }

func axpyGo(d, s []float32, alpha float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] += alpha * s[i]
	}
}

// Scale implements backend.Backend.
func (c *CPU) Scale(dst, src backend.Ref, alpha float32, n int) {
	d, s := f32(dst)[:n], f32(src)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) { scaleChunk(d[lo:hi], s[lo:hi], alpha) })
}

func scaleGo(d, s []float32, alpha float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] = alpha * s[i]
	}
}

// Unary implements backend.Backend.
func (c *CPU) Unary(op backend.UnaryOp, dst, src backend.Ref, n int) {
	d, s := f32(dst)[:n], f32(src)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := s[i]
			switch op {
			case backend.Neg:
				x = -x
			case backend.Exp:
				x = float32(math.Exp(float64(x)))
			case backend.Log:
				x = float32(math.Log(float64(x)))
			case backend.Tanh:
				x = float32(math.Tanh(float64(x)))
			case backend.Sqrt:
				x = float32(math.Sqrt(float64(x)))
			}
			d[i] = x
		}
	})
}

// SumRows implements backend.Backend. Each output column is summed over
// all rows in order by one goroutine.
func (c *CPU) SumRows(dst, src backend.Ref, rows, cols int, beta float32) {
	d, s := f32(dst)[:cols], f32(src)[:rows*cols]
	c.parallelFor(cols, 64, func(lo, hi int) {
		buf := getScratch(hi - lo)
		defer scratchPool.Put(buf)
		acc := *buf
		clear(acc)
		for i := 0; i < rows; i++ {
			row := s[i*cols+lo : i*cols+hi]
			for j := range acc {
				acc[j] += row[j]
			}
		}
		for j := range acc {
			if beta == 0 {
				d[lo+j] = acc[j]
			} else {
				d[lo+j] = beta*d[lo+j] + acc[j]
			}
		}
	})
}

// SumCols implements backend.Backend.
func (c *CPU) SumCols(dst, src backend.Ref, rows, cols int) {
	d, s := f32(dst)[:rows], f32(src)[:rows*cols]
	c.parallelFor(rows, max(1, elemGrain/max(cols, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			var acc float32
			for _, v := range s[i*cols : (i+1)*cols] {
				acc += v
			}
			d[i] = acc
		}
	})
}

// sumSquaresChunk is fixed so the partial sums, and hence the result, do
// not depend on the thread count.
const sumSquaresChunk = 1 << 15

// SumSquares implements backend.Backend. Partial sums in float64 over
// fixed chunks are added in chunk order.
func (c *CPU) SumSquares(dst, src backend.Ref, n int) {
	s := f32(src)[:n]
	chunks := (n + sumSquaresChunk - 1) / sumSquaresChunk
	parts := make([]float64, chunks)
	c.parallelFor(chunks, 1, func(lo, hi int) {
		for k := lo; k < hi; k++ {
			var acc float64
			for _, v := range s[k*sumSquaresChunk : min((k+1)*sumSquaresChunk, n)] {
				acc += float64(v) * float64(v)
			}
			parts[k] = acc
		}
	})
	var total float64
	for _, p := range parts {
		total += p
	}
	f32(dst)[0] += float32(total)
}

// GELU implements backend.Backend (tanh approximation, as GPT-2).
func (c *CPU) GELU(dst, src backend.Ref, n int) {
	d, s := f32(dst)[:n], f32(src)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) { geluChunk(d[lo:hi], s[lo:hi]) })
}

// GELUBackward implements backend.Backend.
func (c *CPU) GELUBackward(dx, x, dy backend.Ref, n int) {
	d, s, g := f32(dx)[:n], f32(x)[:n], f32(dy)[:n]
	c.parallelFor(n, elemGrain, func(lo, hi int) { geluBackwardChunk(d[lo:hi], s[lo:hi], g[lo:hi]) })
}

// The elementwise transcendental kernels, replaced by SIMD versions
// (vexp_amd64.s) where the CPU has them.
var (
	geluChunk         = geluGo
	geluBackwardChunk = geluBackwardGo
	expChunk          = expGo
)

// geluC is sqrt(2/pi).
const geluC = 0.7978845608028654

// geluGo computes gelu(x) = x·sigmoid(2u), u = √(2/π)(x + 0.044715x³),
// which equals 0.5x(1 + tanh u).
func geluGo(d, s []float32) {
	s = s[:len(d)]
	for i, x := range s {
		u := geluC * (x + 0.044715*x*x*x)
		d[i] = x / (1 + exp32(-2*u))
	}
}

// geluBackwardGo computes dx = dy·(σ + 2xσ(1−σ)u'), σ = sigmoid(2u).
func geluBackwardGo(dx, x, dy []float32) {
	x, dy = x[:len(dx)], dy[:len(dx)]
	for i, v := range x {
		u := geluC * (v + 0.044715*v*v*v)
		sg := 1 / (1 + exp32(-2*u))
		du := geluC * (1 + 3*0.044715*v*v)
		dx[i] = dy[i] * (sg + 2*v*sg*(1-sg)*du)
	}
}

func expGo(d, s []float32) {
	s = s[:len(d)]
	for i, x := range s {
		d[i] = exp32(x)
	}
}

// exp32 is exp in float32, clamped like the SIMD version so both saturate
// the same way.
func exp32(x float32) float32 {
	return float32(math.Exp(float64(min(max(x, -87.33654), 88.37626))))
}

// AdamW implements backend.Backend: PyTorch's AdamW with bias correction
// and decoupled weight decay.
func (c *CPU) AdamW(p backend.AdamW, param, grad, m, v backend.Ref, n int) {
	w, g, mm, vv := f32(param)[:n], f32(grad)[:n], f32(m)[:n], f32(v)[:n]
	bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
	bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
	hp := adamConsts{
		b1: p.Beta1, c1: 1 - p.Beta1, b2: p.Beta2, c2: 1 - p.Beta2,
		invBC2Sqrt: float32(1 / math.Sqrt(bc2)), eps: p.Eps,
		decay: 1 - p.LR*p.WeightDecay, stepSize: float32(float64(p.LR) / bc1),
	}
	c.parallelFor(n, elemGrain, func(lo, hi int) { adamwChunk(w[lo:hi], g[lo:hi], mm[lo:hi], vv[lo:hi], &hp) })
}

// adamConsts are one AdamW step's per-element constants, laid out for
// the assembly version (eight float32s).
type adamConsts struct {
	b1, c1, b2, c2, invBC2Sqrt, eps, decay, stepSize float32
}

// adamwChunk is replaced by a SIMD version where the CPU has one.
var adamwChunk = adamwGo

// adamwGo updates one chunk: m ← β1·m + (1−β1)·g, v ← β2·v + (1−β2)·g²,
// w ← w·(1 − lr·wd) − stepSize·m / (√v / √(1−β2ᵗ) + ε).
func adamwGo(w, g, m, v []float32, k *adamConsts) {
	g, m, v = g[:len(w)], m[:len(w)], v[:len(w)]
	for i := range w {
		gi := g[i]
		mi := k.b1*m[i] + k.c1*gi
		vi := k.b2*v[i] + k.c2*gi*gi
		m[i], v[i] = mi, vi
		denom := float32(math.Sqrt(float64(vi)))*k.invBC2Sqrt + k.eps
		w[i] = w[i]*k.decay - k.stepSize*(mi/denom)
	}
}

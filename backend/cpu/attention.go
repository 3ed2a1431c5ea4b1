package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// Attention implements backend.Backend: causal softmax(q kᵀ/√hd) v for
// each (batch, head), one goroutine per pair. The probabilities are saved
// ([B, H, T, T], zero above the diagonal) for the backward pass.
func (c *CPU) Attention(p backend.Attention, out, saved, qkv backend.Ref) {
	B, T, C, H := p.B, p.T, p.C, p.H
	hd := C / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	o, att, x := f32(out)[:B*T*C], f32(saved)[:p.SavedLen()], f32(qkv)[:B*T*3*C]
	c.parallelFor(B*H, 1, func(lo, hi int) {
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			base := b * T * 3 * C
			for t := 0; t < T; t++ {
				q := x[base+t*3*C+h*hd : base+t*3*C+h*hd+hd]
				pr := att[(bh*T+t)*T : (bh*T+t+1)*T]
				m := float32(math.Inf(-1))
				for s := 0; s <= t; s++ {
					k := x[base+s*3*C+C+h*hd : base+s*3*C+C+h*hd+hd]
					var dot float32
					for i, qv := range q {
						dot += qv * k[i]
					}
					dot *= scale
					pr[s] = dot
					m = max(m, dot)
				}
				var sum float32
				for s := 0; s <= t; s++ {
					e := float32(math.Exp(float64(pr[s] - m)))
					pr[s] = e
					sum += e
				}
				inv := 1 / sum
				for s := 0; s <= t; s++ {
					pr[s] *= inv
				}
				clear(pr[t+1:])
				or := o[b*T*C+t*C+h*hd : b*T*C+t*C+h*hd+hd]
				clear(or)
				for s := 0; s <= t; s++ {
					v := x[base+s*3*C+2*C+h*hd : base+s*3*C+2*C+h*hd+hd]
					axpy(or, v, pr[s])
				}
			}
		}
	})
}

// AttentionBackward implements backend.Backend. Each (batch, head) pair
// writes its own slices of dqkv, adding over queries in order.
func (c *CPU) AttentionBackward(p backend.Attention, dqkv, dout, saved, qkv backend.Ref) {
	B, T, C, H := p.B, p.T, p.C, p.H
	hd := C / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	d, g, att, x := f32(dqkv)[:B*T*3*C], f32(dout)[:B*T*C], f32(saved)[:p.SavedLen()], f32(qkv)[:B*T*3*C]
	c.parallelFor(B*H, 1, func(lo, hi int) {
		dp := make([]float32, T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			base := b * T * 3 * C
			for t := 0; t < T; t++ {
				for part := 0; part < 3; part++ {
					clear(d[base+t*3*C+part*C+h*hd : base+t*3*C+part*C+h*hd+hd])
				}
			}
			for t := 0; t < T; t++ {
				gr := g[b*T*C+t*C+h*hd : b*T*C+t*C+h*hd+hd]
				pr := att[(bh*T+t)*T : (bh*T+t+1)*T]
				// dv[s] += p[t,s] * dout[t]; dp[s] = dout[t]·v[s]
				var sum float32
				for s := 0; s <= t; s++ {
					v := x[base+s*3*C+2*C+h*hd : base+s*3*C+2*C+h*hd+hd]
					dv := d[base+s*3*C+2*C+h*hd : base+s*3*C+2*C+h*hd+hd]
					axpy(dv, gr, pr[s])
					var dot float32
					for i, gv := range gr {
						dot += gv * v[i]
					}
					dp[s] = dot
					sum += dot * pr[s]
				}
				q := x[base+t*3*C+h*hd : base+t*3*C+h*hd+hd]
				dq := d[base+t*3*C+h*hd : base+t*3*C+h*hd+hd]
				for s := 0; s <= t; s++ {
					ds := pr[s] * (dp[s] - sum) * scale
					k := x[base+s*3*C+C+h*hd : base+s*3*C+C+h*hd+hd]
					dk := d[base+s*3*C+C+h*hd : base+s*3*C+C+h*hd+hd]
					axpy(dq, k, ds)
					axpy(dk, q, ds)
				}
			}
		}
	})
}

// AttentionKV implements backend.Backend.
func (c *CPU) AttentionKV(p backend.AttentionKV, out, qkv, kc, vc backend.Ref) {
	B, T, C, H := p.B, p.T, p.C, p.H
	hd := C / H
	scale := float32(1 / math.Sqrt(float64(hd)))
	o, x, ks, vs := f32(out)[:B*T*C], f32(qkv)[:B*T*3*C], f32(kc)[:B*p.MaxT*C], f32(vc)[:B*p.MaxT*C]
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			row := x[(b*T+t)*3*C:]
			pos := p.Pos + t
			copy(ks[(b*p.MaxT+pos)*C:(b*p.MaxT+pos+1)*C], row[C:2*C])
			copy(vs[(b*p.MaxT+pos)*C:(b*p.MaxT+pos+1)*C], row[2*C:3*C])
		}
	}
	c.parallelFor(B*H, 1, func(lo, hi int) {
		scores := make([]float32, p.Pos+T)
		for bh := lo; bh < hi; bh++ {
			b, h := bh/H, bh%H
			for t := 0; t < T; t++ {
				q := x[(b*T+t)*3*C+h*hd : (b*T+t)*3*C+h*hd+hd]
				n := p.Pos + t + 1
				m := float32(math.Inf(-1))
				for s := 0; s < n; s++ {
					k := ks[(b*p.MaxT+s)*C+h*hd : (b*p.MaxT+s)*C+h*hd+hd]
					var dot float32
					for i, qv := range q {
						dot += qv * k[i]
					}
					scores[s] = dot * scale
					m = max(m, scores[s])
				}
				var sum float32
				for s := 0; s < n; s++ {
					scores[s] = float32(math.Exp(float64(scores[s] - m)))
					sum += scores[s]
				}
				or := o[(b*T+t)*C+h*hd : (b*T+t)*C+h*hd+hd]
				clear(or)
				for s := 0; s < n; s++ {
					axpy(or, vs[(b*p.MaxT+s)*C+h*hd:(b*p.MaxT+s)*C+h*hd+hd], scores[s]/sum)
				}
			}
		}
	})
}

package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
)

// host moves test data on and off one backend. With asF32 set, BF16
// operands are kept as F32 holding bf16-rounded values: how the CPU, which
// computes in F32 only, stands in for BF16 kernels.
type host struct {
	be    backend.Backend
	asF32 bool
}

func (h host) up(dt backend.DType, v []float32) backend.Ref { return h.upAt(dt, v, 0) }

// alloc makes n elements of dt (F32 for BF16 under asF32) at element
// offset off of a new buffer.
func (h host) alloc(dt backend.DType, n, off int) backend.Ref {
	if h.asF32 && dt == backend.BF16 {
		dt = backend.F32
	}
	return backend.Ref{S: h.be.Alloc(dt, n+off), Off: off}
}

// upAt is up at element offset off of the buffer it makes.
func (h host) upAt(dt backend.DType, v []float32, off int) backend.Ref {
	if h.asF32 && dt == backend.BF16 {
		r := make([]float32, len(v))
		for i, x := range v {
			r[i] = backend.BF16ToF32(backend.F32ToBF16(x))
		}
		dt, v = backend.F32, r
	}
	ref := h.alloc(dt, len(v), off)
	switch dt {
	case backend.F32:
		h.be.Upload(ref, backend.AsBytes(v))
	case backend.BF16, backend.F16:
		u := make([]uint16, len(v))
		for i, x := range v {
			if dt == backend.BF16 {
				u[i] = backend.F32ToBF16(x)
			} else {
				u[i] = backend.F32ToF16(x)
			}
		}
		h.be.Upload(ref, backend.AsBytes(u))
	case backend.I32:
		u := make([]int32, len(v))
		for i, x := range v {
			u[i] = int32(x)
		}
		h.be.Upload(ref, backend.AsBytes(u))
	}
	return ref
}

func (h host) down(r backend.Ref, n int) []float32 {
	out := make([]float32, n)
	switch r.S.DType() {
	case backend.F32:
		h.be.Download(backend.AsBytes(out), r)
	case backend.BF16, backend.F16:
		u := make([]uint16, n)
		h.be.Download(backend.AsBytes(u), r)
		for i, x := range u {
			if r.S.DType() == backend.BF16 {
				out[i] = backend.BF16ToF32(x)
			} else {
				out[i] = backend.F16ToF32(x)
			}
		}
	case backend.I32:
		u := make([]int32, n)
		h.be.Download(backend.AsBytes(u), r)
		for i, x := range u {
			out[i] = float32(x)
		}
	}
	return out
}

// opCase runs one backend op on host inputs and returns its outputs.
type opCase struct {
	name string
	tol  float64 // normwise; 0 means bit for bit
	bf16 bool    // BF16 storage: the CPU reference runs in F32 on rounded inputs
	run  func(h host) [][]float32
}

// backendOpCases are the backend's ops on random inputs, in shapes that
// are not multiples of any block size, with sizes of one where they make
// sense. The same cases run on the CPU and the device under test.
func backendOpCases(seed uint64) []opCase {
	r := rand.New(rand.NewPCG(seed, 7))
	rnd := func(n int) []float32 { return randF32(r, n) }
	pos := func(n int) []float32 {
		v := rnd(n)
		for i := range v {
			v[i] = float32(math.Abs(float64(v[i]))) + 0.1
		}
		return v
	}
	ids := func(n, v int) []float32 {
		out := make([]float32, n)
		for i := range out {
			out[i] = float32(r.IntN(v))
		}
		return out
	}
	var cases []opCase
	add := func(name string, tol float64, run func(h host) [][]float32) {
		cases = append(cases, opCase{name, tol, tol == 1e-2, run})
	}
	for _, n := range []int{1, 1000, 4099} {
		a, b, c := rnd(n), rnd(n), pos(n)
		for _, dt := range []backend.DType{backend.F32, backend.BF16} {
			tol := 1e-6
			if dt == backend.BF16 {
				tol = 1e-2
			}
			for op := backend.Add; op <= backend.Div; op++ {
				add(fmt.Sprintf("binary %d %v n=%d", op, dt, n), tol, func(h host) [][]float32 {
					d := h.up(dt, a)
					h.be.Binary(op, d, h.up(dt, a), h.up(dt, c), n)
					return [][]float32{h.down(d, n)}
				})
			}
			add(fmt.Sprintf("dropout add %v n=%d", dt, n), tol, func(h host) [][]float32 {
				m := backend.NewDropoutMask(uint64(n)*7, 5, int64(n)*3+1, 0.4)
				d, e := h.up(dt, a), h.up(dt, a)
				h.be.DropoutAdd(d, h.up(dt, b), h.up(dt, c), n, m)
				h.be.DropoutAdd(e, backend.Ref{}, h.up(dt, c), n, m)
				return [][]float32{h.down(d, n), h.down(e, n)}
			})
			add(fmt.Sprintf("axpy scale gelu %v n=%d", dt, n), max(tol, 1e-5), func(h host) [][]float32 {
				d, x := h.up(dt, a), h.up(dt, b)
				h.be.Axpy(d, x, 0.75, n)
				s := h.up(dt, a)
				h.be.Scale(s, x, -1.5, n)
				g, gb := h.up(dt, a), h.up(dt, a)
				h.be.GELU(g, x, n)
				h.be.GELUBackward(gb, x, h.up(dt, c), n)
				return [][]float32{h.down(d, n), h.down(s, n), h.down(g, n), h.down(gb, n)}
			})
		}
		for _, op := range []backend.UnaryOp{backend.Neg, backend.Exp, backend.Log, backend.Tanh, backend.Sqrt} {
			add(fmt.Sprintf("unary %d n=%d", op, n), 1e-6, func(h host) [][]float32 {
				d := h.up(backend.F32, a)
				h.be.Unary(op, d, h.up(backend.F32, c), n)
				return [][]float32{h.down(d, n)}
			})
		}
		ids50, ids1000, grad := ids(n, 50), ids(n, 1000), rnd(n)
		add(fmt.Sprintf("fill cast copy n=%d", n), 0, func(h host) [][]float32 {
			f, fb, fi := h.up(backend.F32, a), h.up(backend.BF16, a), h.up(backend.I32, ids50)
			h.be.Fill(f, 0.3, n)
			h.be.Fill(fb, -2.7, n)
			h.be.Fill(fi, 7, n)
			var outs [][]float32
			for _, tr := range [][2]backend.DType{{backend.F32, backend.BF16}, {backend.BF16, backend.F32}, {backend.F32, backend.F16}, {backend.F16, backend.F32}, {backend.I32, backend.F32}} {
				src := h.up(tr[0], b)
				if tr[0] == backend.I32 {
					src = h.up(tr[0], ids1000)
				}
				d := h.up(tr[1], a)
				h.be.Cast(d, src, n)
				outs = append(outs, h.down(d, n))
			}
			cp := h.up(backend.F32, a)
			h.be.Copy(cp, h.up(backend.F32, b), n)
			return append(outs, h.down(f, n), h.down(fb, n), h.down(fi, n), h.down(cp, n))
		})
		add(fmt.Sprintf("sum of squares n=%d", n), 1e-5, func(h host) [][]float32 {
			d, e := h.up(backend.F32, []float32{0.5}), h.up(backend.F32, []float32{0.5})
			h.be.SumSquares(d, h.up(backend.F32, a), n, 1)
			h.be.SumSquares(e, h.up(backend.F32, a), n, 0)
			return [][]float32{h.down(d, 1), h.down(e, 1)}
		})
		add(fmt.Sprintf("adamw n=%d", n), 1e-6, func(h host) [][]float32 {
			w, m, v := h.up(backend.F32, a), h.up(backend.F32, b), h.up(backend.F32, c)
			h.be.AdamW(backend.AdamW{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3}, w, h.up(backend.F32, grad), m, v, n)
			return [][]float32{h.down(w, n), h.down(m, n), h.down(v, n)}
		})
	}
	for _, sh := range [][2]int{{1, 1}, {3, 70}, {37, 129}, {300, 33}} {
		rows, cols := sh[0], sh[1]
		x, dy, w, bb := rnd(rows*cols), rnd(rows*cols), rnd(cols), rnd(cols)
		for _, dt := range []backend.DType{backend.F32, backend.BF16} {
			tol := 1e-5
			if dt == backend.BF16 {
				tol = 1e-2
			}
			add(fmt.Sprintf("softmax %v %dx%d", dt, rows, cols), tol, func(h host) [][]float32 {
				y, dx := h.up(dt, x), h.up(dt, x)
				h.be.Softmax(y, h.up(dt, x), rows, cols)
				h.be.SoftmaxBackward(dx, y, h.up(dt, dy), rows, cols)
				return [][]float32{h.down(y, rows*cols), h.down(dx, rows*cols)}
			})
			for _, withBias := range []bool{false, true} {
				add(fmt.Sprintf("layer norm %v %dx%d bias=%v", dt, rows, cols, withBias), tol, func(h host) [][]float32 {
					xr := h.up(dt, x)
					out, mean, rstd := h.up(dt, x), h.up(backend.F32, x[:rows]), h.up(backend.F32, x[:rows])
					var br, dbr backend.Ref
					if withBias {
						br, dbr = h.up(backend.F32, bb), h.up(backend.F32, bb)
					}
					wr := h.up(backend.F32, w)
					h.be.LayerNorm(out, mean, rstd, xr, wr, br, rows, cols, 1e-5)
					dx, dw := h.up(dt, x), h.up(backend.F32, w) // dw and db accumulate
					var res backend.Ref                         // with a bias, a gradient gathered before is added too
					if withBias {
						res = h.up(dt, x)
					}
					var drop backend.DropoutOut // and the masked gradient of a dropout
					if withBias {
						drop = backend.DropoutOut{Dst: h.up(dt, x), Mask: backend.NewDropoutMask(uint64(rows*cols), 1, 6, 0.2)}
					}
					h.be.LayerNormBackward(dx, res, dw, dbr, h.up(dt, dy), xr, mean, rstd, wr, rows, cols, drop)
					o := [][]float32{h.down(out, rows*cols), h.down(mean, rows), h.down(rstd, rows), h.down(dx, rows*cols), h.down(dw, cols)}
					if withBias {
						o = append(o, h.down(dbr, cols), h.down(drop.Dst, rows*cols))
					}
					return o
				})
			}
		}
		add(fmt.Sprintf("sum rows cols %dx%d", rows, cols), 1e-5, func(h host) [][]float32 {
			d0, d1, dc := h.up(backend.F32, w), h.up(backend.F32, w), h.up(backend.F32, x[:rows])
			h.be.SumRows(d0, h.up(backend.F32, x), rows, cols, 0)
			h.be.SumRows(d1, h.up(backend.F32, x), rows, cols, 0.5)
			h.be.SumCols(dc, h.up(backend.F32, x), rows, cols, -1.5)
			return [][]float32{h.down(d0, cols), h.down(d1, cols), h.down(dc, rows)}
		})
		tg := ids(rows, cols)
		tg[0] = -1 // an ignored row
		add(fmt.Sprintf("cross entropy %dx%d", rows, cols), 1e-5, func(h host) [][]float32 {
			logits, t := h.up(backend.F32, x), h.up(backend.I32, tg)
			losses, lse := h.up(backend.F32, x[:rows]), h.up(backend.F32, x[:rows])
			h.be.CrossEntropy(losses, lse, logits, t, rows, cols)
			d := h.up(backend.F32, x)
			h.be.CrossEntropyBackward(d, logits, lse, t, h.up(backend.F32, []float32{0.7}), 1/float32(rows), rows, cols)
			return [][]float32{h.down(losses, rows), h.down(lse, rows), h.down(d, rows*cols)}
		})
		for _, dt := range []backend.DType{backend.F32, backend.BF16} {
			tol := 1e-5
			if dt == backend.BF16 {
				tol = 1e-2
			}
			add(fmt.Sprintf("cross entropy fused %v %dx%d", dt, rows, cols), tol, func(h host) [][]float32 {
				logits, t := h.up(dt, x), h.up(backend.I32, tg) // the gradient over the logits
				losses := h.up(backend.F32, x[:rows])
				h.be.CrossEntropyFused(losses, logits, logits, t, h.up(backend.F32, []float32{0.7}), 1/float32(rows), rows, cols)
				return [][]float32{h.down(losses, rows), h.down(logits, rows*cols)}
			})
		}
		vocab := cols
		emb, tv, ov, dtv, gv := ids(rows, vocab), rnd(vocab*24), rnd(rows*24), rnd(vocab*24), rnd(rows*24)
		add(fmt.Sprintf("embedding %d ids into %dx%d", rows, vocab, 24), 1e-6, func(h host) [][]float32 {
			table, i := h.up(backend.F32, tv), h.up(backend.I32, emb)
			out := h.up(backend.F32, ov)
			h.be.Embedding(out, table, i, rows, 24)
			dt := h.up(backend.F32, dtv) // accumulates
			h.be.EmbeddingBackward(dt, h.up(backend.F32, gv), i, rows, 24)
			return [][]float32{h.down(out, rows*24), h.down(dt, vocab*24)}
		})
	}
	dropped := backend.Attention{B: 2, T: 19, C: 24, H: 3, Drop: backend.NewDropoutMask(0xabc, 9, 4*3*19*19, 0.25)} // the masks the CPU draws
	for _, p := range []backend.Attention{{B: 1, T: 1, C: 8, H: 1}, {B: 2, T: 19, C: 24, H: 3}, {B: 1, T: 70, C: 32, H: 2}, dropped} {
		qkv, dout, sv := rnd(p.B*p.T*3*p.C), rnd(p.B*p.T*p.C), rnd(p.SavedLen())
		for _, dt := range []backend.DType{backend.F32, backend.BF16} {
			tol := 1e-5
			if dt == backend.BF16 {
				tol = 1e-2
			}
			add(fmt.Sprintf("attention %v %+v", dt, p), tol, func(h host) [][]float32 {
				q := h.up(dt, qkv)
				out, saved := h.up(dt, dout), h.up(backend.F32, sv)
				h.be.Attention(p, out, saved, q)
				d := h.up(dt, qkv)
				h.be.AttentionBackward(p, d, h.up(dt, dout), out, saved, q)
				return [][]float32{h.down(out, len(dout)), h.down(saved, p.SavedLen()), h.down(d, len(qkv))}
			})
		}
		kv := backend.AttentionKV{B: p.B, T: p.T, C: p.C, H: p.H, Pos: 3, MaxT: p.T + 5}
		cache := rnd(p.B * kv.MaxT * p.C)
		add(fmt.Sprintf("attention kv %+v", kv), 1e-5, func(h host) [][]float32 {
			kc, vc := h.up(backend.F32, cache), h.up(backend.F32, cache)
			out := h.up(backend.F32, dout)
			h.be.AttentionKV(kv, out, h.up(backend.F32, qkv), kc, vc)
			return [][]float32{h.down(out, len(dout)), h.down(kc, len(cache)), h.down(vc, len(cache))}
		})
	}
	for _, sh := range [][3]int{{1, 1, 1}, {17, 33, 9}, {64, 100, 48}} {
		m, n, k := sh[0], sh[1], sh[2]
		a, b, c, bias := rnd(m*k), rnd(k*n), rnd(m*n), rnd(n)
		for _, beta := range []float32{0, 0.5} {
			add(fmt.Sprintf("matmul bias %dx%dx%d beta=%v", m, n, k, beta), 1e-5, func(h host) [][]float32 {
				cr := h.up(backend.F32, c)
				h.be.MatMul(backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1, Beta: beta}, h.up(backend.F32, a), h.up(backend.F32, b), cr, h.up(backend.F32, bias))
				return [][]float32{h.down(cr, m*n)}
			})
		}
		for _, round := range []backend.DType{0, backend.BF16} {
			// GELU and its gradient in the product's epilogue; the CPU,
			// which has none, runs the product and the GELU kernels.
			add(fmt.Sprintf("matmul gelu round %v %dx%dx%d", round, m, n, k), 1e-5, func(h host) [][]float32 {
				// b serves as B stored n×k (read transposed), then as B stored k×n.
				p := backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1, TransB: true, Round: round}
				pg := backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1, Round: round}
				out, pre, dpre := h.up(backend.F32, c), h.up(backend.F32, c), h.up(backend.F32, c)
				ar, br, dy := h.up(backend.F32, a), h.up(backend.F32, b), h.up(backend.F32, a)
				if gp, ok := h.be.(backend.GELUProducts); ok && gp.GELUEpilogues() {
					gp.MatMulGELU(p, ar, br, out, pre, h.up(backend.F32, bias))
					gp.MatMulGELUGrad(pg, dy, br, dpre, pre)
				} else {
					h.be.MatMul(p, ar, br, pre, h.up(backend.F32, bias))
					h.be.GELU(out, pre, m*n)
					h.be.MatMul(pg, dy, br, dpre, backend.Ref{})
					h.be.GELUBackward(dpre, pre, dpre, m*n)
				}
				return [][]float32{h.down(out, m*n), h.down(pre, m*n), h.down(dpre, m*n)}
			})
		}
		// bf16 activations in a batch of two with gaps between C's items
		// (strided, as a view would be): the gaps keep what they held.
		sc := m*n + 3
		a2, b2, c2 := rnd(2*m*k), rnd(2*k*n), make([]float32, 2*sc)
		for i := range c2 {
			c2[i] = -1
		}
		add(fmt.Sprintf("matmul bf16 batched gapped %dx%dx%d", m, n, k), 1e-2, func(h host) [][]float32 {
			cr := h.up(backend.BF16, c2)
			h.be.MatMul(backend.MatMul{Batch: 2, M: m, N: n, K: k, Alpha: 1, StrideA: m * k, StrideB: k * n, StrideC: sc},
				h.up(backend.BF16, a2), h.up(backend.BF16, b2), cr, backend.Ref{})
			return [][]float32{h.down(cr, 2*sc)}
		})
		for _, round := range []backend.DType{backend.BF16, backend.F16} {
			// F32 operands rounded within the product; the CPU casts them.
			add(fmt.Sprintf("matmul round %v %dx%dx%d", round, m, n, k), 1e-5, func(h host) [][]float32 {
				cr := h.up(backend.F32, c)
				h.be.MatMul(backend.MatMul{Batch: 1, M: m, N: n, K: k, Alpha: 1, Beta: 1, TransB: true, Round: round}, h.up(backend.F32, a), h.up(backend.F32, b), cr, backend.Ref{})
				return [][]float32{h.down(cr, m*n)}
			})
		}
	}
	return cases
}

// checkBackendOps runs every case on be and on the CPU backend and
// compares the outputs.
func checkBackendOps(t *testing.T, be backend.Backend) { checkOpCases(t, be, backendOpCases(1)) }

// checkOpCases runs cases on be and on the CPU backend and compares the
// outputs.
func checkOpCases(t *testing.T, be backend.Backend, cases []opCase) {
	ref := host{be: cpu.New(backend.CPU)}
	dev := host{be: be}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := c.run(host{be: ref.be, asF32: c.bf16})
			var got [][]float32
			if err := deviceError(func() { got = c.run(dev) }); err != nil {
				t.Fatal(err)
			}
			for i := range want {
				if c.tol == 0 {
					for j := range want[i] {
						if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
							t.Errorf("output %d differs at %d: %v, want %v", i, j, got[i][j], want[i][j])
							break
						}
					}
					continue
				}
				if err := closeTo(got[i], want[i], c.tol); err != nil {
					t.Errorf("output %d: %v", i, err)
				}
			}
		})
	}
}

// TestOpsOnEmulatedDevice holds every backend op, as the backend issues
// it, to the CPU backend on the emulated device.
func TestOpsOnEmulatedDevice(t *testing.T) {
	be, err := backend.Get(emulatedDevice(t, 4))
	if err != nil {
		t.Fatal(err)
	}
	checkBackendOps(t, be)
}

package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// rowGrain picks a chunk of rows worth about 16K elements of work.
func rowGrain(cols int) int { return max(1, elemGrain/max(cols, 1)) }

// Softmax implements backend.Backend: a numerically stable softmax over
// each row, in one goroutine per chunk of rows.
func (c *CPU) Softmax(dst, src backend.Ref, rows, cols int) {
	d, s := f32(dst)[:rows*cols], f32(src)[:rows*cols]
	c.parallelFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			softmaxRow(d[r*cols:(r+1)*cols], s[r*cols:(r+1)*cols])
		}
	})
}

func softmaxRow(d, s []float32) {
	m := float32(math.Inf(-1))
	for _, v := range s {
		m = max(m, v)
	}
	for j, v := range s {
		d[j] = v - m
	}
	expChunk(d, d)
	var sum float32
	for _, e := range d {
		sum += e
	}
	inv := 1 / sum
	for j := range d {
		d[j] *= inv
	}
}

// SoftmaxBackward implements backend.Backend.
func (c *CPU) SoftmaxBackward(dx, y, dy backend.Ref, rows, cols int) {
	d, ys, g := f32(dx)[:rows*cols], f32(y)[:rows*cols], f32(dy)[:rows*cols]
	c.parallelFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			yr, gr, dr := ys[r*cols:(r+1)*cols], g[r*cols:(r+1)*cols], d[r*cols:(r+1)*cols]
			var dot float32
			for j := range yr {
				dot += yr[j] * gr[j]
			}
			for j := range yr {
				dr[j] = yr[j] * (gr[j] - dot)
			}
		}
	})
}

// LayerNorm implements backend.Backend. Mean and variance are computed in
// two passes over each row, in float32.
func (c *CPU) LayerNorm(out, mean, rstd, x, w, b backend.Ref, rows, cols int, eps float32) {
	o, xs, ws := f32(out)[:rows*cols], f32(x)[:rows*cols], f32(w)[:cols]
	ms, rs := f32(mean)[:rows], f32(rstd)[:rows]
	var bs []float32
	if !b.Nil() {
		bs = f32(b)[:cols]
	}
	c.parallelFor(rows, rowGrain(cols), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			ms[r], rs[r] = lnForwardRow(o[r*cols:(r+1)*cols], xs[r*cols:(r+1)*cols], ws, bs, eps)
		}
	})
}

// The LayerNorm row kernels, replaced by SIMD versions (layernorm_amd64.s)
// where the CPU has them.
var (
	lnForwardRow  = lnForwardRowGo
	lnBackwardRow = lnBackwardRowGo
)

// lnForwardRowGo normalises one row: out = (x − mean)·rstd·w (+ b).
func lnForwardRowGo(or, xr, ws, bs []float32, eps float32) (m, rsd float32) {
	n := float32(len(xr))
	var sum float32
	for _, v := range xr {
		sum += v
	}
	m = sum / n
	var sq float32
	for _, v := range xr {
		d := v - m
		sq += d * d
	}
	rsd = float32(1 / math.Sqrt(float64(sq/n+eps)))
	for j, v := range xr {
		y := (v - m) * rsd * ws[j]
		if bs != nil {
			y += bs[j]
		}
		or[j] = y
	}
	return m, rsd
}

// lnBackwardRowGo writes one row of dx and adds the row's share of dw and
// db into the partial sums pw and pb:
// dx = rstd·(g·w − mean(g·w) − x̂·mean(g·w·x̂)).
func lnBackwardRowGo(dr, xr, gr, ws, pw, pb []float32, m, rsd float32) {
	n := float32(len(xr))
	var s1, s2 float32
	for j, v := range xr {
		xhat := (v - m) * rsd
		gw := gr[j] * ws[j]
		s1 += gw
		s2 += gw * xhat
		pw[j] += gr[j] * xhat
		pb[j] += gr[j]
	}
	s1 /= n
	s2 /= n
	for j, v := range xr {
		xhat := (v - m) * rsd
		dr[j] = rsd * (gr[j]*ws[j] - s1 - xhat*s2)
	}
}

// lnChunk is the fixed number of rows whose dw/db partial sums one task
// forms; partials are then added in chunk order, so the sums do not depend
// on the thread count.
const lnChunk = 64

// LayerNormBackward implements backend.Backend.
func (c *CPU) LayerNormBackward(dx, dw, db, dout, x, mean, rstd, w backend.Ref, rows, cols int) {
	dxs, gs, xs, ws := f32(dx)[:rows*cols], f32(dout)[:rows*cols], f32(x)[:rows*cols], f32(w)[:cols]
	ms, rs := f32(mean)[:rows], f32(rstd)[:rows]
	chunks := (rows + lnChunk - 1) / lnChunk
	buf := getScratch(2 * chunks * cols)
	defer scratchPool.Put(buf)
	clear(*buf)
	partW, partB := (*buf)[:chunks*cols], (*buf)[chunks*cols:]
	c.parallelFor(chunks, 1, func(lo, hi int) {
		for ch := lo; ch < hi; ch++ {
			pw, pb := partW[ch*cols:(ch+1)*cols], partB[ch*cols:(ch+1)*cols]
			for r := ch * lnChunk; r < min(rows, (ch+1)*lnChunk); r++ {
				lnBackwardRow(dxs[r*cols:(r+1)*cols], xs[r*cols:(r+1)*cols], gs[r*cols:(r+1)*cols], ws, pw, pb, ms[r], rs[r])
			}
		}
	})
	dws := f32(dw)[:cols]
	for ch := 0; ch < chunks; ch++ {
		axpy(dws, partW[ch*cols:(ch+1)*cols], 1)
	}
	if !db.Nil() {
		dbs := f32(db)[:cols]
		for ch := 0; ch < chunks; ch++ {
			axpy(dbs, partB[ch*cols:(ch+1)*cols], 1)
		}
	}
}

// CrossEntropy implements backend.Backend. Each row's exponentials go
// through the vectorised exp; their sum is accumulated in float64.
func (c *CPU) CrossEntropy(losses, lse, logits, targets backend.Ref, n, v int) {
	ls, lz, xs, ts := f32(losses)[:n], f32(lse)[:n], f32(logits)[:n*v], i32(targets)[:n]
	c.parallelFor(n, rowGrain(v), func(lo, hi int) {
		buf := getScratch(v)
		defer scratchPool.Put(buf)
		tmp := *buf
		for r := lo; r < hi; r++ {
			row := xs[r*v : (r+1)*v]
			m := float32(math.Inf(-1))
			for _, x := range row {
				m = max(m, x)
			}
			for j, x := range row {
				tmp[j] = x - m
			}
			expChunk(tmp, tmp)
			var sum float64
			for _, e := range tmp {
				sum += float64(e)
			}
			z := m + float32(math.Log(sum))
			lz[r] = z
			t := int(ts[r])
			if t < 0 || t >= v {
				ls[r] = 0
				continue
			}
			ls[r] = z - row[t]
		}
	})
}

// CrossEntropyBackward implements backend.Backend.
func (c *CPU) CrossEntropyBackward(dlogits, logits, lse, targets, dloss backend.Ref, scale float32, n, v int) {
	d, xs, lz, ts := f32(dlogits)[:n*v], f32(logits)[:n*v], f32(lse)[:n], i32(targets)[:n]
	s := f32(dloss)[0] * scale
	c.parallelFor(n, rowGrain(v), func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, dr := xs[r*v:(r+1)*v], d[r*v:(r+1)*v]
			t := int(ts[r])
			if t < 0 || t >= v {
				clear(dr)
				continue
			}
			z := lz[r]
			for j, x := range row {
				dr[j] = x - z
			}
			expChunk(dr, dr)
			for j := range dr {
				dr[j] *= s
			}
			dr[t] -= s
		}
	})
}

// Embedding implements backend.Backend.
func (c *CPU) Embedding(out, table, ids backend.Ref, n, dim int) {
	o, tb, is := f32(out)[:n*dim], f32(table), i32(ids)[:n]
	c.parallelFor(n, rowGrain(dim), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			id := int(is[i])
			copy(o[i*dim:(i+1)*dim], tb[id*dim:(id+1)*dim])
		}
	})
}

// EmbeddingBackward implements backend.Backend. Columns are split among
// tasks and each task adds the rows in token order, so repeated ids add in
// a fixed order.
func (c *CPU) EmbeddingBackward(dtable, dout, ids backend.Ref, n, dim int) {
	dt, g, is := f32(dtable), f32(dout)[:n*dim], i32(ids)[:n]
	c.parallelFor(dim, 32, func(lo, hi int) {
		for i := 0; i < n; i++ {
			id := int(is[i])
			axpy(dt[id*dim+lo:id*dim+hi], g[i*dim+lo:i*dim+hi], 1)
		}
	})
}

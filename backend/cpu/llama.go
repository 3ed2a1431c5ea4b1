package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// The kernels of Llama-style blocks (backend.LlamaBlocks): RMSNorm and its
// fused residual add, rotary embeddings with QK-norm, SwiGLU, and ReLU².
// Each is a pass over rows (ReLU²: over elements), one goroutine per
// range, in float32; the weights' gradients are summed per fixed chunk of
// rows and the chunks added in order, so the bits do not depend on the
// thread count. BF16 operands widen (widen.go).

var _ backend.LlamaBlocks = (*CPU)(nil)

// RMSNorm implements backend.LlamaBlocks.
func (c *CPU) RMSNorm(out, rstd, x, w backend.Ref, rows, cols int, eps float32) {
	if anyBF16(out, x) {
		wd := widening{c: c}
		xs := wd.in(x, rows*cols)
		c.RMSNorm(wd.out(out, rows*cols), rstd, xs, w, rows, cols, eps)
		wd.done()
		return
	}
	runTask(c, &rmsNormTasks, rows, rowGrain(cols), rmsNormTask{
		o: f32(out)[:rows*cols], xs: f32(x)[:rows*cols], ws: f32(w)[:cols], rs: f32(rstd)[:rows], cols: cols, eps: eps,
	})
}

// rmsNormTask is one RMSNorm call; a range is a range of rows.
type rmsNormTask struct {
	o, xs, ws, rs []float32
	cols          int
	eps           float32
}

var rmsNormTasks taskPool[rmsNormTask]

func (t *rmsNormTask) do(lo, hi int) {
	cols := t.cols
	for r := lo; r < hi; r++ {
		t.rs[r] = rmsForwardRow(t.o[r*cols:(r+1)*cols], t.xs[r*cols:(r+1)*cols], t.ws, t.eps)
	}
}

// The row kernels, portable here; llama_amd64.go swaps in AVX2 ones
// where the row's width allows.
var (
	rmsForwardRow  = rmsForwardRowGo
	rmsBackwardRow = rmsBackwardRowGo
	rotate         = rotateGo
)

// rmsForwardRowGo normalises one row, out = x·rstd·w, and returns rstd.
func rmsForwardRowGo(or, xr, ws []float32, eps float32) float32 {
	var ss float32
	for _, v := range xr {
		ss += v * v
	}
	rsd := float32(1 / math.Sqrt(float64(ss/float32(len(xr))+eps)))
	for j, v := range xr {
		or[j] = v * rsd * ws[j]
	}
	return rsd
}

// rmsBackwardRowGo writes one row of dx and adds the row's share of dw
// into the partial sum pw: dx = rstd·(g·w − x̂·mean(g·w·x̂)), x̂ = x·rstd.
func rmsBackwardRowGo(dr, xr, gr, ws, pw []float32, rsd float32) {
	var s float32
	for j, v := range xr {
		xhat := v * rsd
		s += gr[j] * ws[j] * xhat
		pw[j] += gr[j] * xhat
	}
	s /= float32(len(xr))
	for j, v := range xr {
		dr[j] = rsd * (gr[j]*ws[j] - v*rsd*s)
	}
}

// AddRMSNorm implements backend.LlamaBlocks: the two ops one after the
// other, as AddLayerNorm.
func (c *CPU) AddRMSNorm(sum, out, rstd, x, y, w backend.Ref, rows, cols int, eps float32, m backend.DropoutMask) {
	c.DropoutAdd(sum, x, y, rows*cols, m)
	c.RMSNorm(out, rstd, sum, w, rows, cols, eps)
}

// RMSNormBackward implements backend.LlamaBlocks.
func (c *CPU) RMSNormBackward(dx, dres, dw, dout, x, rstd, w backend.Ref, rows, cols int, drop backend.DropoutOut) {
	if anyBF16(dx, dres, dout, x, drop.Dst) {
		n := rows * cols
		wd := widening{c: c}
		dres32, dout32, x32 := wd.in(dres, n), wd.in(dout, n), wd.in(x, n)
		c.RMSNormBackward(wd.out(dx, n), dres32, dw, dout32, x32, rstd, w, rows, cols, backend.DropoutOut{})
		wd.done()
		if !drop.Dst.Nil() {
			c.DropoutAdd(drop.Dst, backend.Ref{}, dx, n, drop.Mask)
		}
		return
	}
	chunks := (rows + lnChunk - 1) / lnChunk
	buf := lnScratch.get(chunks * cols)
	defer lnScratch.put(buf)
	part := (*buf)[:chunks*cols]
	clear(part)
	t := rmsNormBackwardTask{
		dxs: f32(dx)[:rows*cols], gs: f32(dout)[:rows*cols], xs: f32(x)[:rows*cols], ws: f32(w)[:cols],
		rs: f32(rstd)[:rows], part: part, rows: rows, cols: cols,
	}
	t.normGradTail = newNormGradTail(dres, drop, rows*cols)
	runTask(c, &rmsNormBackwardTasks, chunks, 1, t)
	dws := f32(dw)[:cols]
	for ch := 0; ch < chunks; ch++ {
		axpy(dws, part[ch*cols:(ch+1)*cols], 1)
	}
}

// rmsNormBackwardTask is one RMSNormBackward call; a range is a range of
// lnChunk-row chunks, each with its own dw partial sum.
type rmsNormBackwardTask struct {
	dxs, gs, xs, ws, rs, part []float32
	rows, cols                int
	normGradTail
}

var rmsNormBackwardTasks taskPool[rmsNormBackwardTask]

func (t *rmsNormBackwardTask) do(lo, hi int) {
	cols := t.cols
	for ch := lo; ch < hi; ch++ {
		pw := t.part[ch*cols : (ch+1)*cols]
		for r := ch * lnChunk; r < min(t.rows, (ch+1)*lnChunk); r++ {
			dr := t.dxs[r*cols : (r+1)*cols]
			rmsBackwardRow(dr, t.xs[r*cols:(r+1)*cols], t.gs[r*cols:(r+1)*cols], t.ws, pw, t.rs[r])
			t.row(dr, r, cols)
		}
	}
}

// Rotary implements backend.LlamaBlocks, one goroutine per range of rows.
func (c *CPU) Rotary(p backend.Rotary, out, rstd, qkv, qw, kw, table backend.Ref) {
	n := p.B * p.T * p.Width()
	if anyBF16(out, qkv) {
		wd := widening{c: c}
		xs := wd.in(qkv, n)
		c.Rotary(p, wd.out(out, n), rstd, xs, qw, kw, table)
		wd.done()
		return
	}
	t := rotaryTask{p: p, o: f32(out)[:n], xs: f32(qkv)[:n], tab: f32(table)[:p.MaxPos*p.HD]}
	if !qw.Nil() {
		t.qw, t.kw, t.rs = f32(qw)[:p.HD], f32(kw)[:p.HD], f32(rstd)[:p.B*p.T*(p.H+p.KVH)]
	}
	runTask(c, &rotaryTasks, p.B*p.T, rowGrain(p.Width()), t)
}

// rotaryTask is one Rotary call or, as rotaryBackwardTask, one
// RotaryBackward call (o is dqkv, xs dout, ys the forward's qkv); a range
// is a range of rows.
type rotaryTask struct {
	p                          backend.Rotary
	o, xs, ys, tab, qw, kw, rs []float32
	part                       []float32 // backward: dqw's then dkw's partial sums, per chunk
}

type rotaryBackwardTask rotaryTask

var (
	rotaryTasks         taskPool[rotaryTask]
	rotaryBackwardTasks taskPool[rotaryBackwardTask]
)

// angles returns the cos and sin of row r's angles.
func (t *rotaryTask) angles(r int) (cos, sin []float32) {
	p, half := t.p, t.p.HD/2
	pos := p.Pos + r%p.T
	return t.tab[pos*half : (pos+1)*half], t.tab[(p.MaxPos+pos)*half : (p.MaxPos+pos+1)*half]
}

func (t *rotaryTask) do(lo, hi int) {
	p, w, hd := t.p, t.p.Width(), t.p.HD
	for r := lo; r < hi; r++ {
		cos, sin := t.angles(r)
		or, xr := t.o[r*w:(r+1)*w], t.xs[r*w:(r+1)*w]
		qk := (p.H + p.KVH) * hd
		copy(or[qk:], xr[qk:]) // v
		for head := 0; head < p.H+p.KVH; head++ {
			o, x := or[head*hd:(head+1)*hd], xr[head*hd:(head+1)*hd]
			if t.qw != nil {
				nw := t.qw
				if head >= p.H {
					nw = t.kw
				}
				t.rs[r*(p.H+p.KVH)+head] = rmsForwardRow(o, x, nw, p.Eps)
				x = o
			}
			rotate(o, x, cos, sin, 1)
		}
	}
}

// rotateGo turns one head's pairs (x[j], x[j+half]) by the angles whose
// cosines and sines are cos and sin, times sign: +1 is the forward
// rotation, −1 its transpose (the backward). o may be x.
func rotateGo(o, x, cos, sin []float32, sign float32) {
	half := len(cos)
	for j := 0; j < half; j++ {
		a, b, s := x[j], x[j+half], sign*sin[j]
		o[j], o[j+half] = a*cos[j]-b*s, b*cos[j]+a*s
	}
}

// RotaryBackward implements backend.LlamaBlocks. With QK-norm, dqw and
// dkw are summed per lnChunk rows and the chunks added in order.
func (c *CPU) RotaryBackward(p backend.Rotary, dqkv, dqw, dkw, dout, qkv, rstd, qw, kw, table backend.Ref) {
	n := p.B * p.T * p.Width()
	if anyBF16(dqkv, dout, qkv) {
		wd := widening{c: c}
		g, x := wd.in(dout, n), wd.in(qkv, n)
		c.RotaryBackward(p, wd.out(dqkv, n), dqw, dkw, g, x, rstd, qw, kw, table)
		wd.done()
		return
	}
	rows := p.B * p.T
	t := rotaryBackwardTask{p: p, o: f32(dqkv)[:n], xs: f32(dout)[:n], ys: f32(qkv)[:n], tab: f32(table)[:p.MaxPos*p.HD]}
	if qw.Nil() {
		runTask(c, &rotaryBackwardTasks, rows, rowGrain(p.Width()), t)
		return
	}
	t.qw, t.kw, t.rs = f32(qw)[:p.HD], f32(kw)[:p.HD], f32(rstd)[:rows*(p.H+p.KVH)]
	chunks := (rows + lnChunk - 1) / lnChunk
	buf := lnScratch.get(2 * chunks * p.HD)
	defer lnScratch.put(buf)
	t.part = (*buf)[:2*chunks*p.HD]
	clear(t.part)
	// A range is a range of chunks here.
	runTask(c, &rotaryBackwardTasks, chunks, 1, t)
	dq, dk := f32(dqw)[:p.HD], f32(dkw)[:p.HD]
	for ch := 0; ch < chunks; ch++ {
		axpy(dq, t.part[2*ch*p.HD:(2*ch+1)*p.HD], 1)
		axpy(dk, t.part[(2*ch+1)*p.HD:(2*ch+2)*p.HD], 1)
	}
}

var rotaryScratch scratch[float32] // one head's rotated gradient per goroutine

func (bt *rotaryBackwardTask) do(lo, hi int) {
	t := (*rotaryTask)(bt)
	if t.qw == nil {
		for r := lo; r < hi; r++ {
			t.backwardRow(r, nil, nil, nil)
		}
		return
	}
	hd := t.p.HD
	buf := rotaryScratch.get(hd)
	defer rotaryScratch.put(buf)
	for ch := lo; ch < hi; ch++ {
		pq, pk := t.part[2*ch*hd:(2*ch+1)*hd], t.part[(2*ch+1)*hd:(2*ch+2)*hd]
		for r := ch * lnChunk; r < min(t.p.B*t.p.T, (ch+1)*lnChunk); r++ {
			t.backwardRow(r, pq, pk, (*buf)[:hd])
		}
	}
}

// backwardRow writes row r of dqkv: each q and k head's gradient turned
// back through the rotation (its transpose), then, with QK-norm, through
// the norm, adding the weights' shares into pq and pk. With QK-norm the
// rotated gradient goes to gn, a head's width of scratch, since the norm's
// backward reads it whole before it writes dx.
func (t *rotaryTask) backwardRow(r int, pq, pk, gn []float32) {
	p, w, hd := t.p, t.p.Width(), t.p.HD
	cos, sin := t.angles(r)
	dr, gr := t.o[r*w:(r+1)*w], t.xs[r*w:(r+1)*w]
	qk := (p.H + p.KVH) * hd
	copy(dr[qk:], gr[qk:]) // v
	for head := 0; head < p.H+p.KVH; head++ {
		d, g := dr[head*hd:(head+1)*hd], gr[head*hd:(head+1)*hd]
		if t.qw == nil {
			rotate(d, g, cos, sin, -1)
			continue
		}
		rotate(gn, g, cos, sin, -1)
		nw, pw := t.qw, pq
		if head >= p.H {
			nw, pw = t.kw, pk
		}
		rmsBackwardRow(d, t.ys[r*w+head*hd:r*w+(head+1)*hd], gn, nw, pw, t.rs[r*(p.H+p.KVH)+head])
	}
}

// SwiGLU implements backend.LlamaBlocks.
func (c *CPU) SwiGLU(out, gu backend.Ref, rows, hidden int) {
	if anyBF16(out, gu) {
		wd := widening{c: c}
		g := wd.in(gu, 2*rows*hidden)
		c.SwiGLU(wd.out(out, rows*hidden), g, rows, hidden)
		wd.done()
		return
	}
	runTask(c, &swigluTasks, rows, rowGrain(3*hidden), swigluTask{o: f32(out)[:rows*hidden], gu: f32(gu)[:2*rows*hidden], hidden: hidden})
}

// swigluTask is one SwiGLU call or, as swigluBackwardTask, one
// SwiGLUBackward call (o is dgu, g dout); a range is a range of rows.
type swigluTask struct {
	o, gu, g []float32
	hidden   int
}

type swigluBackwardTask swigluTask

var (
	swigluTasks         taskPool[swigluTask]
	swigluBackwardTasks taskPool[swigluBackwardTask]
)

var swigluScratch scratch[float32] // a row's e^−gate per goroutine

// expNeg writes e[j] = exp(−x[j]) with the vectorised exp (expAffineChunk).
func expNeg(e, x []float32) { expAffineChunk(e, x, -1, 0) }

func (t *swigluTask) do(lo, hi int) {
	h := t.hidden
	buf := swigluScratch.get(h)
	defer swigluScratch.put(buf)
	e := (*buf)[:h]
	for r := lo; r < hi; r++ {
		o, gate, up := t.o[r*h:(r+1)*h], t.gu[2*r*h:2*r*h+h], t.gu[2*r*h+h:2*(r+1)*h]
		expNeg(e, gate)
		for j, g := range gate {
			o[j] = g / (1 + e[j]) * up[j] // silu(g) = g·σ(g), σ(g) = 1/(1+e^−g)
		}
	}
}

// SwiGLUBackward implements backend.LlamaBlocks:
// dgate = dout·up·σ(g)·(1 + g·(1 − σ(g))), dup = dout·silu(g).
func (c *CPU) SwiGLUBackward(dgu, gu, dout backend.Ref, rows, hidden int) {
	if anyBF16(dgu, gu, dout) {
		wd := widening{c: c}
		g, d := wd.in(gu, 2*rows*hidden), wd.in(dout, rows*hidden)
		c.SwiGLUBackward(wd.out(dgu, 2*rows*hidden), g, d, rows, hidden)
		wd.done()
		return
	}
	runTask(c, &swigluBackwardTasks, rows, rowGrain(3*hidden),
		swigluBackwardTask{o: f32(dgu)[:2*rows*hidden], gu: f32(gu)[:2*rows*hidden], g: f32(dout)[:rows*hidden], hidden: hidden})
}

func (t *swigluBackwardTask) do(lo, hi int) {
	h := t.hidden
	buf := swigluScratch.get(h)
	defer swigluScratch.put(buf)
	e := (*buf)[:h]
	for r := lo; r < hi; r++ {
		gate, up, g := t.gu[2*r*h:2*r*h+h], t.gu[2*r*h+h:2*(r+1)*h], t.g[r*h:(r+1)*h]
		dgate, dup := t.o[2*r*h:2*r*h+h], t.o[2*r*h+h:2*(r+1)*h]
		expNeg(e, gate)
		for j, x := range gate {
			s := 1 / (1 + e[j])
			dgate[j] = g[j] * up[j] * s * (1 + x*(1-s))
			dup[j] = g[j] * x * s
		}
	}
}

// ReLU2 implements backend.LlamaBlocks: out = max(x, 0)². Every kernel
// of it clamps by x < 0 (not max), so a NaN passes through on each
// backend alike.
func (c *CPU) ReLU2(out, x backend.Ref, n int) {
	if anyBF16(out, x) {
		wd := widening{c: c}
		xs := wd.in(x, n)
		c.ReLU2(wd.out(out, n), xs, n)
		wd.done()
		return
	}
	runTask(c, &relu2Tasks, n, elemGrain, relu2Task{o: f32(out)[:n], x: f32(x)[:n]})
}

// relu2Task is one ReLU2 call or, as relu2BackwardTask, one
// ReLU2Backward call (o is dx, g dout); a range is a range of elements.
type relu2Task struct{ o, x, g []float32 }

type relu2BackwardTask relu2Task

var (
	relu2Tasks         taskPool[relu2Task]
	relu2BackwardTasks taskPool[relu2BackwardTask]
)

func (t *relu2Task) do(lo, hi int) {
	o := t.o[lo:hi]
	for i, v := range t.x[lo:hi] {
		if v < 0 {
			v = 0
		}
		o[i] = v * v
	}
}

// ReLU2Backward implements backend.LlamaBlocks: dx = 2·max(x, 0)·dout.
func (c *CPU) ReLU2Backward(dx, x, dout backend.Ref, n int) {
	if anyBF16(dx, x, dout) {
		wd := widening{c: c}
		xs, ds := wd.in(x, n), wd.in(dout, n)
		c.ReLU2Backward(wd.out(dx, n), xs, ds, n)
		wd.done()
		return
	}
	runTask(c, &relu2BackwardTasks, n, elemGrain, relu2BackwardTask{o: f32(dx)[:n], x: f32(x)[:n], g: f32(dout)[:n]})
}

func (t *relu2BackwardTask) do(lo, hi int) {
	o, g := t.o[lo:hi], t.g[lo:hi]
	for i, v := range t.x[lo:hi] {
		if v < 0 {
			v = 0
		}
		o[i] = 2 * v * g[i]
	}
}

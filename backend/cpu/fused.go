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
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, rows*cols)
		c.Softmax(w.out(dst, rows*cols), s, rows, cols)
		w.done()
		return
	}
	runTask(c, &softmaxTasks, rows, rowGrain(cols), softmaxTask{f32(dst)[:rows*cols], f32(src)[:rows*cols], cols})
}

// softmaxTask is one Softmax call; a range is a range of rows.
type softmaxTask struct {
	d, s []float32
	cols int
}

var softmaxTasks taskPool[softmaxTask]

func (t *softmaxTask) do(lo, hi int) {
	d, s, cols := t.d, t.s, t.cols
	for r := lo; r < hi; r++ {
		softmaxRow(d[r*cols:(r+1)*cols], s[r*cols:(r+1)*cols])
	}
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
	if anyBF16(dx, y, dy) {
		w := widening{c: c}
		ys, dys := w.in(y, rows*cols), w.in(dy, rows*cols)
		c.SoftmaxBackward(w.out(dx, rows*cols), ys, dys, rows, cols)
		w.done()
		return
	}
	runTask(c, &softmaxBackwardTasks, rows, rowGrain(cols),
		softmaxBackwardTask{f32(dx)[:rows*cols], f32(y)[:rows*cols], f32(dy)[:rows*cols], cols})
}

// softmaxBackwardTask is one SoftmaxBackward call; a range is a range of rows.
type softmaxBackwardTask struct {
	d, ys, g []float32
	cols     int
}

var softmaxBackwardTasks taskPool[softmaxBackwardTask]

func (t *softmaxBackwardTask) do(lo, hi int) {
	d, ys, g, cols := t.d, t.ys, t.g, t.cols
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
}

// LayerNorm implements backend.Backend. Mean and variance are computed in
// two passes over each row, in float32.
func (c *CPU) LayerNorm(out, mean, rstd, x, w, b backend.Ref, rows, cols int, eps float32) {
	if anyBF16(out, x) {
		wd := widening{c: c}
		xs := wd.in(x, rows*cols)
		c.LayerNorm(wd.out(out, rows*cols), mean, rstd, xs, w, b, rows, cols, eps)
		wd.done()
		return
	}
	var bs []float32
	if !b.Nil() {
		bs = f32(b)[:cols]
	}
	runTask(c, &layerNormTasks, rows, rowGrain(cols), layerNormTask{
		o: f32(out)[:rows*cols], xs: f32(x)[:rows*cols], ws: f32(w)[:cols], bs: bs,
		ms: f32(mean)[:rows], rs: f32(rstd)[:rows], cols: cols, eps: eps,
	})
}

// layerNormTask is one LayerNorm call; a range is a range of rows.
type layerNormTask struct {
	o, xs, ws, bs, ms, rs []float32
	cols                  int
	eps                   float32
}

var layerNormTasks taskPool[layerNormTask]

func (t *layerNormTask) do(lo, hi int) {
	o, xs, ws, bs, ms, rs, cols, eps := t.o, t.xs, t.ws, t.bs, t.ms, t.rs, t.cols, t.eps
	for r := lo; r < hi; r++ {
		ms[r], rs[r] = lnForwardRow(o[r*cols:(r+1)*cols], xs[r*cols:(r+1)*cols], ws, bs, eps)
	}
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

// AddLayerNorm implements backend.Backend: the two ops it fuses, one
// after the other (the CPU's caches serve the second).
// For BF16 storage the LayerNorm reads the sum as stored, rounded to
// bf16, as the CUDA kernel does.
func (c *CPU) AddLayerNorm(sum, out, mean, rstd, x, y, w, b backend.Ref, rows, cols int, eps float32, m backend.DropoutMask) {
	c.DropoutAdd(sum, x, y, rows*cols, m)
	c.LayerNorm(out, mean, rstd, sum, w, b, rows, cols, eps)
}

// LayerNormBackward implements backend.Backend.
func (c *CPU) LayerNormBackward(dx, dres, dw, db, dout, x, mean, rstd, w backend.Ref, rows, cols int, drop backend.DropoutOut) {
	if anyBF16(dx, dres, dout, x, drop.Dst) {
		// dx is rounded to BF16 before the dropout's copy masks it, as
		// the copy masks dx as stored.
		n := rows * cols
		wd := widening{c: c}
		dres32, dout32, x32 := wd.in(dres, n), wd.in(dout, n), wd.in(x, n)
		c.LayerNormBackward(wd.out(dx, n), dres32, dw, db, dout32, x32, mean, rstd, w, rows, cols, backend.DropoutOut{})
		wd.done()
		if !drop.Dst.Nil() {
			c.DropoutAdd(drop.Dst, backend.Ref{}, dx, n, drop.Mask)
		}
		return
	}
	chunks := (rows + lnChunk - 1) / lnChunk
	buf := lnScratch.get(2 * chunks * cols)
	defer lnScratch.put(buf)
	clear(*buf)
	partW, partB := (*buf)[:chunks*cols], (*buf)[chunks*cols:]
	t := layerNormBackwardTask{
		dxs: f32(dx)[:rows*cols], gs: f32(dout)[:rows*cols], xs: f32(x)[:rows*cols], ws: f32(w)[:cols],
		ms: f32(mean)[:rows], rs: f32(rstd)[:rows], partW: partW, partB: partB, rows: rows, cols: cols,
	}
	t.normGradTail = newNormGradTail(dres, drop, rows*cols)
	runTask(c, &layerNormBackwardTasks, chunks, 1, t)
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

// layerNormBackwardTask is one LayerNormBackward call; a range is a
// range of lnChunk-row chunks, each with its own dw and db partial sums.
type layerNormBackwardTask struct {
	dxs, gs, xs, ws, ms, rs, partW, partB []float32
	rows, cols                            int
	normGradTail
}

// normGradTail is what a norm's backward pass writes besides dx: res,
// where not nil, is added to each row of dx once it is written (the
// residual stream's gradient); drop, where not nil, then gets the row
// masked by mask (the gradient of a dropout before the norm).
type normGradTail struct {
	res, drop []float32
	mask      backend.DropoutMask
}

// newNormGradTail is the tail of a backward pass over n elements: dres
// and drop.Dst may be Nil.
func newNormGradTail(dres backend.Ref, drop backend.DropoutOut, n int) normGradTail {
	var t normGradTail
	if !dres.Nil() {
		t.res = f32(dres)[:n]
	}
	if !drop.Dst.Nil() {
		t.drop, t.mask = f32(drop.Dst)[:n], drop.Mask
		if !t.mask.Base.Nil() {
			t.mask = t.mask.Resolved(i32(t.mask.Base)[:2])
		}
	}
	return t
}

// row finishes row r (cols wide) of dx, dr, once it is written.
func (t *normGradTail) row(dr []float32, r, cols int) {
	if t.res != nil {
		axpy(dr, t.res[r*cols:(r+1)*cols], 1)
	}
	if t.drop != nil {
		dropoutRow(t.drop[r*cols:(r+1)*cols], dr, t.mask, int64(r*cols))
	}
}

var (
	layerNormBackwardTasks taskPool[layerNormBackwardTask]
	lnScratch              scratch[float32] // a call's dw and db partial sums
)

func (t *layerNormBackwardTask) do(lo, hi int) {
	dxs, gs, xs, ws, ms, rs, rows, cols := t.dxs, t.gs, t.xs, t.ws, t.ms, t.rs, t.rows, t.cols
	for ch := lo; ch < hi; ch++ {
		pw, pb := t.partW[ch*cols:(ch+1)*cols], t.partB[ch*cols:(ch+1)*cols]
		for r := ch * lnChunk; r < min(rows, (ch+1)*lnChunk); r++ {
			dr := dxs[r*cols : (r+1)*cols]
			lnBackwardRow(dr, xs[r*cols:(r+1)*cols], gs[r*cols:(r+1)*cols], ws, pw, pb, ms[r], rs[r])
			t.row(dr, r, cols)
		}
	}
}

// CrossEntropy implements backend.Backend. Each row's exponentials go
// through the vectorised exp; their sum is accumulated in float64.
func (c *CPU) CrossEntropy(losses, lse, logits, targets backend.Ref, n, v int) {
	if isBF16(logits) {
		w := widening{c: c}
		c.CrossEntropy(losses, lse, w.in(logits, n*v), targets, n, v)
		w.done()
		return
	}
	runTask(c, &crossEntropyTasks, n, rowGrain(v),
		crossEntropyTask{f32(losses)[:n], f32(lse)[:n], f32(logits)[:n*v], i32(targets)[:n], v})
}

// crossEntropyTask is one CrossEntropy call; a range is a range of rows.
type crossEntropyTask struct {
	ls, lz, xs []float32
	ts         []int32
	v          int
}

var (
	crossEntropyTasks taskPool[crossEntropyTask]
	ceScratch         scratch[float32] // one row's exponentials per goroutine
)

func (ct *crossEntropyTask) do(lo, hi int) {
	ls, lz, xs, ts, v := ct.ls, ct.lz, ct.xs, ct.ts, ct.v
	buf := ceScratch.get(v)
	defer ceScratch.put(buf)
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
}

// CrossEntropyBackward implements backend.Backend.
func (c *CPU) CrossEntropyBackward(dlogits, logits, lse, targets, dloss backend.Ref, scale float32, n, v int) {
	if anyBF16(dlogits, logits) {
		w := widening{c: c}
		l := w.in(logits, n*v)
		c.CrossEntropyBackward(w.out(dlogits, n*v), l, lse, targets, dloss, scale, n, v)
		w.done()
		return
	}
	runTask(c, &crossEntropyBackwardTasks, n, rowGrain(v), crossEntropyBackwardTask{
		f32(dlogits)[:n*v], f32(logits)[:n*v], f32(lse)[:n], i32(targets)[:n], f32(dloss)[0] * scale, v,
	})
}

// crossEntropyBackwardTask is one CrossEntropyBackward call; a range is a
// range of rows.
type crossEntropyBackwardTask struct {
	d, xs, lz []float32
	ts        []int32
	s         float32
	v         int
}

var crossEntropyBackwardTasks taskPool[crossEntropyBackwardTask]

func (ct *crossEntropyBackwardTask) do(lo, hi int) {
	d, xs, lz, ts, s, v := ct.d, ct.xs, ct.lz, ct.ts, ct.s, ct.v
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
}

// CrossEntropyFused implements backend.Backend: each row's loss, then its
// gradient while the row is in cache, with CrossEntropy's and
// CrossEntropyBackward's arithmetic (so their values, bit for bit).
func (c *CPU) CrossEntropyFused(losses, dlogits, logits, targets, dloss backend.Ref, scale float32, n, v int) {
	if anyBF16(dlogits, logits) {
		w := widening{c: c}
		l := w.in(logits, n*v)
		c.CrossEntropyFused(losses, w.out(dlogits, n*v), l, targets, dloss, scale, n, v)
		w.done()
		return
	}
	runTask(c, &crossEntropyFusedTasks, n, rowGrain(v), crossEntropyFusedTask{
		crossEntropyTask{f32(losses)[:n], nil, f32(logits)[:n*v], i32(targets)[:n], v}, f32(dlogits)[:n*v], f32(dloss)[0] * scale,
	})
}

// crossEntropyFusedTask is one CrossEntropyFused call; a range is a range
// of rows.
type crossEntropyFusedTask struct {
	crossEntropyTask // lz nil: each row's log-sum-exp is passed on, not stored
	d                []float32
	s                float32
}

var crossEntropyFusedTasks taskPool[crossEntropyFusedTask]

func (ct *crossEntropyFusedTask) do(lo, hi int) {
	zb := ceScratch.get(1) // the row's log-sum-exp (pooled: a local array would escape)
	defer ceScratch.put(zb)
	z := (*zb)[:1]
	for r := lo; r < hi; r++ {
		f := crossEntropyTask{ct.ls[r : r+1], z, ct.xs[r*ct.v : (r+1)*ct.v], ct.ts[r : r+1], ct.v}
		f.do(0, 1)
		b := crossEntropyBackwardTask{ct.d[r*ct.v : (r+1)*ct.v], f.xs, z, f.ts, ct.s, ct.v}
		b.do(0, 1)
	}
}

// Embedding implements backend.Backend.
func (c *CPU) Embedding(out, table, ids backend.Ref, n, dim int) {
	if anyBF16(out, table) {
		w := widening{c: c}
		tb := w.in(table, extent(table))
		c.Embedding(w.out(out, n*dim), tb, ids, n, dim)
		w.done()
		return
	}
	runTask(c, &embeddingTasks, n, rowGrain(dim), embeddingTask{f32(out)[:n*dim], f32(table), i32(ids)[:n], dim})
}

// embeddingTask is one Embedding call (a range is a range of tokens) or,
// as embeddingBackwardTask, one EmbeddingBackward call (a range is a range
// of columns); o is out or dtable, tb is table or dout.
type embeddingTask struct {
	o, tb []float32
	is    []int32
	dim   int
}

type embeddingBackwardTask embeddingTask

var (
	embeddingTasks         taskPool[embeddingTask]
	embeddingBackwardTasks taskPool[embeddingBackwardTask]
)

func (t *embeddingTask) do(lo, hi int) {
	o, tb, is, dim := t.o, t.tb, t.is, t.dim
	for i := lo; i < hi; i++ {
		id := int(is[i])
		copy(o[i*dim:(i+1)*dim], tb[id*dim:(id+1)*dim])
	}
}

func (t *embeddingBackwardTask) do(lo, hi int) {
	dt, g, is, dim := t.o, t.tb, t.is, t.dim
	for i := range is {
		id := int(is[i])
		axpy(dt[id*dim+lo:id*dim+hi], g[i*dim+lo:i*dim+hi], 1)
	}
}

// EmbeddingBackward implements backend.Backend. Columns are split among
// tasks and each task adds the rows in token order, so repeated ids add in
// a fixed order.
func (c *CPU) EmbeddingBackward(dtable, dout, ids backend.Ref, n, dim int) {
	if anyBF16(dtable, dout) {
		w := widening{c: c}
		g := w.in(dout, n*dim)
		c.EmbeddingBackward(w.inout(dtable, extent(dtable)), g, ids, n, dim)
		w.done()
		return
	}
	runChunks(c, &embeddingBackwardTasks, dim, 32, embeddingBackwardTask{f32(dtable), f32(dout)[:n*dim], i32(ids)[:n], dim})
}

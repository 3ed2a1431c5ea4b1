package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// elemGrain is the elementwise kernels' grain. They run over
// parallelForChunks: their SIMD bodies leave each range's tail to Go code
// that need not round the same way (GELU's exp is a polynomial in SIMD,
// math.Exp in Go), so where ranges end must not depend on the thread count.
const elemGrain = 1 << 14

// Binary implements backend.Backend.
func (c *CPU) Binary(op backend.BinaryOp, dst, a, b backend.Ref, n int) {
	if anyBF16(dst, a, b) {
		w := widening{c: c}
		as, bs := w.in(a, n), w.in(b, n)
		c.Binary(op, w.out(dst, n), as, bs, n)
		w.done()
		return
	}
	runChunks(c, &binaryTasks, n, elemGrain, binaryTask{int(op), f32(dst)[:n], f32(a)[:n], f32(b)[:n]})
}

// binaryTask is one Binary call: d = x op y.
type binaryTask struct {
	op      int
	d, x, y []float32
}

var binaryTasks taskPool[binaryTask]

func (t *binaryTask) do(lo, hi int) { binaryChunk(t.op, t.d[lo:hi], t.x[lo:hi], t.y[lo:hi]) }

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
	if anyBF16(dst, x) {
		w := widening{c: c}
		xs := w.in(x, n)
		c.Axpy(w.inout(dst, n), xs, alpha, n)
		w.done()
		return
	}
	runChunks(c, &axpyTasks, n, elemGrain, axpyTask{f32(dst)[:n], f32(x)[:n], alpha})
}

// axpyTask is one Axpy call (d += alpha·s) or, as scaleTask, one Scale
// call (d = alpha·s).
type axpyTask struct {
	d, s  []float32
	alpha float32
}

type scaleTask axpyTask

var (
	axpyTasks  taskPool[axpyTask]
	scaleTasks taskPool[scaleTask]
)

func (t *axpyTask) do(lo, hi int)  { axpyChunk(t.d[lo:hi], t.s[lo:hi], t.alpha) }
func (t *scaleTask) do(lo, hi int) { scaleChunk(t.d[lo:hi], t.s[lo:hi], t.alpha) }

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
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, n)
		c.Scale(w.out(dst, n), s, alpha, n)
		w.done()
		return
	}
	runChunks(c, &scaleTasks, n, elemGrain, scaleTask{f32(dst)[:n], f32(src)[:n], alpha})
}

func scaleGo(d, s []float32, alpha float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] = alpha * s[i]
	}
}

// Unary implements backend.Backend.
func (c *CPU) Unary(op backend.UnaryOp, dst, src backend.Ref, n int) {
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, n)
		c.Unary(op, w.out(dst, n), s, n)
		w.done()
		return
	}
	runChunks(c, &unaryTasks, n, elemGrain, unaryTask{op, f32(dst)[:n], f32(src)[:n]})
}

// unaryTask is one Unary call.
type unaryTask struct {
	op   backend.UnaryOp
	d, s []float32
}

var unaryTasks taskPool[unaryTask]

func (t *unaryTask) do(lo, hi int) {
	op, d, s := t.op, t.d, t.s
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
}

// SumRows implements backend.Backend. Each output column is summed over
// all rows in order by one goroutine.
func (c *CPU) SumRows(dst, src backend.Ref, rows, cols int, beta float32) {
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, rows*cols)
		c.SumRows(w.dst(dst, cols, beta != 0), s, rows, cols, beta)
		w.done()
		return
	}
	runTask(c, &sumRowsTasks, cols, 64, sumRowsTask{f32(dst)[:cols], f32(src)[:rows*cols], rows, cols, beta})
}

// sumRowsTask is one SumRows call; a range is a range of columns.
type sumRowsTask struct {
	d, s       []float32
	rows, cols int
	beta       float32
}

var (
	sumRowsTasks   taskPool[sumRowsTask]
	sumRowsScratch scratch[float32] // one chunk's column sums per goroutine
)

func (t *sumRowsTask) do(lo, hi int) {
	d, s, rows, cols, beta := t.d, t.s, t.rows, t.cols, t.beta
	buf := sumRowsScratch.get(hi - lo)
	defer sumRowsScratch.put(buf)
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
}

// SumCols implements backend.Backend.
func (c *CPU) SumCols(dst, src backend.Ref, rows, cols int, alpha float32) {
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, rows*cols)
		c.SumCols(w.out(dst, rows), s, rows, cols, alpha)
		w.done()
		return
	}
	runTask(c, &sumColsTasks, rows, max(1, elemGrain/max(cols, 1)), sumColsTask{f32(dst)[:rows], f32(src)[:rows*cols], cols, alpha})
}

// sumColsTask is one SumCols call; a range is a range of rows.
type sumColsTask struct {
	d, s  []float32
	cols  int
	alpha float32
}

var sumColsTasks taskPool[sumColsTask]

func (t *sumColsTask) do(lo, hi int) {
	d, s, cols := t.d, t.s, t.cols
	for i := lo; i < hi; i++ {
		var acc float32
		for _, v := range s[i*cols : (i+1)*cols] {
			acc += v
		}
		d[i] = t.alpha * acc
	}
}

// sumSquaresChunk is fixed so the partial sums, and hence the result, do
// not depend on the thread count.
const sumSquaresChunk = 1 << 15

// SumSquares implements backend.Backend. Partial sums in float64 over
// fixed chunks are added in chunk order.
func (c *CPU) SumSquares(dst, src backend.Ref, n int, beta float32) {
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, n)
		c.SumSquares(w.inout(dst, 1), s, n, beta)
		w.done()
		return
	}
	chunks := (n + sumSquaresChunk - 1) / sumSquaresChunk
	buf := sumSquaresScratch.get(chunks)
	defer sumSquaresScratch.put(buf)
	parts := *buf
	runTask(c, &sumSquaresTasks, chunks, 1, sumSquaresTask{f32(src)[:n], parts})
	var total float64
	for _, p := range parts {
		total += p
	}
	d := f32(dst)
	var prev float32
	if beta != 0 {
		prev = beta * d[0]
	}
	d[0] = prev + float32(total)
}

// sumSquaresTask is one SumSquares call; a range is a range of
// sumSquaresChunk-element chunks, whose sums go to parts.
type sumSquaresTask struct {
	s     []float32
	parts []float64
}

var (
	sumSquaresTasks   taskPool[sumSquaresTask]
	sumSquaresScratch scratch[float64] // a call's partial sums
)

func (t *sumSquaresTask) do(lo, hi int) {
	s, n := t.s, len(t.s)
	for k := lo; k < hi; k++ {
		t.parts[k] = sumSquaresF64(s[k*sumSquaresChunk : min((k+1)*sumSquaresChunk, n)])
	}
}

// sumSquaresF64 is the sum of s's squares in float64, in a fixed order:
// element i goes into partial sum i%8 (eight independent chains, which the
// CPU overlaps; one chain waits on each add's latency), the partials are
// added pairwise, then the last len%8 elements in turn. The squares are
// exact in float64, so a fused multiply-add gives the same bits.
func sumSquaresF64(s []float32) float64 {
	var a0, a1, a2, a3, a4, a5, a6, a7 float64
	n := len(s) &^ 7
	for i := 0; i < n; i += 8 {
		v := s[i : i+8 : i+8]
		x0, x1, x2, x3 := float64(v[0]), float64(v[1]), float64(v[2]), float64(v[3])
		x4, x5, x6, x7 := float64(v[4]), float64(v[5]), float64(v[6]), float64(v[7])
		a0 += x0 * x0
		a1 += x1 * x1
		a2 += x2 * x2
		a3 += x3 * x3
		a4 += x4 * x4
		a5 += x5 * x5
		a6 += x6 * x6
		a7 += x7 * x7
	}
	acc := ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
	for _, v := range s[n:] {
		acc += float64(v) * float64(v)
	}
	return acc
}

// GELU implements backend.Backend (tanh approximation, as GPT-2).
func (c *CPU) GELU(dst, src backend.Ref, n int) {
	if anyBF16(dst, src) {
		w := widening{c: c}
		s := w.in(src, n)
		c.GELU(w.out(dst, n), s, n)
		w.done()
		return
	}
	runChunks(c, &geluTasks, n, elemGrain, geluTask{f32(dst)[:n], f32(src)[:n]})
}

// geluTask is one GELU call.
type geluTask struct{ d, s []float32 }

var geluTasks taskPool[geluTask]

func (t *geluTask) do(lo, hi int) { geluChunk(t.d[lo:hi], t.s[lo:hi]) }

// GELUBackward implements backend.Backend.
func (c *CPU) GELUBackward(dx, x, dy backend.Ref, n int) {
	if anyBF16(dx, x, dy) {
		w := widening{c: c}
		xs, dys := w.in(x, n), w.in(dy, n)
		c.GELUBackward(w.out(dx, n), xs, dys, n)
		w.done()
		return
	}
	runChunks(c, &geluBackwardTasks, n, elemGrain, geluBackwardTask{f32(dx)[:n], f32(x)[:n], f32(dy)[:n]})
}

// geluBackwardTask is one GELUBackward call.
type geluBackwardTask struct{ dx, x, dy []float32 }

var geluBackwardTasks taskPool[geluBackwardTask]

func (t *geluBackwardTask) do(lo, hi int) { geluBackwardChunk(t.dx[lo:hi], t.x[lo:hi], t.dy[lo:hi]) }

// The elementwise transcendental kernels, replaced by SIMD versions
// (vexp_amd64.s) where the CPU has them.
var (
	geluChunk         = geluGo
	geluBackwardChunk = geluBackwardGo
	expChunk          = expGo
	expAffineChunk    = expAffineGo
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

// expAffineGo writes d[i] = exp(a*s[i] - b) (the product rounded before
// the difference) and returns the sum of d: element i is added into lane
// i%8 for the first len&^7 elements, the lanes are added pairwise
// (laneSum), then the rest in turn, the order of the SIMD version
// (vexp_amd64.go). d may be s.
func expAffineGo(d, s []float32, a, b float32) float32 {
	s = s[:len(d)]
	var lanes [8]float32
	n := len(d) &^ 7
	for i := range n {
		d[i] = exp32(float32(a*s[i]) - b)
		lanes[i&7] += d[i]
	}
	sum := laneSum(&lanes)
	for i := n; i < len(d); i++ {
		d[i] = exp32(float32(a*s[i]) - b)
		sum += d[i]
	}
	return sum
}

// laneSum adds eight lanes pairwise: ((0+4) + (2+6)) + ((1+5) + (3+7)).
func laneSum(l *[8]float32) float32 {
	return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
}

// exp32 is exp in float32, clamped like the SIMD version so both saturate
// the same way.
func exp32(x float32) float32 {
	return float32(math.Exp(float64(min(max(x, -87.33654), 88.37626))))
}

// AdamW implements backend.Backend: PyTorch's AdamW with bias correction
// and decoupled weight decay.
func (c *CPU) AdamW(p backend.AdamW, param, grad, m, v backend.Ref, n int) {
	if e := p.DecayEnd; e > 0 && e < n { // two stretches: the same bits as two calls
		p.DecayEnd = 0
		c.AdamW(p, param, grad, m, v, e)
		at := func(r backend.Ref) backend.Ref { r.Off += e; return r }
		p.WeightDecay = 0
		if !p.Half.Nil() {
			p.Half = at(p.Half)
		}
		c.AdamW(p, at(param), at(grad), at(m), at(v), n-e)
		return
	}
	if !p.GradScale.Nil() {
		// The gradients times the scale, in place, as a separate scale
		// of the gradients did before: the same bits.
		s := f32(p.GradScale)[0]
		if math.IsNaN(float64(s)) || math.IsInf(float64(s), 0) {
			return
		}
		if s != 1 {
			c.Scale(grad, grad, s, n)
		}
	}
	var hp adamConsts
	if !p.Sched.Nil() { // the learning rate and step from the device (ScalerCoef)
		sch := f32(p.Sched)[:3]
		hp = adamConsts{
			b1: p.Beta1, c1: 1 - p.Beta1, b2: p.Beta2, c2: 1 - p.Beta2,
			invBC2Sqrt: sch[2], eps: p.Eps,
			decay: 1 - float32(sch[0]*p.WeightDecay), stepSize: sch[1],
		}
	} else {
		bc1 := 1 - math.Pow(float64(p.Beta1), float64(p.Step))
		bc2 := 1 - math.Pow(float64(p.Beta2), float64(p.Step))
		hp = adamConsts{
			b1: p.Beta1, c1: 1 - p.Beta1, b2: p.Beta2, c2: 1 - p.Beta2,
			invBC2Sqrt: float32(1 / math.Sqrt(bc2)), eps: p.Eps,
			decay: 1 - p.LR*p.WeightDecay, stepSize: float32(float64(p.LR) / bc1),
		}
	}
	t := adamwTask{w: f32(param)[:n], g: f32(grad)[:n], m: f32(m)[:n], v: f32(v)[:n], k: hp}
	if !p.Half.Nil() {
		t.half = u16(p.Half)[:n]
	}
	runChunks(c, &adamwTasks, n, elemGrain, t)
}

// adamwTask is one AdamW call; half, where set, gets the updated
// parameters rounded to bf16 (backend.AdamW.Half).
type adamwTask struct {
	w, g, m, v []float32
	k          adamConsts
	half       []uint16
}

var adamwTasks taskPool[adamwTask]

func (t *adamwTask) do(lo, hi int) {
	adamwChunk(t.w[lo:hi], t.g[lo:hi], t.m[lo:hi], t.v[lo:hi], &t.k)
	if t.half != nil {
		f32ToBF16s(t.half[lo:hi], t.w[lo:hi]) // Cast's conversion
	}
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

// TrackLoss implements backend.Backend.
func (c *CPU) TrackLoss(stats, x backend.Ref, scale float32, step int) {
	if step < 0 {
		step = int(f32(stats)[4])
	}
	st, v := f32(stats)[:2], f32(x)[0]
	st[0] += v * scale
	if (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) && st[1] < 0 {
		st[1] = float32(step)
	}
}

// ClipCoef implements backend.Backend.
func (c *CPU) ClipCoef(coef, stats, sumsq backend.Ref, maxNorm float64, step int) {
	if step < 0 {
		step = int(f32(stats)[4])
	}
	st := f32(stats)[:4]
	norm := math.Sqrt(float64(f32(sumsq)[0]))
	st[2] = float32(norm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		f32(coef)[0] = float32(norm)
		if st[3] < 0 {
			st[3] = float32(step)
		}
		return
	}
	k := float32(1)
	if maxNorm > 0 && norm > maxNorm {
		k = float32(maxNorm / (norm + 1e-6))
	}
	f32(coef)[0] = k
}

// ScalerCoef implements backend.Backend, in float64 where ClipCoef is.
func (c *CPU) ScalerCoef(coef, stats, sumsq backend.Ref, maxNorm float64, step int, s backend.Scaler) {
	if step < 0 {
		step = int(f32(stats)[4]) - 1
	}
	st, sc := f32(stats)[:4], f32(s.State)[:backend.ScalerStateLen]
	scale := sc[backend.ScalerScale]
	norm := math.Sqrt(float64(f32(sumsq)[0])) / float64(scale)
	st[2] = float32(norm)
	if math.IsNaN(norm) || math.IsInf(norm, 0) {
		f32(coef)[0] = float32(norm)
		sc[backend.ScalerScale] = scale * 0.5
		sc[backend.ScalerTracker] = 0
		sc[backend.ScalerSkipped]++
	} else {
		k := 1.0
		if maxNorm > 0 && norm > maxNorm {
			k = maxNorm / (norm + 1e-6)
		}
		f32(coef)[0] = float32(k / float64(scale))
		tracker := sc[backend.ScalerTracker] + 1
		if int(tracker) == s.GrowthInterval {
			if g := scale * 2; !math.IsInf(float64(g), 0) {
				sc[backend.ScalerScale] = g
			}
			tracker = 0
		}
		sc[backend.ScalerTracker] = tracker
		pos := max(step-int(sc[backend.ScalerSkipped]), 0)
		adamSched(sc[backend.ScalerLR:backend.ScalerLR+3], f32(s.LRs)[:s.NLR], pos, pos+1, s.Beta1, s.Beta2)
		sc[backend.ScalerAdamSteps] = float32(pos + 1)
	}
	sc[backend.ScalerSeed] = sc[backend.ScalerScale] * s.SeedFactor
}

// StepClock implements backend.Backend.
func (c *CPU) StepClock(stats, sched, lrs backend.Ref, nlr int, beta1, beta2 float32) {
	st := f32(stats)[:5]
	i := int(st[4])
	st[4] = float32(i + 1)
	if sched.Nil() {
		return
	}
	adamSched(f32(sched)[:3], f32(lrs)[:nlr], max(i, 0), i+1, beta1, beta2)
}

// adamSched writes update t's learning rate lrs[min(pos, len-1)] and
// AdamW's constants lr/(1-b1^t), 1/sqrt(1-b2^t) into sched: the schedule
// ScalerCoef and StepClock both write, as the kernels do.
func adamSched(sched, lrs []float32, pos, t int, beta1, beta2 float32) {
	lr := lrs[min(pos, len(lrs)-1)]
	bc1 := 1 - powInt(float64(beta1), t)
	bc2 := 1 - powInt(float64(beta2), t)
	sched[0], sched[1], sched[2] = lr, float32(float64(lr)/bc1), float32(1/math.Sqrt(bc2))
}

// StepDropoutKey implements backend.Backend.
func (c *CPU) StepDropoutKey(key, stats backend.Ref, seed uint64) {
	h := backend.DropoutKey(seed, int(f32(stats)[4])-1)
	k := i32(key)[:2]
	k[0], k[1] = int32(uint32(h)), int32(uint32(h>>32))
}

// powInt is b^t by repeated squaring, the CUDA kernel's multiplications in
// its order (a power function's last bits differ between libraries).
func powInt(b float64, t int) float64 {
	r := 1.0
	for ; t > 0; t >>= 1 {
		if t&1 != 0 {
			r *= b
		}
		b *= b
	}
	return r
}

// DropoutAdd implements backend.Backend. Each element draws its own
// number (a counter-based draw), so chunks run in parallel and give the
// mask a serial draw would.
func (c *CPU) DropoutAdd(out, x, y backend.Ref, n int, m backend.DropoutMask) {
	if anyBF16(out, x, y) {
		w := widening{c: c}
		xs, ys := w.in(x, n), w.in(y, n)
		c.DropoutAdd(w.out(out, n), xs, ys, n, m)
		w.done()
		return
	}
	if m.Identity() { // p 0 (a fused residual add's): the sum or copy, bit for bit, without the draws
		if x.Nil() {
			c.Copy(out, y, n)
		} else {
			c.Binary(backend.Add, out, x, y, n)
		}
		return
	}
	if !m.Base.Nil() {
		m = m.Resolved(i32(m.Base)[:2])
	}
	t := dropoutAddTask{d: f32(out)[:n], y: f32(y)[:n], m: m}
	if !x.Nil() {
		t.x = f32(x)[:n]
	}
	runChunks(c, &dropoutAddTasks, n, elemGrain, t)
}

// dropoutAddTask is one DropoutAdd call: d = x + y·factor (x nil: no x).
type dropoutAddTask struct {
	d, x, y []float32
	m       backend.DropoutMask
}

var dropoutAddTasks taskPool[dropoutAddTask]

func (t *dropoutAddTask) do(lo, hi int) {
	if t.x == nil {
		dropoutRow(t.d[lo:hi], t.y[lo:hi], t.m, int64(lo))
		return
	}
	d, x, y := t.d[lo:hi], t.x[lo:hi], t.y[lo:hi]
	var f [256]float32
	for s := 0; s < len(d); s += len(f) {
		e := min(s+len(f), len(d))
		t.m.FactorsAt(f[:e-s], int64(lo+s))
		for i := s; i < e; i++ {
			// The conversion rounds the product first: no fused multiply-add.
			d[i] = x[i] + float32(y[i]*f[i-s])
		}
	}
}

// dropoutRow writes d[i] = y[i]·m.Factor(base+i).
func dropoutRow(d, y []float32, m backend.DropoutMask, base int64) {
	y = y[:len(d)]
	var f [256]float32
	for s := 0; s < len(d); s += len(f) {
		e := min(s+len(f), len(d))
		m.FactorsAt(f[:e-s], base+int64(s))
		for i := s; i < e; i++ {
			d[i] = y[i] * f[i-s]
		}
	}
}

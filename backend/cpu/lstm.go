package cpu

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// The LSTM's gate kernels (backend.LSTMCells): one timestep's gates, cell
// and output from the input's projection and the recurrent product, and
// its backward pass. Each is a pass over the batch's rows, one goroutine
// per range of rows, in float32, every element computed from its own
// operands alone (the bits do not depend on the thread count). σ and
// tanh come from the vectorised exp: σ(a) = 1/(1 + e^−a) and
// tanh(a) = 2/(1 + e^−2a) − 1, which saturate to 0, 1 and ±1 without a
// NaN where e^−a overflows; near 0, where that difference would lose
// tanh's relative precision (its absolute error is an ulp of 1), tanh is
// its series (tanhNear0). The products around them are MatMul's.

var _ backend.LSTMCells = (*CPU)(nil)

// tanhSeriesBound is where tanhOf switches from the series to the exp:
// below it the series' first left-out term, 1382/155925·a^11, is under
// 1e-8 of tanh(a); above it 2/(1 + e) − 1 is within a few ulps.
const tanhSeriesBound = 0.25

// tanhOf is tanh(a) given e = e^−2a: the odd series to a^9 near 0, else
// 2/(1 + e) − 1.
func tanhOf(a, e float32) float32 {
	if a > -tanhSeriesBound && a < tanhSeriesBound {
		x2 := a * a
		return a * (1 + x2*(-1.0/3+x2*(2.0/15+x2*(-17.0/315+x2*(62.0/2835)))))
	}
	return 2/(1+e) - 1
}

// lstmTask is one LSTMCell call or, as lstmBackwardTask, one
// LSTMCellBackward call; a range is a range of the batch's rows. Optional
// operands are nil slices.
type lstmTask struct {
	act, c, h, out, xg, rec, cprev   []float32
	dgate, dxg, dcprev, dout, dh, dc []float32
	T, H, step                       int
}

type lstmBackwardTask lstmTask

var (
	lstmTasks         taskPool[lstmTask]
	lstmBackwardTasks taskPool[lstmBackwardTask]
	lstmScratch       scratch[float32] // a row's pre-activations and exponentials
)

// opt is r's F32 elements [0, n), or nil where r is Nil.
func opt(r backend.Ref, n int) []float32 {
	if r.Nil() {
		return nil
	}
	return f32(r)[:n]
}

// wantF32 panics naming op where an operand is not F32: the LSTM's
// kernels run in F32 only.
func wantF32(op string, refs ...backend.Ref) {
	for _, r := range refs {
		if !r.Nil() && r.S.DType() != backend.F32 {
			panic(fmt.Sprintf("cpu: %s takes F32 operands, got %v", op, r.S.DType()))
		}
	}
}

// lstmGrain is the rows a goroutine takes at least: about 512 units (a
// few tens of microseconds of scalar work a goroutine, above the cost of
// handing it out), so that the reference model's 12 rows of 128 split.
func lstmGrain(H int) int { return max(1, 512/H) }

// LSTMCell implements backend.LSTMCells.
func (c *CPU) LSTMCell(p backend.LSTMStep, act, cell, h, out, xg, rec, cprev backend.Ref) {
	wantF32("LSTMCell", act, cell, h, out, xg, rec, cprev)
	B, T, H := p.B, p.T, p.H
	runTask(c, &lstmTasks, B, lstmGrain(H), lstmTask{
		act: f32(act)[:B*4*H], c: f32(cell)[:B*H], h: f32(h)[:B*H], out: f32(out)[:B*T*H],
		xg: f32(xg)[:B*T*4*H], rec: opt(rec, B*4*H), cprev: opt(cprev, B*H), T: T, H: H, step: p.Step,
	})
}

func (t *lstmTask) do(lo, hi int) {
	H := t.H
	buf := lstmScratch.get(8 * H)
	defer lstmScratch.put(buf)
	a, e := (*buf)[:4*H], (*buf)[4*H:8*H]
	for r := lo; r < hi; r++ {
		x := t.xg[(r*t.T+t.step)*4*H:][:4*H]
		if t.rec != nil {
			rec := t.rec[r*4*H:][:4*H]
			for k, v := range x {
				a[k] = v + rec[k]
			}
		} else {
			copy(a, x)
		}
		expAffineChunk(e[:2*H], a[:2*H], -1, 0)       // i, f
		expAffineChunk(e[2*H:3*H], a[2*H:3*H], -2, 0) // g
		expAffineChunk(e[3*H:], a[3*H:], -1, 0)       // o
		act := t.act[r*4*H:][:4*H]
		for k, v := range e[:2*H] {
			act[k] = 1 / (1 + v)
		}
		ga, ge, gt := a[2*H:3*H], e[2*H:3*H], act[2*H:3*H]
		for j, v := range ga {
			gt[j] = tanhOf(v, ge[j])
		}
		for k, v := range e[3*H:] {
			act[3*H+k] = 1 / (1 + v)
		}
		i, f, g := act[:H], act[H:2*H], act[2*H:3*H]
		cell, h, out := t.c[r*H:][:H], t.h[r*H:][:H], t.out[(r*t.T+t.step)*H:][:H]
		if t.cprev != nil {
			cp := t.cprev[r*H:][:H]
			for j := range cell {
				cell[j] = f[j]*cp[j] + i[j]*g[j]
			}
		} else {
			for j := range cell {
				cell[j] = i[j] * g[j] // f·0 + i·g
			}
		}
		ec, o := e[:H], act[3*H:]
		expAffineChunk(ec, cell, -2, 0)
		for j, v := range cell {
			h[j] = o[j] * tanhOf(v, ec[j])
		}
		copy(out, h)
	}
}

// LSTMCellBackward implements backend.LSTMCells.
func (c *CPU) LSTMCellBackward(p backend.LSTMStep, dgate, dxg, dcprev, dout, dh, dc, act, cell, cprev backend.Ref) {
	wantF32("LSTMCellBackward", dgate, dxg, dcprev, dout, dh, dc, act, cell, cprev)
	B, T, H := p.B, p.T, p.H
	runTask(c, &lstmBackwardTasks, B, lstmGrain(H), lstmBackwardTask{
		dgate: f32(dgate)[:B*4*H], dxg: f32(dxg)[:B*T*4*H], dcprev: f32(dcprev)[:B*H], dout: f32(dout)[:B*T*H],
		dh: opt(dh, B*H), dc: opt(dc, B*H), act: f32(act)[:B*4*H], c: f32(cell)[:B*H], cprev: opt(cprev, B*H),
		T: T, H: H, step: p.Step,
	})
}

func (t *lstmBackwardTask) do(lo, hi int) {
	H := t.H
	buf := lstmScratch.get(2 * H)
	defer lstmScratch.put(buf)
	e, d := (*buf)[:H], (*buf)[H:2*H]
	for r := lo; r < hi; r++ {
		act := t.act[r*4*H:][:4*H]
		i, f, g, o := act[:H], act[H:2*H], act[2*H:3*H], act[3*H:]
		cell := t.c[r*H:][:H]
		expAffineChunk(e, cell, -2, 0)
		copy(d, t.dout[(r*t.T+t.step)*H:][:H]) // d = dout (+ dh): h's whole gradient
		if t.dh != nil {
			for j, v := range t.dh[r*H:][:H] {
				d[j] += v
			}
		}
		dg := t.dgate[r*4*H:][:4*H]
		di, df, dgg, do := dg[:H], dg[H:2*H], dg[2*H:3*H], dg[3*H:]
		dcp := t.dcprev[r*H:][:H]
		var dc, cp []float32
		if t.dc != nil {
			dc = t.dc[r*H:][:H]
		}
		if t.cprev != nil {
			cp = t.cprev[r*H:][:H]
		}
		for j, c := range cell {
			tc := tanhOf(c, e[j])
			dct := d[j] * o[j] * (1 - tc*tc)
			if dc != nil {
				dct += dc[j]
			}
			var p float32
			if cp != nil {
				p = cp[j]
			}
			di[j] = dct * g[j] * i[j] * (1 - i[j])
			df[j] = dct * p * f[j] * (1 - f[j])
			dgg[j] = dct * i[j] * (1 - g[j]*g[j])
			do[j] = d[j] * tc * o[j] * (1 - o[j])
			dcp[j] = dct * f[j] // may be dc[j], read above
		}
		copy(t.dxg[(r*t.T+t.step)*4*H:][:4*H], dg)
	}
}

package cpu

import (
	"math"

	"github.com/fleetml/fleet/backend"
)

// attnQB is the number of query rows attention processes at once: it
// holds a attnQB×T block of scores, never the whole T×T matrix.
const attnQB = 64

// attnWork is one goroutine's attention scratch, reused across calls.
type attnWork struct {
	gemmWork
	buf []float32
	fac []float32 // a row's dropout factors
}

var attnPool pool[attnWork]

// getAttnWork borrows an attnWork; return it with attnPool.put.
func getAttnWork() *attnWork {
	w := attnPool.get()
	w.init()
	return w
}

// grow returns n floats of scratch, growing buf as needed.
func (w *attnWork) grow(n int) []float32 {
	w.buf = grow(w.buf, n)
	return w.buf
}

// causalSoftmaxBlock turns raw scores S [qb, kn] (rows are positions
// q0..q0+qb) into probabilities of the scores times scale (> 0) in place,
// masking keys after each query, and stores each row's log-sum-exp (of
// the scaled scores) in lse.
func causalSoftmaxBlock(S []float32, qb, kn, q0 int, lse []float32, scale float32) {
	for i := 0; i < qb; i++ {
		row := S[i*kn : (i+1)*kn]
		n := q0 + i + 1
		m := scale * rowMax(row[:n])                      // the largest scaled score (scale > 0)
		sum := expAffineChunk(row[:n], row[:n], scale, m) // exp(x·scale - m), summed
		scaleChunk(row[:n], row[:n], 1/sum)
		clear(row[n:])
		lse[i] = m + float32(math.Log(float64(sum)))
	}
}

// rowMax is the largest of x (NaN if any is), with four independent
// chains.
func rowMax(x []float32) float32 {
	m0, m1, m2, m3 := float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))
	n := len(x) &^ 3
	for i := 0; i < n; i += 4 {
		v := x[i : i+4 : i+4]
		m0, m1, m2, m3 = max(m0, v[0]), max(m1, v[1]), max(m2, v[2]), max(m3, v[3])
	}
	for _, v := range x[n:] {
		m0 = max(m0, v)
	}
	return max(max(m0, m1), max(m2, m3))
}

// Attention implements backend.Backend in the manner of FlashAttention:
// for each (batch, head) and each block of attnQB queries, scores against
// the keys up to the block's end are one matrix product, a masked softmax,
// and a second product with V. Only each row's log-sum-exp is saved; the
// backward pass recomputes the probabilities. One goroutine per
// (batch, head), each with a fixed order of work.
//
// With grouped keys and values (p.KVH), query head h reads key/value head
// h/(H/KVH) where it lies in the packed qkv, repeated in no memory.
func (c *CPU) Attention(p backend.Attention, out, saved, qkv backend.Ref) {
	if anyBF16(out, qkv) {
		w := widening{c: c}
		q := w.in(qkv, p.B*p.T*p.Width())
		c.Attention(p, w.out(out, p.B*p.T*p.C), saved, q)
		w.done()
		return
	}
	B, T, C := p.B, p.T, p.C
	p.Drop = resolveAttnDrop(p)
	runTask(c, &attentionTasks, B*p.H, 1, attentionTask{
		p: p, o: f32(out)[:B*T*C], lse: f32(saved)[:p.SavedLen()], x: f32(qkv)[:B*T*p.Width()],
	})
}

// attentionTask is one Attention call (o is out) or, as
// attentionBackwardTask, one AttentionBackward call (d is dqkv, g is dout,
// o is out); a range is a range of (batch, head) pairs.
type attentionTask struct {
	p               backend.Attention
	d, g, o, lse, x []float32
}

type attentionBackwardTask attentionTask

var (
	attentionTasks         taskPool[attentionTask]
	attentionBackwardTasks taskPool[attentionBackwardTask]
)

func (at *attentionTask) do(lo, hi int) {
	T, C, H := at.p.T, at.p.C, at.p.H
	hd := C / H
	W, kvh := at.p.Width(), at.p.KVHeads()
	scale := float32(1 / math.Sqrt(float64(hd)))
	o, lse, x := at.o, at.lse, at.x
	w := getAttnWork()
	defer attnPool.put(w)
	S := w.grow(attnQB * T)
	for bh := lo; bh < hi; bh++ {
		b, h := bh/H, bh%H
		g := h / (H / kvh)
		// q, k and v of head h are read where they lie in the packed
		// qkv, rows W apart (3C for multi-head attention).
		qb0, kb0, vb0 := b*T*W+h*hd, b*T*W+C+g*hd, b*T*W+C+kvh*hd+g*hd
		K, V := mat{x[kb0:], W, true}, mat{x[vb0:], W, false}
		for q0 := 0; q0 < T; q0 += attnQB {
			qb := min(attnQB, T-q0)
			kn := q0 + qb
			s := S[:qb*kn]
			w.gemmSerial(mat{x[qb0+q0*W:], W, false}, K, s, kn, qb, kn, hd, 1, 0)
			causalSoftmaxBlock(s, qb, kn, q0, lse[bh*T+q0:], scale)
			if at.p.Dropped() { // the probabilities dropped for the product with V
				for i := 0; i < qb; i++ {
					dropRow(s[i*kn:i*kn+q0+i+1], at.p.Drop, int64(bh*T+q0+i)*int64(T), w)
				}
			}
			// out[b, q0+i, h*hd:] = P @ V, written in place with row stride C.
			w.gemmSerial(mat{s, kn, false}, V, o[(b*T+q0)*C+h*hd:], C, qb, hd, kn, 1, 0)
		}
	}
}

// resolveAttnDrop is p's dropout mask with its device-held key read.
func resolveAttnDrop(p backend.Attention) backend.DropoutMask {
	if !p.Dropped() || p.Drop.Base.Nil() {
		return p.Drop
	}
	return p.Drop.Resolved(i32(p.Drop.Base)[:2])
}

// dropRow multiplies row, the probabilities of one query from key 0 on,
// by m's factors from element g0 on (w's scratch holds them).
func dropRow(row []float32, m backend.DropoutMask, g0 int64, w *attnWork) {
	w.fac = grow(w.fac, len(row))
	f := w.fac[:len(row)]
	m.FactorsAt(f, g0)
	for j, v := range f {
		row[j] *= v
	}
}

// AttentionBackward implements backend.Backend. Per (batch, head) and
// query block it recomputes P from the saved log-sum-exp, then
// dV += Pᵀ dO, dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O)),
// dQ = scale·dS K and dK += scale·dSᵀ Q, all as matrix products.
// With grouped keys and values, a goroutine takes a (batch, key/value
// head) pair and its query heads in turn, so that dK and dV add up the
// group's heads in a fixed order.
func (c *CPU) AttentionBackward(p backend.Attention, dqkv, dout, out, saved, qkv backend.Ref) {
	nq := p.B * p.T * p.Width()
	if anyBF16(dqkv, dout, out, qkv) {
		w := widening{c: c}
		n := p.B * p.T * p.C
		d, o, q := w.in(dout, n), w.in(out, n), w.in(qkv, nq)
		c.AttentionBackward(p, w.out(dqkv, nq), d, o, saved, q)
		w.done()
		return
	}
	B, T, C := p.B, p.T, p.C
	p.Drop = resolveAttnDrop(p)
	runTask(c, &attentionBackwardTasks, B*p.KVHeads(), 1, attentionBackwardTask{
		p: p, d: f32(dqkv)[:nq], g: f32(dout)[:B*T*C], o: f32(out)[:B*T*C],
		lse: f32(saved)[:p.SavedLen()], x: f32(qkv)[:nq],
	})
}

func (at *attentionBackwardTask) do(lo, hi int) {
	H, kvh := at.p.H, at.p.KVHeads()
	for bg := lo; bg < hi; bg++ {
		b, g := bg/kvh, bg%kvh
		for h := g * (H / kvh); h < (g+1)*(H/kvh); h++ {
			at.head(b, h, g, h == g*(H/kvh))
		}
	}
}

// head adds query head h's share to the gradients of batch b: its dq,
// and its part of dk and dv of key/value head kg (cleared first where
// first).
func (at *attentionBackwardTask) head(b, h, kg int, first bool) {
	T, C, H := at.p.T, at.p.C, at.p.H
	hd := C / H
	W, kvh := at.p.Width(), at.p.KVHeads()
	bh := b*H + h
	scale := float32(1 / math.Sqrt(float64(hd)))
	d, g, o, lse, x := at.d, at.g, at.o, at.lse, at.x
	w := getAttnWork()
	defer attnPool.put(w)
	drop := at.p.Dropped()
	nbuf := 2*attnQB*T + T
	if drop {
		nbuf += attnQB * T
	}
	buf := w.grow(nbuf)
	P, dP, D := buf[:attnQB*T], buf[attnQB*T:2*attnQB*T], buf[2*attnQB*T:2*attnQB*T+T]
	var PF []float32 // with dropout, the dropped probabilities, for dV
	if drop {
		PF = buf[2*attnQB*T+T:]
	}
	// Every operand is read, and dq, dk and dv written, where it lies:
	// q, k, v and their gradients rows W apart in the packed qkv
	// and dqkv (3C for multi-head attention), dout and out rows C
	// apart.
	qb0, kb0, vb0, gb := b*T*W+h*hd, b*T*W+C+kg*hd, b*T*W+C+kvh*hd+kg*hd, b*T*C+h*hd
	K, Kt, Vt := mat{x[kb0:], W, false}, mat{x[kb0:], W, true}, mat{x[vb0:], W, true}
	for t := 0; t < T; t++ {
		gr, or := g[gb+t*C:gb+t*C+hd], o[gb+t*C:gb+t*C+hd]
		var dot float32
		for i, v := range gr {
			dot += v * or[i]
		}
		D[t] = dot
		if first { // dk and dv accumulate over the query blocks and the group's heads
			clear(d[kb0+t*W : kb0+t*W+hd])
			clear(d[vb0+t*W : vb0+t*W+hd])
		}
	}
	for q0 := 0; q0 < T; q0 += attnQB {
		qb := min(attnQB, T-q0)
		kn := q0 + qb
		pm, dpm := P[:qb*kn], dP[:qb*kn]
		Q, dO := mat{x[qb0+q0*W:], W, false}, mat{g[gb+q0*C:], C, false}
		// Every product runs with alpha 1 (A read in place): the
		// score scale is applied in the exp pass and folded into dS.
		w.gemmSerial(Q, Kt, pm, kn, qb, kn, hd, 1, 0)
		for i := 0; i < qb; i++ {
			row := pm[i*kn : (i+1)*kn]
			n := q0 + i + 1
			expAffineChunk(row[:n], row[:n], scale, lse[bh*T+q0+i]) // exp(x·scale - lse)
			clear(row[n:])
		}
		if !drop {
			w.gemmSerial(mat{pm, kn, true}, dO, d[vb0:], W, kn, hd, qb, 1, 1)
		} else {
			// dV += (P⊙F)ᵀ dO; below, dS = P ⊙ (F ⊙ dO Vᵀ − D), the
			// dropped probabilities' gradient carried through the mask.
			pf := PF[:qb*kn]
			copy(pf, pm)
			for i := 0; i < qb; i++ {
				dropRow(pf[i*kn:i*kn+q0+i+1], at.p.Drop, int64(bh*T+q0+i)*int64(T), w)
			}
			w.gemmSerial(mat{pf, kn, true}, dO, d[vb0:], W, kn, hd, qb, 1, 1)
		}
		w.gemmSerial(dO, Vt, dpm, kn, qb, kn, hd, 1, 0)
		for i := 0; i < qb; i++ {
			n := q0 + i + 1 // P is 0 past the diagonal, and so is dS
			pr, dr := pm[i*kn:i*kn+n], dpm[i*kn:(i+1)*kn]
			di := D[q0+i]
			if drop {
				dropRow(dr[:n], at.p.Drop, int64(bh*T+q0+i)*int64(T), w)
			}
			for s, p := range pr {
				dr[s] = scale * p * (dr[s] - di)
			}
			clear(dr[n:])
		}
		w.gemmSerial(mat{dpm, kn, false}, K, d[qb0+q0*W:], W, qb, hd, kn, 1, 0)
		w.gemmSerial(mat{dpm, kn, true}, Q, d[kb0:], W, kn, hd, qb, 1, 1)
	}
}

// AttentionKV implements backend.Backend.
// With grouped keys and values the caches hold the KVH heads only.
func (c *CPU) AttentionKV(p backend.AttentionKV, out, qkv, kc, vc backend.Ref) {
	B, T, C, H := p.B, p.T, p.C, p.H
	KC := C / H * p.KVHeads() // a cache row's width
	W := C + 2*KC
	o, x, ks, vs := f32(out)[:B*T*C], f32(qkv)[:B*T*W], f32(kc)[:B*p.MaxT*KC], f32(vc)[:B*p.MaxT*KC]
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			row := x[(b*T+t)*W:]
			pos := p.Pos + t
			copy(ks[(b*p.MaxT+pos)*KC:(b*p.MaxT+pos+1)*KC], row[C:C+KC])
			copy(vs[(b*p.MaxT+pos)*KC:(b*p.MaxT+pos+1)*KC], row[C+KC:W])
		}
	}
	runTask(c, &attentionKVTasks, B*H, 1, attentionKVTask{p: p, o: o, x: x, ks: ks, vs: vs})
}

// attentionKVTask is one AttentionKV call; a range is a range of
// (batch, head) pairs.
type attentionKVTask struct {
	p            backend.AttentionKV
	o, x, ks, vs []float32
}

var (
	attentionKVTasks taskPool[attentionKVTask]
	kvScratch        scratch[float32] // one score row per goroutine
)

func (at *attentionKVTask) do(lo, hi int) {
	p, o, x, ks, vs := at.p, at.o, at.x, at.ks, at.vs
	T, C, H := p.T, p.C, p.H
	hd := C / H
	kvh := p.KVHeads()
	KC, W := hd*kvh, C+2*hd*kvh
	scale := float32(1 / math.Sqrt(float64(hd)))
	buf := kvScratch.get(p.Pos + T)
	defer kvScratch.put(buf)
	scores := *buf
	for bh := lo; bh < hi; bh++ {
		b, h := bh/H, bh%H
		g := h / (H / kvh) // its key/value head
		for t := 0; t < T; t++ {
			q := x[(b*T+t)*W+h*hd : (b*T+t)*W+h*hd+hd]
			n := p.Pos + t + 1
			m := float32(math.Inf(-1))
			for s := 0; s < n; s++ {
				k := ks[(b*p.MaxT+s)*KC+g*hd : (b*p.MaxT+s)*KC+g*hd+hd]
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
				axpy(or, vs[(b*p.MaxT+s)*KC+g*hd:(b*p.MaxT+s)*KC+g*hd+hd], scores[s]/sum)
			}
		}
	}
}

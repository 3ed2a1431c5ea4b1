package cpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// The activation kernels on BF16 storage give, bit for bit, the F32
// kernels' results on the same (bf16-representable) inputs, rounded to
// bf16: each case runs an op once on F32 buffers and once on BF16 ones
// (at an offset, so Ref.Off is honoured) and compares.

// bfIn makes a BF16 operand at offset off holding v (rounded).
func bfIn(c *CPU, v []float32, off int) backend.Ref {
	s := c.Alloc(backend.BF16, off+len(v)+2)
	r := backend.Ref{S: s, Off: off}
	c.Cast(r, put(c, v, 0), len(v))
	return r
}

// bfGet reads n BF16 elements at r as float32.
func bfGet(c *CPU, r backend.Ref, n int) []float32 {
	f := put(c, make([]float32, n), 0)
	c.Cast(f, r, n)
	return get(c, f, n)
}

// roundBF is v rounded to bf16.
func roundBF(v []float32) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = backend.BF16ToF32(backend.F32ToBF16(x))
	}
	return out
}

func sameBF(t *testing.T, what string, got, f32 []float32) {
	t.Helper()
	want := roundBF(f32)
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) && !(got[i] != got[i] && want[i] != want[i]) {
			t.Fatalf("%s[%d] = %v in bf16, want %v (the f32 result %v rounded)", what, i, got[i], want[i], f32[i])
		}
	}
}

func TestActivationsInBF16(t *testing.T) {
	c := newCPU(2)
	r := rng.New(41)
	const rows, cols = 6, 20
	n := rows * cols
	x, y, g := roundBF(randF32(r, n, 1)), roundBF(randF32(r, n, 1)), roundBF(randF32(r, n, 1))
	w, b := randF32(r, cols, 1), randF32(r, cols, 1)
	m := backend.NewDropoutMask(9, 1, 5, 0.3)

	t.Run("gelu", func(t *testing.T) {
		o := put(c, make([]float32, n), 0)
		c.GELU(o, put(c, x, 0), n)
		ob := bfIn(c, make([]float32, n), 1)
		c.GELU(ob, bfIn(c, x, 2), n)
		sameBF(t, "gelu", bfGet(c, ob, n), get(c, o, n))
		c.GELUBackward(o, put(c, x, 0), put(c, g, 0), n)
		c.GELUBackward(ob, bfIn(c, x, 1), bfIn(c, g, 3), n)
		sameBF(t, "gelu backward", bfGet(c, ob, n), get(c, o, n))
	})
	t.Run("dropout add", func(t *testing.T) {
		o := put(c, make([]float32, n), 0)
		c.DropoutAdd(o, put(c, x, 0), put(c, y, 0), n, m)
		ob := bfIn(c, make([]float32, n), 1)
		c.DropoutAdd(ob, bfIn(c, x, 0), bfIn(c, y, 3), n, m)
		sameBF(t, "dropout add", bfGet(c, ob, n), get(c, o, n))
	})
	t.Run("layernorm", func(t *testing.T) {
		o, mean, rstd := put(c, make([]float32, n), 0), put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
		c.LayerNorm(o, mean, rstd, put(c, x, 0), put(c, w, 0), put(c, b, 0), rows, cols, 1e-5)
		ob, mb, rb := bfIn(c, make([]float32, n), 2), put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
		c.LayerNorm(ob, mb, rb, bfIn(c, x, 1), put(c, w, 0), put(c, b, 0), rows, cols, 1e-5)
		sameBF(t, "layernorm", bfGet(c, ob, n), get(c, o, n))
		if fmt.Sprint(get(c, mb, rows), get(c, rb, rows)) != fmt.Sprint(get(c, mean, rows), get(c, rstd, rows)) {
			t.Fatal("layernorm: the statistics differ")
		}
		// The backward pass, with a residual gradient and a dropout's copy.
		dx, dw, db, dd := put(c, make([]float32, n), 0), put(c, make([]float32, cols), 0), put(c, make([]float32, cols), 0), put(c, make([]float32, n), 0)
		c.LayerNormBackward(dx, put(c, y, 0), dw, db, put(c, g, 0), put(c, x, 0), mean, rstd, put(c, w, 0), rows, cols, backend.DropoutOut{})
		dx32 := roundBF(get(c, dx, n))
		c.DropoutAdd(dd, backend.Ref{}, put(c, dx32, 0), n, m) // the copy masks dx as stored (bf16)
		dxb, dwb, dbb, ddb := bfIn(c, make([]float32, n), 1), put(c, make([]float32, cols), 0), put(c, make([]float32, cols), 0), bfIn(c, make([]float32, n), 2)
		c.LayerNormBackward(dxb, bfIn(c, y, 0), dwb, dbb, bfIn(c, g, 3), bfIn(c, x, 1), mb, rb, put(c, w, 0), rows, cols, backend.DropoutOut{Dst: ddb, Mask: m})
		sameBF(t, "layernorm backward dx", bfGet(c, dxb, n), get(c, dx, n))
		sameBF(t, "layernorm backward dropout copy", bfGet(c, ddb, n), get(c, dd, n))
		if fmt.Sprint(get(c, dwb, cols), get(c, dbb, cols)) != fmt.Sprint(get(c, dw, cols), get(c, db, cols)) {
			t.Fatal("layernorm backward: dw or db differ")
		}
	})
	t.Run("add layernorm", func(t *testing.T) {
		sum, o, mean, rstd := put(c, make([]float32, n), 0), put(c, make([]float32, n), 0), put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
		c.DropoutAdd(sum, put(c, x, 0), put(c, y, 0), n, m)
		sum16 := roundBF(get(c, sum, n)) // the BF16 path rounds the sum first
		c.LayerNorm(o, mean, rstd, put(c, sum16, 0), put(c, w, 0), put(c, b, 0), rows, cols, 1e-5)
		sb, ob := bfIn(c, make([]float32, n), 1), bfIn(c, make([]float32, n), 2)
		c.AddLayerNorm(sb, ob, put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0), bfIn(c, x, 0), bfIn(c, y, 1), put(c, w, 0), put(c, b, 0), rows, cols, 1e-5, m)
		sameBF(t, "add layernorm: sum", bfGet(c, sb, n), get(c, sum, n))
		sameBF(t, "add layernorm: out", bfGet(c, ob, n), get(c, o, n))
	})
	t.Run("cross entropy", func(t *testing.T) {
		const v = 20
		tg := putI32(c, []int32{3, 0, 19, -1, 7, 4}, 0)
		losses, lse := put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
		c.CrossEntropy(losses, lse, put(c, x, 0), tg, rows, v)
		lb, eb := put(c, make([]float32, rows), 0), put(c, make([]float32, rows), 0)
		c.CrossEntropy(lb, eb, bfIn(c, x, 1), tg, rows, v)
		if fmt.Sprint(get(c, lb, rows), get(c, eb, rows)) != fmt.Sprint(get(c, losses, rows), get(c, lse, rows)) {
			t.Fatal("cross entropy: the losses differ (they stay F32)")
		}
		d, dl := put(c, make([]float32, n), 0), put(c, []float32{1}, 0)
		c.CrossEntropyBackward(d, put(c, x, 0), lse, tg, dl, 0.5, rows, v)
		db := bfIn(c, make([]float32, n), 2)
		c.CrossEntropyBackward(db, bfIn(c, x, 1), eb, tg, dl, 0.5, rows, v)
		sameBF(t, "cross entropy backward", bfGet(c, db, n), get(c, d, n))
	})
	t.Run("attention", func(t *testing.T) {
		p := backend.Attention{B: 2, T: 5, C: 4, H: 2}
		nq, no := p.B*p.T*3*p.C, p.B*p.T*p.C
		q, dout := roundBF(randF32(r, nq, 1)), roundBF(randF32(r, no, 1))
		o, saved, dq := put(c, make([]float32, no), 0), put(c, make([]float32, p.SavedLen()), 0), put(c, make([]float32, nq), 0)
		c.Attention(p, o, saved, put(c, q, 0))
		o16 := roundBF(get(c, o, no)) // the backward pass reads out as stored
		c.AttentionBackward(p, dq, put(c, dout, 0), put(c, o16, 0), saved, put(c, q, 0))
		ob, sb, dqb := bfIn(c, make([]float32, no), 1), put(c, make([]float32, p.SavedLen()), 0), bfIn(c, make([]float32, nq), 2)
		c.Attention(p, ob, sb, bfIn(c, q, 3))
		sameBF(t, "attention out", bfGet(c, ob, no), get(c, o, no))
		c.AttentionBackward(p, dqb, bfIn(c, dout, 0), ob, sb, bfIn(c, q, 1))
		sameBF(t, "attention dqkv", bfGet(c, dqb, nq), get(c, dq, nq))
	})
}

// TestAdamWHalfCopy: with Half, AdamW writes the updated parameters
// rounded to bf16 in the same call, over a split at DecayEnd too, and a
// skipped step (a gradient scale that is not finite) leaves the copy.
func TestAdamWHalfCopy(t *testing.T) {
	c := newCPU(3)
	r := rng.New(44)
	const n = 5003
	w0, g := randF32(r, n, 1), randF32(r, n, 1)
	m0, v0 := make([]float32, n), make([]float32, n)
	for _, decayEnd := range []int{0, n / 3} {
		p := backend.AdamW{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: 3, DecayEnd: decayEnd}
		w, h := put(c, w0, 2), bfIn(c, make([]float32, n), 1)
		p.Half = h
		c.AdamW(p, w, put(c, g, 0), put(c, m0, 0), put(c, v0, 0), n)
		sameBF(t, fmt.Sprintf("decay end %d: bf16 copy", decayEnd), bfGet(c, h, n), get(c, w, n))
		before := bfGet(c, h, n)
		p.GradScale = put(c, []float32{float32(math.NaN())}, 0)
		c.AdamW(p, w, put(c, g, 0), put(c, m0, 0), put(c, v0, 0), n)
		if after := bfGet(c, h, n); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatal("a skipped step changed the bf16 copy")
		}
	}
}

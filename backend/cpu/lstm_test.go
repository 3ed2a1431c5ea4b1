package cpu

import (
	"slices"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/rng"
)

// The LSTM's gate kernels against the float64 reference on random
// inputs (pre-activations of several units, so the gates saturate
// somewhere), with and without the optional operands (the first step's
// zero state, the last step's missing carries), guards around every
// operand, at 1 and 3 threads with the same bits (70 rows of 64 units
// cross the row grain).
func TestLSTMCell(t *testing.T) {
	const B, T, H, s = 70, 3, 64, 1
	r := rng.New(31)
	xg, rec, cprev := randF32(r, B*T*4*H, 2), randF32(r, B*4*H, 2), randF32(r, B*H, 1)
	dout, dh, dc := randF32(r, B*T*H, 1), randF32(r, B*H, 1), randF32(r, B*H, 1)
	outv, dxgv := randF32(r, B*T*H, 1), randF32(r, B*T*4*H, 1) // what the steps leave alone
	var first [][]float32
	for _, threads := range []int{1, 3} {
		for _, full := range []bool{true, false} {
			c := newCPU(threads)
			p := backend.LSTMStep{B: B, T: T, H: H, Step: s}
			var recR, cpR, dhR, dcR backend.Ref
			var rec64, cp64, dh64, dc64 []float64
			if full {
				recR, cpR, dhR, dcR = put(c, rec, 1), put(c, cprev, 2), put(c, dh, 3), put(c, dc, 1)
				rec64, cp64, dh64, dc64 = widen(rec), widen(cprev), widen(dh), widen(dc)
			}
			act, cell, h := put(c, make([]float32, B*4*H), 2), put(c, make([]float32, B*H), 1), put(c, make([]float32, B*H), 3)
			out := put(c, outv, 2)
			c.LSTMCell(p, act, cell, h, out, put(c, xg, 1), recR, cpR)

			out64 := widen(outv)
			wAct, wC, wH := ref.LSTMCell(widen(xg), rec64, cp64, out64, B, T, H, s)
			checkClose(t, "lstm act", get(c, act, B*4*H), wAct, 1e-7, 1e-6)
			checkClose(t, "lstm c", get(c, cell, B*H), wC, 1e-6, 1e-6)
			checkClose(t, "lstm h", get(c, h, B*H), wH, 1e-6, 1e-6)
			checkClose(t, "lstm out", get(c, out, B*T*H), out64, 1e-6, 1e-6)
			for name, g := range map[string]backend.Ref{"act": act, "c": cell, "h": h} {
				checkGuards(t, "lstm "+name, g, g.S.Len()-g.Off-3)
			}
			checkGuards(t, "lstm out", out, B*T*H)

			dgate, dxg := put(c, make([]float32, B*4*H), 1), put(c, dxgv, 2)
			dcprev := put(c, make([]float32, B*H), 2)
			if full {
				dcprev = dcR // in place, as the sequence runs it
			}
			c.LSTMCellBackward(p, dgate, dxg, dcprev, put(c, dout, 3), dhR, dcR, act, cell, cpR)
			// The reference reads the forward's float32 act and c, so the
			// comparison is of this kernel alone.
			dxg64 := widen(dxgv)
			wDG, wDC := ref.LSTMCellBackward(widen(dout), dh64, dc64, widen(get(c, act, B*4*H)), widen(get(c, cell, B*H)), cp64, dxg64, B, T, H, s)
			checkClose(t, "lstm dgate", get(c, dgate, B*4*H), wDG, 1e-6, 1e-5)
			checkClose(t, "lstm dxg", get(c, dxg, B*T*4*H), dxg64, 1e-6, 1e-5)
			checkClose(t, "lstm dcprev", get(c, dcprev, B*H), wDC, 1e-6, 1e-5)
			checkGuards(t, "lstm dxg", dxg, B*T*4*H)
			checkGuards(t, "lstm dcprev", dcprev, B*H)

			got := [][]float32{get(c, act, B*4*H), get(c, h, B*H), get(c, dxg, B*T*4*H), get(c, dcprev, B*H)}
			if !full {
				continue
			}
			if first == nil {
				first = got
				continue
			}
			for i := range got {
				if !slices.Equal(got[i], first[i]) {
					t.Fatalf("operand %d differs between 1 and %d threads", i, threads)
				}
			}
		}
	}
}

// BenchmarkLSTMCell is one step forward and backward of the gate kernels
// at the reference model's size (12 rows of 128 units).
func BenchmarkLSTMCell(b *testing.B) {
	const B, T, H = 12, 64, 128
	r := rng.New(1)
	c := newCPU(1)
	xg, rec, cprev := put(c, randF32(r, B*T*4*H, 1), 0), put(c, randF32(r, B*4*H, 1), 0), put(c, randF32(r, B*H, 1), 0)
	act, cell, h, out := put(c, make([]float32, B*4*H), 0), put(c, make([]float32, B*H), 0), put(c, make([]float32, B*H), 0), put(c, make([]float32, B*T*H), 0)
	dgate, dxg, dc, dout, dh := put(c, make([]float32, B*4*H), 0), put(c, make([]float32, B*T*4*H), 0), put(c, randF32(r, B*H, 1), 0), put(c, randF32(r, B*T*H, 1), 0), put(c, randF32(r, B*H, 1), 0)
	p := backend.LSTMStep{B: B, T: T, H: H, Step: 3}
	for i := 0; i < b.N; i++ {
		c.LSTMCell(p, act, cell, h, out, xg, rec, cprev)
		c.LSTMCellBackward(p, dgate, dxg, dc, dout, dh, dc, act, cell, cprev)
	}
}

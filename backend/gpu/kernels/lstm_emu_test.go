package kernels_test

// The kernels of lstm.cu under the emulation harness, launched through the
// op functions (lstm.go) and held, on random inputs, to the CPU backend's
// LSTMCells (itself held to backend/ref in float64, and the LSTM to
// finite differences and to PyTorch): a whole sequence of steps forward
// (the first from a zero state: no recurrent product, no previous cell)
// and backward (the last step without carries, the cell's carried in
// place), at two SM counts, bit for bit alike.

import (
	"fmt"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/backend/ref"
)

func init() {
	opCases.Add(map[string]emu.Case{
		"fleet_lstm_cell_f32":          lstmCase(false),
		"fleet_lstm_cell_backward_f32": lstmCase(true),
	})
}

// lstmShapes are B, T, H: one unit, widths that are not multiples of
// anything, and (under the parallel schedule) one past a pass of the
// grid-stride loop at one SM.
var lstmShapes = [][3]int{{1, 1, 1}, {2, 3, 5}, {3, 4, 16}, {5, 2, 33}, {9, 3, 70}}

func lstmShapesFor(m *emu.Module) [][3]int {
	if m.Schedule() == emu.Parallel {
		return lstmShapes
	}
	return lstmShapes[:3]
}

// slice is r from element off on.
func slice(r backend.Ref, off int) backend.Ref { return backend.Ref{S: r.S, Off: r.Off + off} }

// cpuAt is n elements of a CPU operand from its offset (cpuGet reads from
// its storage's start).
func cpuAt(r backend.Ref, n int) []float32 {
	return append([]float32(nil), cpuBuf(r).F32[r.Off:r.Off+n]...)
}

func lstmCase(backward bool) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(61)
		for _, s := range lstmShapesFor(m) {
			B, T, H := s[0], s[1], s[2]
			xg, out0 := randF32(rng, B*T*4*H, 2), randF32(rng, B*T*H, 1)
			recs := randF32(rng, T*B*4*H, 2)
			// The CPU's sequence: act and c of every step, out.
			act, cs := cpuF32(make([]float32, T*B*4*H)), cpuF32(make([]float32, (T+1)*B*H))
			hs, cout := cpuF32(make([]float32, B*H)), cpuF32(out0)
			for st := 0; st < T; st++ {
				p := backend.LSTMStep{B: B, T: T, H: H, Step: st}
				rec, cprev := slice(cpuF32(recs), st*B*4*H), slice(cs, st*B*H)
				if st == 0 {
					rec, cprev = backend.Ref{}, backend.Ref{}
				}
				cpuB.LSTMCell(p, slice(act, st*B*4*H), slice(cs, (st+1)*B*H), hs, cout, cpuF32(xg), rec, cprev)
			}
			what := fmt.Sprintf("lstm %dx%dx%d", B, T, H)
			if !backward {
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					out, dxg, drec := emu.NewF32(out0), emu.NewF32(xg), emu.NewF32(recs)
					var res [][]float32
					var cprev *emu.Buffer
					for st := 0; st < T; st++ {
						a, c, h := devOut(backend.F32, B*4*H), devOut(backend.F32, B*H), devOut(backend.F32, B*H)
						var rec *emu.Buffer
						if st > 0 {
							rec = emu.NewF32(drec.F32()[st*B*4*H : (st+1)*B*4*H])
						}
						must(t, kernels.LSTMCell(l, backend.LSTMStep{B: B, T: T, H: H, Step: st}, a, c, h, out, dxg, rec, cprev))
						res = append(res, a.F32(), c.F32())
						cprev = c
					}
					return append(res, out.F32())
				})
				for st := 0; st < T; st++ {
					checkClose(t, fmt.Sprintf("%s act, step %d", what, st), got[2*st], cpuAt(slice(act, st*B*4*H), B*4*H), 1e-5)
					checkClose(t, fmt.Sprintf("%s c, step %d", what, st), got[2*st+1], cpuAt(slice(cs, (st+1)*B*H), B*H), 1e-5)
				}
				checkClose(t, what+" out", got[2*T], cpuGet(cout, B*T*H), 1e-5)
				// And the float64 reference of the whole sequence.
				wantOut := widen64(out0)
				var rc, cp []float64
				for st := 0; st < T; st++ {
					if st > 0 {
						rc = widen64(recs[st*B*4*H : (st+1)*B*4*H])
					}
					_, cp, _ = ref.LSTMCell(widen64(xg), rc, cp, wantOut, B, T, H, st)
				}
				checkClose(t, what+" out (float64 reference)", got[2*T], narrow(wantOut), 1e-5)
				continue
			}
			// Backward over the steps in reverse, from the CPU's act and c.
			dout, dhs := randF32(rng, B*T*H, 1), randF32(rng, T*B*H, 1)
			dxg0 := randF32(rng, B*T*4*H, 1)
			cdg, cdxg, cdc := cpuF32(make([]float32, T*B*4*H)), cpuF32(dxg0), cpuF32(make([]float32, B*H))
			for st := T - 1; st >= 0; st-- {
				p := backend.LSTMStep{B: B, T: T, H: H, Step: st}
				dh, dc, cprev := slice(cpuF32(dhs), st*B*H), cdc, slice(cs, st*B*H)
				if st == T-1 {
					dh, dc = backend.Ref{}, backend.Ref{}
				}
				if st == 0 {
					cprev = backend.Ref{}
				}
				cpuB.LSTMCellBackward(p, slice(cdg, st*B*4*H), cdxg, cdc, cpuF32(dout), dh, dc, slice(act, st*B*4*H), slice(cs, (st+1)*B*H), cprev)
			}
			actv, csv := cpuGet(act, T*B*4*H), cpuGet(cs, (T+1)*B*H)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dxg, dc, ddout := emu.NewF32(dxg0), devOut(backend.F32, B*H), emu.NewF32(dout)
				var res [][]float32
				for st := T - 1; st >= 0; st-- {
					dg := devOut(backend.F32, B*4*H)
					var dh, dcIn, cprev *emu.Buffer
					if st < T-1 {
						dh, dcIn = emu.NewF32(dhs[st*B*H:(st+1)*B*H]), dc
					}
					if st > 0 {
						cprev = emu.NewF32(csv[st*B*H : (st+1)*B*H])
					}
					must(t, kernels.LSTMCellBackward(l, backend.LSTMStep{B: B, T: T, H: H, Step: st}, dg, dxg, dc, ddout, dh, dcIn,
						emu.NewF32(actv[st*B*4*H:(st+1)*B*4*H]), emu.NewF32(csv[(st+1)*B*H:(st+2)*B*H]), cprev))
					res = append(res, dg.F32())
				}
				return append(res, dxg.F32(), dc.F32())
			})
			for i, st := 0, T-1; st >= 0; i, st = i+1, st-1 {
				checkClose(t, fmt.Sprintf("%s dgate, step %d", what, st), got[i], cpuAt(slice(cdg, st*B*4*H), B*4*H), 1e-5)
			}
			checkClose(t, what+" dxg", got[T], cpuGet(cdxg, B*T*4*H), 1e-5)
			checkClose(t, what+" dc0", got[T+1], cpuGet(cdc, B*H), 1e-5)
		}
	}
}

// TestLSTMLaunches checks the launches' names and grids (no emulator
// needed), and that bad shapes are refused before any launch.
func TestLSTMLaunches(t *testing.T) {
	r := &launchRecorder{}
	p := backend.LSTMStep{B: 64, T: 128, H: 1024, Step: 5}
	must(t, kernels.LSTMCell(r, p, nil, nil, nil, nil, nil, nil, nil))
	must(t, kernels.LSTMCellBackward(r, p, nil, nil, nil, nil, nil, nil, nil, nil, nil))
	if fmt.Sprint(r.names) != "[fleet_lstm_cell_f32 fleet_lstm_cell_backward_f32]" || r.grids[0] != [3]int{64 * 1024 / 256, 1, 1} {
		t.Errorf("launches %v, grids %v", r.names, r.grids)
	}
	r = &launchRecorder{}
	for _, bad := range []backend.LSTMStep{{B: 1, T: 2, H: 3, Step: 2}, {B: 1, T: 2, H: 0}, {B: -1, T: 1, H: 1}, {B: 1 << 20, T: 1 << 10, H: 1 << 10}} {
		if kernels.LSTMCell(r, bad, nil, nil, nil, nil, nil, nil, nil) == nil {
			t.Errorf("%+v was accepted", bad)
		}
	}
	if len(r.names) != 0 {
		t.Errorf("bad calls launched %v", r.names)
	}
}

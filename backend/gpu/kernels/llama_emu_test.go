package kernels_test

// The kernels of llama.cu under the emulation harness, launched through
// the op functions (llama.go) and held, on random inputs, to the CPU
// backend's LlamaBlocks (itself held to backend/ref in float64 and to
// finite differences) and, for the forward passes, to backend/ref
// directly. Tolerances are ops_emu_test.go's: 1e-5 normwise for F32,
// 1e-2 for BF16 outputs (against the CPU in F32 on the same bf16-rounded
// inputs), statistics and weight gradients (F32) 1e-5. Every case runs at
// two SM counts, bit for bit alike.

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/backend/ref"
)

func init() {
	for _, dt := range floatDTs {
		opCases.Add(map[string]emu.Case{
			"fleet_rmsnorm_" + sfx(dt):          rmsNormCase(dt),
			"fleet_add_rmsnorm_" + sfx(dt):      addRMSNormCase(dt),
			"fleet_rmsnorm_backward_" + sfx(dt): rmsNormBackwardCase(dt, lnBwdShapes),
			"fleet_rotary_" + sfx(dt):           rotaryCase(dt),
			"fleet_rotary_backward_" + sfx(dt):  rotaryBackwardCase(dt),
			"fleet_swiglu_" + sfx(dt):           swigluCase(dt),
			"fleet_swiglu_backward_" + sfx(dt):  swigluBackwardCase(dt),
			"fleet_relu2_" + sfx(dt):            relu2Case(dt, false),
			"fleet_relu2_backward_" + sfx(dt):   relu2Case(dt, true),
		})
	}
	opCases.Add(map[string]emu.Case{"fleet_rotary_backward_dw_f32": rotaryBackwardCase(backend.F32)})
}

func widen64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func narrow(v []float64) []float32 {
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = float32(x)
	}
	return out
}

// ---- RMSNorm ------------------------------------------------------------

func rmsNormCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(41)
		const eps = 1e-5
		for _, sh := range lnFwdShapes {
			rows, cols := sh.rows, sh.cols
			x, w, _ := lnInput(rng, rows, cols)
			x = round(dt, x)
			co, cr := cpuF32(make([]float32, rows*cols)), cpuF32(make([]float32, rows))
			cpuB.RMSNorm(co, cr, cpuF32(x), cpuF32(w), rows, cols, eps)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				out, rstd := devOut(dt, rows*cols), emu.Poison(emu.F32, rows)
				must(t, kernels.RMSNorm(l, dt, out, rstd, devIn(dt, x), emu.NewF32(w), rows, cols, eps))
				return [][]float32{devGet(out), rstd.F32()}
			})
			what := fmt.Sprintf("rmsnorm %v %dx%d", dt, rows, cols)
			checkClose(t, what+" out", got[0], cpuGet(co, rows*cols), tol(dt))
			checkClose(t, what+" rstd", got[1], cpuGet(cr, rows), 1e-5)
			checkClose(t, what+" out (float64 reference)", got[0], narrow(ref.RMSNorm(widen64(x), widen64(w), rows, cols, eps)), tol(dt))
		}
	}
}

// addRMSNormCase holds the fused residual add and RMSNorm to the two
// kernels it fuses, fleet_dropout_add then fleet_rmsnorm, bit for bit,
// and to the CPU's: a plain add, a dropout add with a device base, and a
// dropout alone (no x).
func addRMSNormCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(42)
		const eps = 1e-6
		for _, sh := range lnFwdShapes {
			rows, cols := sh.rows, sh.cols
			x, w, _ := lnInput(rng, rows, cols)
			x, y := round(dt, x), round(dt, randF32(rng, rows*cols, 1))
			base := []int32{int32(rng.Uint32()), int32(rng.Uint32())}
			for kind, mask := range []backend.DropoutMask{{Scale: 1}, backend.NewDropoutMask(rng.Uint64(), 0, 0, 0.3), backend.NewDropoutMask(rng.Uint64(), 7, 3+int64(rng.IntN(1<<30)), 0.1)} {
				withX := kind != 2
				cs, co, cr := cpuF32(make([]float32, rows*cols)), cpuF32(make([]float32, rows*cols)), cpuF32(make([]float32, rows))
				var cx backend.Ref
				if withX {
					cx = cpuF32(x)
				}
				cmask := mask
				if kind == 1 {
					cmask.Base = cpuI32(base)
				}
				cpuB.AddRMSNorm(cs, co, cr, cx, cpuF32(y), cpuF32(w), rows, cols, eps, cmask)
				want := [][]float32{cpuGet(cs, rows*cols), cpuGet(co, rows*cols), cpuGet(cr, rows)}
				run := func(fused bool) [][]float32 {
					return twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
						sum, out, rstd := devOut(dt, rows*cols), devOut(dt, rows*cols), emu.Poison(emu.F32, rows)
						var dx, dbase *emu.Buffer
						if withX {
							dx = devIn(dt, x)
						}
						if kind == 1 {
							dbase = emu.NewI32(base)
						}
						if fused {
							must(t, kernels.AddRMSNorm(l, dt, sum, out, rstd, dx, devIn(dt, y), emu.NewF32(w), rows, cols, eps, mask, dbase))
						} else {
							el := launcher{elementwiseModule(t).WithSchedule(m.Schedule()), l.(launcher).sms}
							must(t, kernels.DropoutAdd(el, dt, sum, dx, devIn(dt, y), rows*cols, mask, dbase))
							must(t, kernels.RMSNorm(l, dt, out, rstd, sum, emu.NewF32(w), rows, cols, eps))
						}
						return [][]float32{devGet(sum), devGet(out), rstd.F32()}
					})
				}
				got, apart := run(true), run(false)
				what := fmt.Sprintf("add rmsnorm %v %dx%d kind %d", dt, rows, cols, kind)
				for k, name := range []string{"sum", "out", "rstd"} {
					checkBits(t, what+" "+name+" (fused against the two kernels)", got[k], apart[k])
					tl := tol(dt) // (bf16: the device's sum is stored rounded, the CPU's is not)
					if k == 2 && dt == backend.F32 {
						tl = 1e-5
					}
					checkClose(t, what+" "+name+" (against the CPU)", got[k], want[k], tl)
				}
			}
		}
	}
}

// rmsNormBackwardCase runs the one-launch backward pass (dw over chunks
// of 16 rows) with dw accumulating onto random values, and, in every
// other shape, a gathered gradient (dres) and a dropout's masked
// gradient; the counters, shared by the runs, must be zero after each.
func rmsNormBackwardCase(dt backend.DType, shapes []lnShape) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(43)
		defer kernels.SetChunkRows(16)()
		for _, sh := range shapes {
			rows, cols := sh.rows, sh.cols
			x, w, _ := lnInput(rng, rows, cols)
			x = round(dt, x)
			dout := round(dt, randF32(rng, rows*cols, 1))
			cr := cpuF32(make([]float32, rows))
			cpuB.RMSNorm(cpuF32(make([]float32, rows*cols)), cr, cpuF32(x), cpuF32(w), rows, cols, 1e-5)
			rstd := cpuGet(cr, rows)
			dw0 := randF32(rng, cols, 1)
			res := round(dt, randF32(rng, rows*cols, 1))
			withRes := (rows+cols)%2 == 0
			cdx, cdw, cres := cpuF32(make([]float32, rows*cols)), cpuF32(dw0), backend.Ref{}
			if withRes {
				cres = cpuF32(res)
			}
			mask := backend.NewDropoutMask(rng.Uint64(), 2, 2+int64(rng.IntN(1<<20)), 0.25)
			base := []int32{int32(rng.Uint32()), int32(rng.Uint32())}
			var cdrop backend.Ref
			cmask := mask
			if withRes {
				cdrop, cmask.Base = cpuF32(make([]float32, rows*cols)), cpuI32(base)
			}
			cpuB.RMSNormBackward(cdx, cres, cdw, cpuF32(dout), cpuF32(x), cpuF32(rstd), cpuF32(w), rows, cols, backend.DropoutOut{Dst: cdrop, Mask: cmask})
			want := [][]float32{cpuGet(cdx, rows*cols), cpuGet(cdw, cols), nil}
			if withRes {
				want[2] = cpuGet(cdrop, rows*cols)
			}
			done := emu.NewU32(make([]uint32, kernels.LayerNormBackwardCounters(cols)))
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dx, dw := devOut(dt, rows*cols), emu.NewF32(dw0)
				var resArg, dropArg, baseArg *emu.Buffer
				if withRes {
					resArg, dropArg, baseArg = devIn(dt, res), devOut(dt, rows*cols), emu.NewI32(base)
				}
				scratch := emu.Poison(emu.F32, kernels.RMSNormBackwardScratch(rows, cols))
				must(t, kernels.RMSNormBackward(l, dt, dx, resArg, dw, devIn(dt, dout), devIn(dt, x), emu.NewF32(rstd), emu.NewF32(w), scratch, done,
					rows, cols, dropArg, mask, baseArg))
				o := [][]float32{devGet(dx), dw.F32(), nil}
				if withRes {
					o[2] = devGet(dropArg)
				}
				return o
			})
			what := fmt.Sprintf("rmsnorm backward %v %dx%d dres=%v", dt, rows, cols, withRes)
			for i, v := range done.U32() {
				if v != 0 {
					t.Errorf("%s: counter %d is %d after the launches, want 0", what, i, v)
				}
			}
			checkClose(t, what+" dx", got[0], want[0], tol(dt))
			checkClose(t, what+" dw", got[1], want[1], 1e-5)
			if withRes {
				checkClose(t, what+" masked dx", got[2], want[2], tol(dt))
			}
		}
	}
}

// ---- Rotary -------------------------------------------------------------

// rotaryShapes cover a pair per lane and less (HD 8, 6), two pairs a lane
// with idle lanes (HD 100), the widest head (256: four pairs a lane),
// grouped heads, an inference call past position 0, and no rows at all.
var rotaryShapes = []backend.Rotary{
	{B: 2, T: 5, H: 4, KVH: 2, HD: 8, MaxPos: 8, Eps: 1e-6},
	{B: 1, T: 3, H: 2, KVH: 1, HD: 6, Pos: 4, MaxPos: 9, Eps: 1e-5},
	{B: 1, T: 4, H: 2, KVH: 2, HD: 100, MaxPos: 4, Eps: 1e-6},
	{B: 1, T: 2, H: 1, KVH: 1, HD: 256, MaxPos: 3, Eps: 1e-6},
	{B: 0, T: 3, H: 2, KVH: 1, HD: 8, MaxPos: 3},
}

// rotaryTable is the cos/sin table of RotaryAngles, as float32.
func rotaryTable(maxPos, hd int) []float32 {
	cos, sin := ref.RotaryAngles(maxPos, hd, 10000, nil)
	return append(narrow(cos), narrow(sin)...)
}

// rotaryInputs returns qkv, the table and the QK-norm weights of p.
func rotaryInputs(rng *rand.Rand, dt backend.DType, p backend.Rotary) (x, tab, qw, kw []float32) {
	return round(dt, randF32(rng, p.B*p.T*p.Width(), 1)), rotaryTable(p.MaxPos, p.HD), randF32(rng, p.HD, 1), randF32(rng, p.HD, 1)
}

func rotaryCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(44)
		for _, p := range rotaryShapes {
			for _, qk := range []bool{false, true} {
				x, tab, qw, kw := rotaryInputs(rng, dt, p)
				n, nr := p.B*p.T*p.Width(), p.B*p.T*(p.H+p.KVH)
				co, cr := cpuF32(make([]float32, n)), cpuF32(make([]float32, nr))
				var cqw, ckw, crr backend.Ref
				var qw64, kw64 []float64
				if qk {
					cqw, ckw, crr = cpuF32(qw), cpuF32(kw), cr
					qw64, kw64 = widen64(qw), widen64(kw)
				}
				cpuB.Rotary(p, co, crr, cpuF32(x), cqw, ckw, cpuF32(tab))
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					out, rstd := devOut(dt, n), emu.Poison(emu.F32, nr)
					var dqw, dkw, drs *emu.Buffer
					if qk {
						dqw, dkw, drs = emu.NewF32(qw), emu.NewF32(kw), rstd
					}
					must(t, kernels.Rotary(l, dt, p, out, drs, devIn(dt, x), dqw, dkw, emu.NewF32(tab)))
					return [][]float32{devGet(out), rstd.F32()}
				})
				what := fmt.Sprintf("rotary %v %+v qknorm=%v", dt, p, qk)
				checkClose(t, what+" out", got[0], cpuGet(co, n), tol(dt))
				cos, sin := widen64(tab[:p.MaxPos*p.HD/2]), widen64(tab[p.MaxPos*p.HD/2:])
				checkClose(t, what+" out (float64 reference)", got[0],
					narrow(ref.Rotary(widen64(x), p.B, p.T, p.H, p.KVH, p.HD, p.Pos, cos, sin, qw64, kw64, float64(p.Eps))), tol(dt))
				if qk {
					checkClose(t, what+" rstd", got[1], cpuGet(cr, nr), 1e-5)
				} else if nr > 0 {
					attnCheckPoison(t, what+" rstd (no QK-norm: not written)", got[1])
				}
			}
		}
	}
}

// rotaryBackwardCase runs the backward pass, with and without QK-norm,
// over chunks of 3 rows (several partial sums), dqw and dkw accumulating
// onto random values.
func rotaryBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(45)
		defer kernels.SetRotaryChunkRows(3)()
		for _, p := range rotaryShapes {
			for _, qk := range []bool{false, true} {
				x, tab, qw, kw := rotaryInputs(rng, dt, p)
				n, nr := p.B*p.T*p.Width(), p.B*p.T*(p.H+p.KVH)
				dout := round(dt, randF32(rng, n, 1))
				dq0, dk0 := randF32(rng, p.HD, 1), randF32(rng, p.HD, 1)
				var cqw, ckw, cdq, cdk, crs backend.Ref
				var rstd []float32
				if qk {
					cqw, ckw, crs = cpuF32(qw), cpuF32(kw), cpuF32(make([]float32, nr))
					cpuB.Rotary(p, cpuF32(make([]float32, n)), crs, cpuF32(x), cqw, ckw, cpuF32(tab))
					rstd = cpuGet(crs, nr)
					cdq, cdk = cpuF32(dq0), cpuF32(dk0)
				}
				cd := cpuF32(make([]float32, n))
				cpuB.RotaryBackward(p, cd, cdq, cdk, cpuF32(dout), cpuF32(x), crs, cqw, ckw, cpuF32(tab))
				want := [][]float32{cpuGet(cd, n), dq0, dk0}
				if qk {
					want[1], want[2] = cpuGet(cdq, p.HD), cpuGet(cdk, p.HD)
				}
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					d, dq, dk := devOut(dt, n), emu.NewF32(dq0), emu.NewF32(dk0)
					var bqw, bkw, bdq, bdk, brs, scratch *emu.Buffer
					if qk {
						bqw, bkw, bdq, bdk, brs = emu.NewF32(qw), emu.NewF32(kw), dq, dk, emu.NewF32(rstd)
						scratch = emu.Poison(emu.F32, kernels.RotaryBackwardScratch(p))
					}
					must(t, kernels.RotaryBackward(l, dt, p, d, bdq, bdk, devIn(dt, dout), devIn(dt, x), brs, bqw, bkw, emu.NewF32(tab), scratch))
					return [][]float32{devGet(d), dq.F32(), dk.F32()}
				})
				what := fmt.Sprintf("rotary backward %v %+v qknorm=%v", dt, p, qk)
				checkClose(t, what+" dqkv", got[0], want[0], tol(dt))
				checkClose(t, what+" dqw", got[1], want[1], 1e-5)
				checkClose(t, what+" dkw", got[2], want[2], 1e-5)
			}
		}
	}
}

// ---- SwiGLU -------------------------------------------------------------

// swigluShapes are rows×hidden: none, one, odd widths (element by
// element), and multiples of 8 (8 at a time), one of them past a pass of
// the grid-stride loop at one SM.
var swigluShapes = [][2]int{{0, 3}, {1, 1}, {3, 5}, {2, 8}, {5, 24}, {9, 13}, {40, 64}}

func swigluShapesFor(m *emu.Module) [][2]int {
	if m.Schedule() == emu.Parallel {
		return swigluShapes
	}
	return swigluShapes[:5]
}

func swigluCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(46)
		for _, s := range swigluShapesFor(m) {
			rows, hid := s[0], s[1]
			gu := round(dt, randF32(rng, 2*rows*hid, 3))
			co := cpuF32(make([]float32, rows*hid))
			cpuB.SwiGLU(co, cpuF32(gu), rows, hid)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				out := devOut(dt, rows*hid)
				must(t, kernels.SwiGLU(l, dt, out, devIn(dt, gu), rows, hid))
				return [][]float32{devGet(out)}
			})
			what := fmt.Sprintf("swiglu %v %dx%d", dt, rows, hid)
			checkClose(t, what, got[0], cpuGet(co, rows*hid), tol(dt))
			checkClose(t, what+" (float64 reference)", got[0], narrow(ref.SwiGLU(widen64(gu), rows, hid)), tol(dt))
		}
	}
}

func swigluBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(47)
		for _, s := range swigluShapesFor(m) {
			rows, hid := s[0], s[1]
			gu, dout := round(dt, randF32(rng, 2*rows*hid, 3)), round(dt, randF32(rng, rows*hid, 1))
			cd := cpuF32(make([]float32, 2*rows*hid))
			cpuB.SwiGLUBackward(cd, cpuF32(gu), cpuF32(dout), rows, hid)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				d := devOut(dt, 2*rows*hid)
				must(t, kernels.SwiGLUBackward(l, dt, d, devIn(dt, gu), devIn(dt, dout), rows, hid))
				return [][]float32{devGet(d)}
			})
			checkClose(t, fmt.Sprintf("swiglu backward %v %dx%d", dt, rows, hid), got[0], cpuGet(cd, 2*rows*hid), tol(dt))
		}
	}
}

// ---- ReLU² ----------------------------------------------------------------

// relu2Sizes are element counts: none, one, odd (element by element),
// multiples of 8 (8 at a time), and one past a pass of the 8-at-a-time
// grid-stride loop at one SM (8 blocks of 256 threads).
var relu2Sizes = []int{0, 1, 8, 301, 24, 2500, 8*8*256 + 40}

func relu2SizesFor(m *emu.Module) []int {
	if m.Schedule() == emu.Parallel {
		return relu2Sizes
	}
	return relu2Sizes[:4]
}

// relu2Case holds fleet_relu2_<dt> (or, backward, fleet_relu2_backward_<dt>)
// to the float64 reference and, bit for bit, to the CPU's F32 kernel on
// the same rounded inputs, rounded once to dt, on values of both signs
// (|x| ≥ 0.25).
func relu2Case(dt backend.DType, backward bool) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(48)
		for _, n := range relu2SizesFor(m) {
			x, dout := round(dt, randF32(rng, n, 1.5)), round(dt, randF32(rng, n, 1))
			co := cpuF32(make([]float32, n))
			want64 := ref.ReLU2(widen64(x))
			if backward {
				cpuB.ReLU2Backward(co, cpuF32(x), cpuF32(dout), n)
				want64 = ref.ReLU2Backward(widen64(x), widen64(dout))
			} else {
				cpuB.ReLU2(co, cpuF32(x), n)
			}
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				out := devOut(dt, n)
				if backward {
					must(t, kernels.ReLU2Backward(l, dt, out, devIn(dt, x), devIn(dt, dout), n))
				} else {
					must(t, kernels.ReLU2(l, dt, out, devIn(dt, x), n))
				}
				return [][]float32{devGet(out)}
			})
			what := fmt.Sprintf("relu2 backward=%v %v n=%d", backward, dt, n)
			checkBits(t, what+" (the CPU's F32, rounded)", got[0], round(dt, cpuGet(co, n)))
			checkClose(t, what+" (float64 reference)", got[0], narrow(want64), tol(dt))
		}
	}
}

// TestLlamaLaunches checks the launch sequences and shapes of the llama
// ops (no emulator needed), and that bad shapes are refused before any
// launch.
func TestLlamaLaunches(t *testing.T) {
	r := &launchRecorder{}
	p := backend.Rotary{B: 16, T: 1024, H: 12, KVH: 4, HD: 64, MaxPos: 1024}
	must(t, kernels.Rotary(r, backend.BF16, p, nil, nil, nil, nil, nil, nil))
	must(t, kernels.RotaryBackward(r, backend.BF16, p, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil))
	one := emu.NewF32([]float32{1})
	must(t, kernels.RotaryBackward(r, backend.BF16, p, nil, one, one, nil, nil, one, one, one, nil, one))
	want := []string{"fleet_rotary_bf16", "fleet_rotary_backward_bf16", "fleet_rotary_backward_bf16", "fleet_rotary_backward_dw_f32"}
	if fmt.Sprint(r.names) != fmt.Sprint(want) {
		t.Errorf("rotary launches %v, want %v", r.names, want)
	}
	// Forward: a warp per (row, head), 8 a block, capped at 8 blocks an
	// SM; backward: a block per 64 rows, exactly 256 threads.
	if r.grids[0] != [3]int{kernels.DefaultSMCount * kernels.BlocksPerSM, 1, 1} || r.grids[1] != [3]int{16 * 1024 / 64, 1, 1} ||
		r.grids[3] != [3]int{2 * 64 / 8, 1, 1} {
		t.Errorf("rotary grids %v", r.grids)
	}
	if n := kernels.RotaryBackwardScratch(p); n != 16*1024/64*2*64 {
		t.Errorf("rotary scratch %d", n)
	}
	r = &launchRecorder{}
	must(t, kernels.RMSNormBackward(r, backend.F32, nil, nil, nil, nil, nil, nil, nil, nil, nil, 600, 768, nil, backend.DropoutMask{}, nil))
	if fmt.Sprint(r.names) != "[fleet_rmsnorm_backward_f32]" || r.grids[0] != [3]int{10, 1, 1} { // a block per 64 rows
		t.Errorf("rmsnorm backward launches %v grids %v", r.names, r.grids)
	}
	if n := kernels.RMSNormBackwardScratch(600, 768); n != 10*768 {
		t.Errorf("rmsnorm backward scratch %d", n)
	}
	r = &launchRecorder{}
	for _, err := range []error{
		kernels.RMSNorm(r, backend.F16, nil, nil, nil, nil, 2, 3, 1e-5),
		kernels.Rotary(r, backend.F32, backend.Rotary{B: 1, T: 2, H: 1, KVH: 1, HD: 5, MaxPos: 2}, nil, nil, nil, nil, nil, nil),
		kernels.Rotary(r, backend.F32, backend.Rotary{B: 1, T: 2, H: 1, KVH: 1, HD: 258, MaxPos: 2}, nil, nil, nil, nil, nil, nil),
		kernels.Rotary(r, backend.F32, backend.Rotary{B: 1, T: 3, H: 1, KVH: 1, HD: 8, Pos: 1, MaxPos: 3}, nil, nil, nil, nil, nil, nil),
		kernels.RotaryBackward(r, backend.F32, backend.Rotary{B: 1, T: 2, H: 2, KVH: 0, HD: 8, MaxPos: 2}, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil),
		kernels.SwiGLU(r, backend.F16, nil, nil, 2, 2),
		kernels.ReLU2(r, backend.F16, nil, nil, 4),
		kernels.ReLU2Backward(r, backend.F32, nil, nil, nil, -1),
	} {
		if err == nil {
			t.Error("a bad call was accepted")
		}
	}
	if len(r.names) != 0 {
		t.Errorf("bad calls launched %v", r.names)
	}
}

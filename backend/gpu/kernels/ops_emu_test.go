package kernels_test

// Every kernel of the op files runs here under the CPU emulation harness
// (package emu), launched through the same op functions the CUDA backend
// uses, and is compared with the CPU backend on random inputs. Each run is
// repeated with a different SM count, so grids and grid-stride loops differ,
// and the outputs must be bit-identical (no kernel uses float atomics).
//
// Tolerances are normwise, ‖emu − cpu‖ / ‖cpu‖: 1e-5 for F32 outputs (the
// kernels and the CPU both compute in float32 but in different orders, and
// expf/logf/tanhf differ from the CPU's float64 math by about an ulp), 1e-2
// for BF16 outputs (one bf16 rounding is 2^-9 relative). BF16 kernels are
// compared with the CPU run in F32 on the bf16-rounded inputs. NaN never
// passes. Casts, fills and embeddings are compared bit for bit.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/cpu"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/internal/rng"
)

// opCases registers a case for every kernel of the files opFiles lists.
var opCases = emu.Cases{}

// opFiles are the kernel files whose cases opCases holds: every file but
// attention's, whose cases live with the attention tests. Between the two
// registries every kernel of the package must have a case; a new kernel
// file registers its cases here (opCases.Add in an init function of its
// own test file).
func opFiles() []cudakernels.File {
	var fs []cudakernels.File
	for _, f := range cudakernels.Files() {
		if !strings.HasPrefix(f.Name, "attention") {
			fs = append(fs, f)
		}
	}
	return fs
}

func TestOpsEmulated(t *testing.T) { opCases.Run(t, opFiles()) }

// launcher drives an emulated module with a chosen SM count: small counts
// keep grids small and make the grid-stride loops wrap.
type launcher struct {
	*emu.Module
	sms int
}

func (l launcher) SMCount() int { return l.sms }

// Launch runs a kernels op's launch in the emulator.
func (l launcher) Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[*emu.Buffer]) error {
	return l.Module.Launch(kernel, grid, block, shared, args.Values()...)
}

// smCounts are the SM counts each case runs under; the outputs must agree
// bit for bit.
var smCounts = []int{1, 2}

var floatDTs = []backend.DType{backend.F32, backend.BF16}

func sfx(dt backend.DType) string { return dt.String() }

var cpuB = cpu.New(backend.Device{Kind: "cpu"})

// ---- Host and CPU-backend helpers ----------------------------------------

// The CPU backend's storage is reached through its exported slices.
func cpuBuf(r backend.Ref) *cpu.Buffer { return r.S.(*cpu.Buffer) }

func cpuF32(v []float32) backend.Ref {
	r := backend.Ref{S: cpuB.Alloc(backend.F32, len(v))}
	copy(cpuBuf(r).F32, v)
	return r
}

func cpuI32(v []int32) backend.Ref {
	r := backend.Ref{S: cpuB.Alloc(backend.I32, len(v))}
	copy(cpuBuf(r).I32, v)
	return r
}

func cpuGet(r backend.Ref, n int) []float32 { return append([]float32(nil), cpuBuf(r).F32[:n]...) }

// cpuRaw returns n elements of r as raw bit patterns carried in float32s.
func cpuRaw(r backend.Ref, n int) []float32 {
	b, out := cpuBuf(r), make([]float32, n)
	for i := range out {
		switch b.DType() {
		case backend.F32:
			out[i] = b.F32[i]
		case backend.I32:
			out[i] = math.Float32frombits(uint32(b.I32[i]))
		default:
			out[i] = math.Float32frombits(uint32(b.U16[i]))
		}
	}
	return out
}

// round returns v as stored in dt (F32, BF16 or F16), widened back to
// float32.
func round(dt backend.DType, v []float32) []float32 {
	if dt == backend.F32 {
		return append([]float32(nil), v...)
	}
	out := make([]float32, len(v))
	for i, x := range v {
		if dt == backend.F16 {
			out[i] = backend.F16ToF32(backend.F32ToF16(x))
		} else {
			out[i] = backend.BF16ToF32(backend.F32ToBF16(x))
		}
	}
	return out
}

// devIn returns an emulator buffer holding v in storage dt.
func devIn(dt backend.DType, v []float32) *emu.Buffer {
	if dt == backend.F32 {
		return emu.NewF32(v)
	}
	h := make([]uint16, len(v))
	for i, x := range v {
		h[i] = backend.F32ToBF16(x)
	}
	return emu.NewU16(h)
}

// devOut returns a poisoned (all NaN) emulator buffer of n elements of dt.
func devOut(dt backend.DType, n int) *emu.Buffer {
	if dt == backend.F32 {
		return emu.Poison(emu.F32, n)
	}
	return emu.Poison(emu.U16, n)
}

// devGet reads an F32 or BF16 buffer as float32.
func devGet(b *emu.Buffer) []float32 {
	if b.DType() == emu.F32 {
		return b.F32()
	}
	h := b.U16()
	out := make([]float32, len(h))
	for i, x := range h {
		out[i] = backend.BF16ToF32(x)
	}
	return out
}

// tol is the normwise tolerance for outputs stored in dt.
func tol(dt backend.DType) float64 {
	if dt == backend.BF16 {
		return 1e-2
	}
	return 1e-5
}

// checkClose fails unless got is within rel of want, normwise; a NaN or
// infinity in got never passes.
func checkClose(t *testing.T, what string, got, want []float32, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	var num, den float64
	worst := -1
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		if math.IsNaN(g) || math.IsInf(g, 0) || math.IsNaN(w) || math.IsInf(w, 0) {
			t.Fatalf("%s: [%d] is %v, want %v (non-finite)", what, i, got[i], want[i])
		}
		num += (g - w) * (g - w)
		den += w * w
		if worst < 0 || math.Abs(g-w) > math.Abs(float64(got[worst])-float64(want[worst])) {
			worst = i
		}
	}
	if num == 0 {
		return
	}
	if den == 0 || math.Sqrt(num/den) > rel {
		t.Fatalf("%s: normwise relative error %.3g > %g (worst [%d]: %v, want %v)", what, math.Sqrt(num/max(den, 1e-300)), rel, worst, got[worst], want[worst])
	}
}

// checkBits fails unless got and want are bit-identical.
func checkBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: [%d] is %v (%#08x), want %v (%#08x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

// twice runs f once per SM count and fails unless the runs' outputs are
// bit-identical; it returns the first run's. f builds its own buffers and
// returns its outputs as float32 (raw bits for integer and 16-bit results
// compared bit for bit).
func twice(t *testing.T, m *emu.Module, f func(l kernels.Launcher[*emu.Buffer]) [][]float32) [][]float32 {
	t.Helper()
	return runWith(t, m, smCounts, f)
}

// once runs f at one SM, for elementwise kernels: each element is computed
// by one thread on its own, so there is no order to check, and one SM makes
// the grid-stride loop wrap soonest.
func once(t *testing.T, m *emu.Module, f func(l kernels.Launcher[*emu.Buffer]) [][]float32) [][]float32 {
	t.Helper()
	return runWith(t, m, smCounts[:1], f)
}

// elemSizesFor is elemSizes under the parallel schedule and the small sizes
// under the serial ones: elementwise threads never exchange data, so the
// serial schedules, which expose races, need only a few elements.
func elemSizesFor(m *emu.Module) []int {
	if m.Schedule() == emu.Parallel {
		return elemSizes
	}
	return elemSizes[:4]
}

func runWith(t *testing.T, m *emu.Module, counts []int, f func(l kernels.Launcher[*emu.Buffer]) [][]float32) [][]float32 {
	t.Helper()
	var first [][]float32
	for i, sms := range counts {
		out := f(launcher{m, sms})
		if i == 0 {
			first = out
			continue
		}
		for k := range out {
			checkBits(t, fmt.Sprintf("output %d with %d SMs against %d SMs (determinism)", k, sms, smCounts[0]), out[k], first[k])
		}
	}
	return first
}

// must fails the test on a launch error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func newRNG(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x5eed)) }

// randF32 is emu.RandF32 scaled by s.
func randF32(rng *rand.Rand, n int, s float32) []float32 {
	v := emu.RandF32(rng, n)
	for i := range v {
		v[i] *= s
	}
	return v
}

func init() {
	for _, dt := range floatDTs {
		opCases.Add(map[string]emu.Case{
			"fleet_binary_" + sfx(dt):                binaryCase(dt),
			"fleet_dropout_add_" + sfx(dt):           dropoutAddCase(dt),
			"fleet_axpy_" + sfx(dt):                  axpyCase(dt),
			"fleet_scale_" + sfx(dt):                 scaleCase(dt),
			"fleet_unary_" + sfx(dt):                 unaryCase(dt),
			"fleet_gelu_" + sfx(dt):                  geluCase(dt),
			"fleet_gelu_backward_" + sfx(dt):         geluBackwardCase(dt),
			"fleet_bias_gelu_" + sfx(dt):             biasGELUCase(dt),
			"fleet_sumrows_partial_" + sfx(dt):       sumRowsCase(dt),
			"fleet_softmax_" + sfx(dt):               softmaxCase(dt),
			"fleet_softmax_backward_" + sfx(dt):      softmaxBackwardCase(dt),
			"fleet_layernorm_" + sfx(dt):             layerNormCase(dt),
			"fleet_add_layernorm_" + sfx(dt):         addLayerNormCase(dt),
			"fleet_layernorm_backward_" + sfx(dt):    layerNormBackwardCase(dt, lnBwdShapes),
			"fleet_crossentropy_" + sfx(dt):          crossEntropyCase(dt),
			"fleet_crossentropy_backward_" + sfx(dt): crossEntropyBackwardCase(dt),
			"fleet_crossentropy_fused_" + sfx(dt):    crossEntropyFusedCase(dt),
			"fleet_embedding_" + sfx(dt):             embeddingCase(dt),
			"fleet_embedding_backward_" + sfx(dt):    embeddingBackwardCase(dt),
		})
	}
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.F16, backend.I32} {
		opCases.Add(map[string]emu.Case{"fleet_fill_" + sfx(dt): fillCase(dt)})
	}
	for _, from := range []backend.DType{backend.F32, backend.BF16, backend.F16, backend.I32} {
		for _, to := range []backend.DType{backend.F32, backend.BF16, backend.F16} {
			if from != to {
				opCases.Add(map[string]emu.Case{"fleet_cast_" + sfx(from) + "_" + sfx(to): castCase(from, to)})
			}
		}
	}
	opCases.Add(map[string]emu.Case{
		"fleet_colsum_f32":             colSumCase,
		"fleet_sumcols_f32":            sumColsCase,
		"fleet_sumsquares_partial_f32": sumSquaresCase,
		"fleet_sumsquares_finish_f32":  sumSquaresFinishCase,
		"fleet_adamw_f32":              adamWCase,
		"fleet_track_loss_f32":         trackLossCase,
		"fleet_clip_coef_f32":          clipCoefCase,
		"fleet_scaler_coef_f32":        scalerCoefCase,
		"fleet_step_clock_f32":         stepClockCase,
		"fleet_step_dropout_key_f32":   stepDropoutKeyCase,
	})
}

// elemSizes are the lengths elementwise cases run over: empty, one, odd,
// and more than one pass of the grid-stride loop at one SM (8·256 threads).
var elemSizes = []int{0, 1, 7, 300, 2500}

// ---- Elementwise ------------------------------------------------------------

func fillCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		for _, n := range []int{0, 1, 2500} {
			for _, v := range []float32{-2.75, 1e-6, 70000, -0.0} {
				r := backend.Ref{S: cpuB.Alloc(dt, n)}
				cpuB.Fill(r, v, n)
				want := cpuRaw(r, n)
				got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					b := emu.Poison(emuType(dt), n)
					must(t, kernels.Fill(l, dt, b, v, n))
					return [][]float32{rawBits(b)}
				})
				checkBits(t, fmt.Sprintf("fill %v n=%d v=%v", dt, n, v), got[0], want)
			}
		}
	}
}

func emuType(dt backend.DType) emu.DType {
	switch dt {
	case backend.F32:
		return emu.F32
	case backend.I32:
		return emu.I32
	}
	return emu.U16
}

// rawBits returns a buffer's elements as raw bit patterns carried in float32s.
func rawBits(b *emu.Buffer) []float32 {
	var out []float32
	switch b.DType() {
	case emu.F32:
		out = b.F32()
	case emu.I32:
		for _, x := range b.I32() {
			out = append(out, math.Float32frombits(uint32(x)))
		}
	case emu.U16:
		for _, x := range b.U16() {
			out = append(out, math.Float32frombits(uint32(x)))
		}
	}
	if out == nil {
		out = []float32{}
	}
	return out
}

func binaryCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(1)
		for _, n := range elemSizesFor(m) {
			for op := backend.Add; op <= backend.Div; op++ {
				a, b := round(dt, randF32(rng, n, 1)), round(dt, randF32(rng, n, 1))
				out := cpuF32(make([]float32, n))
				cpuB.Binary(op, out, cpuF32(a), cpuF32(b), n)
				want := cpuGet(out, n)
				for _, alias := range []bool{false, true} {
					got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
						da, db := devIn(dt, a), devIn(dt, b)
						dst := devOut(dt, n)
						if alias {
							dst = db
						}
						must(t, kernels.Binary(l, dt, op, dst, da, db, n))
						return [][]float32{devGet(dst)}
					})
					checkClose(t, fmt.Sprintf("binary %v op %d n=%d alias=%v", dt, op, n, alias), got[0], want, tol(dt))
				}
			}
		}
	}
}

// dropoutAddCase holds the kernel's mask, drawn per element on the
// device, to the CPU backend's: for F32 bit for bit, so the two devices
// drop the same elements.
func dropoutAddCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(23)
		for _, n := range elemSizesFor(m) {
			x, y := round(dt, randF32(rng, n, 1)), round(dt, randF32(rng, n, 1))
			mask := backend.NewDropoutMask(rng.Uint64(), 4, 1+int64(rng.IntN(1<<20)), 0.3)
			base := []int32{int32(rng.Uint32()), int32(rng.Uint32())}
			for _, withX := range []bool{false, true} {
				out := cpuF32(make([]float32, n))
				var cx backend.Ref
				cmask := mask
				if withX { // and a state read on the device: a replayed step's
					cx, cmask.Base = cpuF32(x), cpuI32(base)
				}
				cpuB.DropoutAdd(out, cx, cpuF32(y), n, cmask)
				want := cpuGet(out, n)
				for _, alias := range []bool{false, true} {
					got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
						dy := devIn(dt, y)
						var dx, db *emu.Buffer
						if withX {
							dx, db = devIn(dt, x), emu.NewI32(base)
						}
						dst := devOut(dt, n)
						if alias {
							dst = dy
						}
						must(t, kernels.DropoutAdd(l, dt, dst, dx, dy, n, mask, db))
						return [][]float32{devGet(dst)}
					})
					what := fmt.Sprintf("dropout_add %v n=%d x=%v alias=%v", dt, n, withX, alias)
					if dt == backend.F32 {
						checkBits(t, what, got[0], want)
					} else {
						checkClose(t, what, got[0], want, tol(dt))
					}
				}
			}
		}
	}
}

func axpyCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(2)
		for _, n := range elemSizesFor(m) {
			d, x := round(dt, randF32(rng, n, 1)), round(dt, randF32(rng, n, 1))
			cd := cpuF32(d)
			cpuB.Axpy(cd, cpuF32(x), 0.7, n)
			want := cpuGet(cd, n)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dd := devIn(dt, d)
				must(t, kernels.Axpy(l, dt, dd, devIn(dt, x), 0.7, n))
				return [][]float32{devGet(dd)}
			})
			checkClose(t, fmt.Sprintf("axpy %v n=%d", dt, n), got[0], want, tol(dt))
		}
	}
}

func scaleCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(3)
		for _, n := range elemSizesFor(m) {
			x := round(dt, randF32(rng, n, 1))
			cd := cpuF32(make([]float32, n))
			cpuB.Scale(cd, cpuF32(x), -1.7, n)
			want := cpuGet(cd, n)
			for _, alias := range []bool{false, true} {
				got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					src := devIn(dt, x)
					dst := devOut(dt, n)
					if alias {
						dst = src
					}
					must(t, kernels.Scale(l, dt, dst, src, -1.7, n))
					return [][]float32{devGet(dst)}
				})
				checkClose(t, fmt.Sprintf("scale %v n=%d alias=%v", dt, n, alias), got[0], want, tol(dt))
			}
		}
	}
}

func unaryCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(4)
		for _, n := range elemSizesFor(m) {
			for op := backend.Neg; op <= backend.Sqrt; op++ {
				x := randF32(rng, n, 2)
				if op == backend.Log || op == backend.Sqrt {
					for i := range x {
						x[i] = float32(math.Abs(float64(x[i])))
					}
				}
				x = round(dt, x)
				cd := cpuF32(make([]float32, n))
				cpuB.Unary(op, cd, cpuF32(x), n)
				want := cpuGet(cd, n)
				for _, alias := range []bool{false, true} {
					got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
						src := devIn(dt, x)
						dst := devOut(dt, n)
						if alias {
							dst = src
						}
						must(t, kernels.Unary(l, dt, op, dst, src, n))
						return [][]float32{devGet(dst)}
					})
					checkClose(t, fmt.Sprintf("unary %v op %d n=%d alias=%v", dt, op, n, alias), got[0], want, tol(dt))
				}
			}
		}
	}
}

func geluCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(5)
		for _, n := range elemSizesFor(m) {
			x := round(dt, randF32(rng, n, 3))
			cd := cpuF32(make([]float32, n))
			cpuB.GELU(cd, cpuF32(x), n)
			want := cpuGet(cd, n)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dst := devOut(dt, n)
				must(t, kernels.GELU(l, dt, dst, devIn(dt, x), n))
				return [][]float32{devGet(dst)}
			})
			checkClose(t, fmt.Sprintf("gelu %v n=%d", dt, n), got[0], want, tol(dt))
		}
	}
}

// biasGELUCase holds the fused bias and GELU to the CPU's add of the bias
// row by row (rounded to dt, as stored) followed by its GELU: pre as it
// writes it, and h.
func biasGELUCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(7)
		shapes := [][2]int{{1, 1}, {3, 5}, {7, 33}, {64, 96}, {129, 40}}
		if m.Schedule() != emu.Parallel {
			shapes = shapes[:3]
		}
		for _, s := range shapes {
			rows, cols := s[0], s[1]
			n := rows * cols
			y, b := round(dt, randF32(rng, n, 3)), round(dt, randF32(rng, cols, 1))
			pre := make([]float32, n)
			for i := range pre {
				pre[i] = y[i] + b[i%cols]
			}
			pre = round(dt, pre)
			cd := cpuF32(make([]float32, n))
			cpuB.GELU(cd, cpuF32(pre), n)
			want := cpuGet(cd, n)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				p, h := devIn(dt, y), devOut(dt, n)
				must(t, kernels.BiasGELU(l, dt, p, h, devIn(dt, b), rows, cols))
				return [][]float32{devGet(p), devGet(h)}
			})
			checkBits(t, fmt.Sprintf("bias_gelu %v %d×%d: pre", dt, rows, cols), got[0], pre)
			checkClose(t, fmt.Sprintf("bias_gelu %v %d×%d: h", dt, rows, cols), got[1], want, tol(dt))
		}
	}
}

func geluBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(6)
		for _, n := range elemSizesFor(m) {
			x, dy := round(dt, randF32(rng, n, 3)), round(dt, randF32(rng, n, 1))
			cd := cpuF32(make([]float32, n))
			cpuB.GELUBackward(cd, cpuF32(x), cpuF32(dy), n)
			want := cpuGet(cd, n)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dx := devOut(dt, n)
				must(t, kernels.GELUBackward(l, dt, dx, devIn(dt, x), devIn(dt, dy), n))
				return [][]float32{devGet(dx)}
			})
			checkClose(t, fmt.Sprintf("gelu backward %v n=%d", dt, n), got[0], want, tol(dt))
		}
	}
}

func adamWCase(t *testing.T, m *emu.Module) {
	rng := newRNG(7)
	for _, n := range elemSizesFor(m) {
		for _, step := range []int{1, 7} {
			p := backend.AdamW{LR: 0.05, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1, Step: step}
			w0, g := randF32(rng, n, 1), randF32(rng, n, 1)
			m0, v0 := randF32(rng, n, 0.1), randF32(rng, n, 0.01)
			for i := range v0 {
				v0[i] = float32(math.Abs(float64(v0[i])))
			}
			// Without a gradient scale, with a clip coefficient, and with
			// one that is not finite (the step is skipped); and, with the
			// coefficient, the learning rate and step's constants read on
			// the device (Sched), as the fp16 scaler writes them.
			for _, scale := range []float32{1, 0.37, float32(math.NaN()), -2} {
				var sched []float32
				if scale == -2 {
					scale, sched = 0.37, []float32{0.04, 0.61, 1.7}
				}
				cp := p
				if step == 7 { // weight decay on the first third only
					p.DecayEnd, cp.DecayEnd = n/3, n/3
				}
				if scale != 1 {
					cp.GradScale = cpuF32([]float32{scale})
				}
				if sched != nil {
					cp.Sched = cpuF32(sched)
				}
				cw, cm, cv := cpuF32(w0), cpuF32(m0), cpuF32(v0)
				cpuB.AdamW(cp, cw, cpuF32(g), cm, cv, n)
				want := [][]float32{delta(cpuGet(cw, n), w0), cpuGet(cm, n), cpuGet(cv, n)}
				var half []float32 // the bf16 copy the step also writes
				got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					dw, dm, dv := emu.NewF32(w0), emu.NewF32(m0), emu.NewF32(v0)
					var ds *emu.Buffer
					if scale != 1 {
						ds = emu.NewF32([]float32{scale})
					}
					var dsch *emu.Buffer
					if sched != nil {
						dsch = emu.NewF32(sched)
					}
					dh := emu.Poison(emu.U16, n)
					must(t, kernels.AdamWSched(l, p, dw, emu.NewF32(g), dm, dv, ds, dsch, dh, n))
					half = devGet(dh)
					return [][]float32{delta(dw.F32(), w0), dm.F32(), dv.F32(), dw.F32()}
				})
				for i, w := range got[3] {
					want := backend.BF16ToF32(backend.F32ToBF16(w))
					if scale != scale { // skipped: the copy is left alone
						if half[i] == half[i] {
							t.Fatalf("adamw n=%d: a skipped step wrote the bf16 copy", n)
						}
						break
					}
					if math.Float32bits(half[i]) != math.Float32bits(want) {
						t.Fatalf("adamw n=%d: bf16 copy [%d] = %v, want %v (the parameter %v rounded)", n, i, half[i], want, w)
					}
				}
				got = got[:3]
				// The parameters are compared by their change, which is what
				// the step computes (the parameters themselves barely move).
				for k, name := range []string{"param update", "m", "v"} {
					checkClose(t, fmt.Sprintf("adamw %s n=%d step=%d scale=%v decay end=%d sched=%v", name, n, step, scale, p.DecayEnd, sched), got[k], want[k], 1e-5)
				}
				if scale != scale && n > 0 && (got[0][0] != 0 || got[1][0] != m0[0]) {
					t.Errorf("adamw n=%d: a gradient scale of NaN changed the parameters or moments", n)
				}
			}
		}
	}
}

// scalerCoefCase holds fp16's scaler step on the device to the CPU's, bit
// for bit: clean steps (growing the scale at the interval, clipping or
// not), an overflow (skipped: the scale halves), and steps past the end of
// the learning-rate table.
func scalerCoefCase(t *testing.T, m *emu.Module) {
	lrs := []float32{1e-3, 2e-3, 3e-3}
	for _, c := range []struct {
		sq      float32
		state   []float32 // scale, tracker, skipped, seed, lr, stepSize, invBC2Sqrt, t
		step    int
		maxNorm float64
	}{
		{4e6, []float32{1024, 0, 0, 0, 0, 0, 0, 0}, 0, 1},
		{4e6, []float32{1024, 2, 1, 0, 0, 0, 0, 0}, 2, 0},  // the third clean step: the scale grows
		{1e2, []float32{65536, 1, 0, 0, 0, 0, 0, 0}, 9, 1}, // past the table's end
		{float32(math.Inf(1)), []float32{65536, 1, 3, 0, 0, 0, 0, 0}, 5, 1},
		{float32(math.NaN()), []float32{2, 0, 0, 0, 0, 0, 0, 0}, 1, 1},
	} {
		s := backend.Scaler{NLR: len(lrs), GrowthInterval: 3, SeedFactor: 0.5, Beta1: 0.9, Beta2: 0.95}
		st0 := []float32{0, -1, 0, -1}
		cc, cs, cst := cpuF32([]float32{7}), cpuF32(st0), cpuF32(c.state)
		s.State, s.LRs = cst, cpuF32(lrs)
		cpuB.ScalerCoef(cc, cs, cpuF32([]float32{c.sq}), c.maxNorm, c.step, s)
		want := append(append(cpuGet(cc, 1), cpuGet(cs, 4)...), cpuGet(cst, backend.ScalerStateLen)...)
		got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
			dc, ds, dst := emu.NewF32([]float32{7}), emu.NewF32(st0), emu.NewF32(c.state)
			must(t, kernels.ScalerCoef(l, dc, ds, emu.NewF32([]float32{c.sq}), dst, emu.NewF32(lrs), c.maxNorm, c.step, s))
			return [][]float32{append(append(dc.F32(), ds.F32()...), dst.F32()...)}
		})
		checkBits(t, fmt.Sprintf("scaler coef of sum %v, state %v, step %d", c.sq, c.state, c.step), got[0], want)
		finite := !math.IsInf(float64(c.sq), 0) && c.sq == c.sq
		if sc := want[5]; finite != (sc >= c.state[0]) || (!finite && sc != c.state[0]/2) {
			t.Errorf("sum %v: the scale went %v -> %v", c.sq, c.state[0], sc)
		}
	}
}

// stepClockCase holds a replayed step's clock and schedule on the device
// to the CPU's, bit for bit, and the bookkeeping kernels reading the step
// number from the clock.
func stepClockCase(t *testing.T, m *emu.Module) {
	lrs := []float32{1e-3, 2e-3, 3e-3}
	for _, i := range []float32{0, 2, 40} {
		st0 := []float32{0.5, -1, 0, -1, i}
		for _, withSched := range []bool{false, true} {
			cs, csch := cpuF32(st0), cpuF32([]float32{9, 9, 9})
			var sch backend.Ref
			if withSched {
				sch = csch
			}
			cpuB.StepClock(cs, sch, cpuF32(lrs), len(lrs), 0.9, 0.95)
			// then the step's bookkeeping, from the clock: a loss that is
			// not finite and gradients that are not finite
			cpuB.TrackLoss(cs, cpuF32([]float32{float32(math.NaN())}), 1, -1)
			cpuB.ClipCoef(cpuF32([]float32{0}), cs, cpuF32([]float32{float32(math.Inf(1))}), 1, -1)
			want := append(cpuGet(cs, 5), cpuGet(csch, 3)...)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				ds, dsch := emu.NewF32(st0), emu.NewF32([]float32{9, 9, 9})
				var s *emu.Buffer
				if withSched {
					s = dsch
				}
				must(t, kernels.StepClock(l, ds, s, emu.NewF32(lrs), len(lrs), 0.9, 0.95))
				must(t, kernels.TrackLoss(l, ds, emu.NewF32([]float32{float32(math.NaN())}), 1, -1))
				must(t, kernels.ClipCoef(l, emu.NewF32([]float32{0}), ds, emu.NewF32([]float32{float32(math.Inf(1))}), 1, -1))
				return [][]float32{append(ds.F32(), dsch.F32()...)}
			})
			checkBits(t, fmt.Sprintf("step clock at %v, sched %v", i, withSched), got[0], want)
			if want[4] != i+1 || want[1] != i+1 || want[3] != i+1 {
				t.Errorf("clock at %v: stats %v, want the step number %v recorded", i, want[:5], i+1)
			}
		}
	}
}

// stepDropoutKeyCase holds a replayed step's dropout key, hashed on the
// device, to the CPU's, which is rng.Mix's: bit for bit.
func stepDropoutKeyCase(t *testing.T, m *emu.Module) {
	for _, i := range []float32{1, 7, 123456} {
		st := []float32{0, -1, 0, -1, i}
		cb := cpuI32(make([]int32, 2))
		cpuB.StepDropoutKey(cb, cpuF32(st), 1337)
		want := make([]int32, 2)
		cpuB.Download(backend.AsBytes(want), cb)
		got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
			db := emu.NewI32(make([]int32, 2))
			must(t, kernels.StepDropoutKey(l, db, emu.NewF32(st), 1337))
			v := db.I32()
			out := make([]float32, len(v))
			for k, x := range v {
				out[k] = math.Float32frombits(uint32(x))
			}
			return [][]float32{out}
		})
		for k := range want {
			if math.Float32bits(got[0][k]) != uint32(want[k]) {
				t.Fatalf("dropout key at step index %v: device %x, CPU %x", i-1, got[0], want)
			}
		}
		// The key is the step's, rng.Mix(seed, 0xd0, i).
		if h := rng.Mix(1337, 0xd0, uint64(i-1)); uint32(want[0]) != uint32(h) || uint32(want[1]) != uint32(h>>32) {
			t.Fatalf("the CPU's key is not the step's")
		}
	}
}

func delta(a, b []float32) []float32 {
	d := make([]float32, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}

// ---- Casts --------------------------------------------------------------------

// castInputs returns test inputs for a cast from dt, as the CPU backend
// stores them (float32 values, or uint16 or int32 bit patterns).
func castInputs(dt backend.DType) any {
	rng := newRNG(8)
	switch dt {
	case backend.F32:
		bits := []uint32{
			0x00000000, 0x80000000, 0x7f800000, 0xff800000, // zeros, infinities
			0x7fc00000, 0xffc00001, 0x7f800001, 0x7fbfffff, 0xff812345, // quiet and signalling NaNs
			0x00000001, 0x807fffff, 0x00400000, // f32 subnormals
			0x7f7fffff, 0xff7fffff, // largest finite: bf16 rounds to infinity
			0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, // bf16 ties to even, just above and below
			0x3f801000, 0x3f803000, 0x3f801001, // f16 ties and just above
			0x477fe000, 0x477fefff, 0x477ff000, 0x47800000, // f16: 65504, below and at the overflow tie, 65536
			0x38800000, 0x387fc000, 0x33800000, 0x33000000, 0x33000001, 0x32ffffff, // f16 smallest normal, subnormals, underflow ties
			0x35800000, 0x35a00000, 0x35c00000, 0x35e00000, // f16 subnormal rounding
		}
		for range 4000 {
			bits = append(bits, rng.Uint32())
		}
		for range 4000 {
			// log-uniform magnitudes over the f16 range and a bit beyond
			e := -30 + 48*rng.Float64()
			bits = append(bits, math.Float32bits(float32(math.Copysign(math.Exp2(e), rng.Float64()-0.5))))
		}
		v := make([]float32, len(bits))
		for i, b := range bits {
			v[i] = math.Float32frombits(b)
		}
		return v
	case backend.BF16, backend.F16:
		v := make([]uint16, 1<<16)
		for i := range v {
			v[i] = uint16(i)
		}
		return v
	default:
		v := []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 1 << 24, 1<<24 + 1, 1<<24 + 3, -(1<<24 + 1), 65504, 65520, 70000, 257, 511}
		for range 3000 {
			v = append(v, int32(rng.Uint32()))
		}
		for range 1000 {
			v = append(v, int32(rng.IntN(1<<18))-1<<17)
		}
		return v
	}
}

func castCase(from, to backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		in := castInputs(from)
		n := lenOf(in)
		src := backend.Ref{S: cpuB.Alloc(from, n)}
		switch v := in.(type) {
		case []float32:
			copy(cpuBuf(src).F32, v)
		case []uint16:
			copy(cpuBuf(src).U16, v)
		case []int32:
			copy(cpuBuf(src).I32, v)
		}
		dst := backend.Ref{S: cpuB.Alloc(to, n)}
		cpuB.Cast(dst, src, n)
		want := cpuRaw(dst, n)
		for _, k := range []int{n, 1, 0} { // the whole input, one element, none
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				var s *emu.Buffer
				switch v := in.(type) {
				case []float32:
					s = emu.NewF32(v)
				case []uint16:
					s = emu.NewU16(v)
				case []int32:
					s = emu.NewI32(v)
				}
				d := emu.Poison(emuType(to), n)
				must(t, kernels.Cast(l, to, from, d, s, k))
				return [][]float32{rawBits(d)}
			})
			checkBits(t, fmt.Sprintf("cast %v to %v, %d elements", from, to, k), got[0][:k], want[:k])
			for i, x := range got[0][k:] {
				if i%4096 == 0 && !isCanary(x, to) { // a sample: the emu buffer's guards catch the rest
					t.Fatalf("cast %v to %v, %d elements: wrote element %d beyond n", from, to, k, k+i)
				}
			}
		}
	}
}

// isCanary reports whether a raw value is the poison a fresh emu.Poison
// buffer holds.
func isCanary(x float32, dt backend.DType) bool {
	return math.Float32bits(x) == math.Float32bits(rawBits(emu.Poison(emuType(dt), 1))[0])
}

func lenOf(v any) int {
	switch s := v.(type) {
	case []float32:
		return len(s)
	case []uint16:
		return len(s)
	case []int32:
		return len(s)
	}
	panic("lenOf")
}

// ---- Reductions -----------------------------------------------------------------

func sumRowsCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(9)
		defer kernels.SetChunkRows(16)()
		// 40 and 70 rows span three and five chunks of 16.
		for _, sh := range [][2]int{{1, 1}, {5, 33}, {40, 70}, {70, 3}, {16, 2}, {0, 5}, {7, 0}} {
			rows, cols := sh[0], sh[1]
			for _, beta := range []float32{0, 0.5} {
				src := round(dt, randF32(rng, rows*cols, 1))
				d0 := randF32(rng, cols, 1)
				cd := cpuF32(d0)
				cpuB.SumRows(cd, cpuF32(src), rows, cols, beta)
				want := cpuGet(cd, cols)
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					dst := emu.NewF32(d0)
					if beta == 0 {
						dst = emu.Poison(emu.F32, cols) // NaN garbage must not survive
					}
					scratch := emu.Poison(emu.F32, kernels.SumRowsScratch(rows, cols))
					must(t, kernels.SumRows(l, dt, dst, devIn(dt, src), scratch, rows, cols, beta))
					return [][]float32{dst.F32()}
				})
				checkClose(t, fmt.Sprintf("sumrows %v %dx%d beta=%v", dt, rows, cols, beta), got[0], want, 1e-5)
			}
		}
	}
}

// colSumCase launches fleet_colsum_f32 directly on hand-made partials.
func colSumCase(t *testing.T, m *emu.Module) {
	rng := newRNG(10)
	for _, nparts := range []int{0, 1, 4} {
		for _, cols := range []int{1, 300} {
			for _, beta := range []float32{0, 1, -0.5} {
				part := randF32(rng, nparts*cols, 1)
				d0 := randF32(rng, cols, 1)
				want := make([]float32, cols)
				for j := range want {
					var s float32
					for p := 0; p < nparts; p++ {
						s += part[p*cols+j]
					}
					if beta == 0 {
						want[j] = s
					} else {
						want[j] = beta*d0[j] + s
					}
				}
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					dst := emu.NewF32(d0)
					if beta == 0 {
						dst = emu.Poison(emu.F32, cols)
					}
					must(t, l.(launcher).Module.Launch("fleet_colsum_f32", emu.Dim(min(l.(launcher).sms, 2)), emu.Dim(kernels.BlockSize), 0,
						dst, emu.NewF32(part), int32(nparts), int32(cols), beta))
					return [][]float32{dst.F32()}
				})
				checkClose(t, fmt.Sprintf("colsum parts=%d cols=%d beta=%v", nparts, cols, beta), got[0], want, 1e-6)
			}
		}
	}
}

func sumColsCase(t *testing.T, m *emu.Module) {
	rng := newRNG(11)
	for _, sh := range [][2]int{{1, 1}, {9, 31}, {40, 100}, {0, 3}, {3, 0}, {70, 5}} {
		rows, cols := sh[0], sh[1]
		src := randF32(rng, rows*cols, 1)
		cd := cpuF32(make([]float32, rows))
		cpuB.SumCols(cd, cpuF32(src), rows, cols, 0.75)
		want := cpuGet(cd, rows)
		got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
			dst := emu.Poison(emu.F32, rows)
			must(t, kernels.SumCols(l, backend.F32, dst, emu.NewF32(src), rows, cols, 0.75))
			return [][]float32{dst.F32()}
		})
		checkClose(t, fmt.Sprintf("sumcols %dx%d", rows, cols), got[0], want, 1e-5)
	}
}

func sumSquaresCase(t *testing.T, m *emu.Module) {
	rng := newRNG(12)
	for _, n := range []int{0, 1, 1000, 20000} {
		src := randF32(rng, n, 1)
		for _, beta := range []float32{1, 0, 0.5} {
			cd := cpuF32([]float32{0.75})
			cpuB.SumSquares(cd, cpuF32(src), n, beta)
			want := cpuGet(cd, 1)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				start := float32(0.75)
				if beta == 0 {
					start = float32(math.NaN()) // not read
				}
				dst := emu.NewF32([]float32{start})
				scratch := emu.Poison(emu.F32, kernels.SumSquaresScratch(n))
				must(t, kernels.SumSquares(l, backend.F32, dst, emu.NewF32(src), scratch, n, beta))
				return [][]float32{dst.F32()}
			})
			checkClose(t, fmt.Sprintf("sumsquares n=%d beta=%v", n, beta), got[0], want, 1e-5)
		}
	}
}

// sumSquaresFinishCase launches fleet_sumsquares_finish_f32 directly.
func sumSquaresFinishCase(t *testing.T, m *emu.Module) {
	rng := newRNG(13)
	for _, nparts := range []int{1, 5, 700} {
		part := randF32(rng, nparts, 1)
		sum := 0.75
		for _, p := range part {
			sum += float64(p)
		}
		got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
			dst := emu.NewF32([]float32{0.75})
			must(t, l.(launcher).Module.Launch("fleet_sumsquares_finish_f32", emu.Dim(1), emu.Dim(kernels.BlockSize), 0, dst, emu.NewF32(part), int32(nparts), float32(1)))
			return [][]float32{dst.F32()}
		})
		checkClose(t, fmt.Sprintf("sumsquares finish parts=%d", nparts), got[0], []float32{float32(sum)}, 1e-5)
	}
}

// ---- Softmax ----------------------------------------------------------------------

var softmaxShapes = [][2]int{{1, 1}, {3, 5}, {17, 100}, {9, 257}, {2, 32}, {1, 3000}, {0, 4}}

// softmaxInput returns random rows; every third row is scaled so that
// exp without the max subtracted would overflow, and some rows hold -inf
// (masked) entries, the first among them.
func softmaxInput(rng *rand.Rand, rows, cols int) []float32 {
	x := randF32(rng, rows*cols, 2)
	for r := 0; r < rows; r++ {
		row := x[r*cols : (r+1)*cols]
		switch {
		case r%3 == 1:
			for j := range row {
				row[j] *= 60
			}
		case r%3 == 2 && cols > 1:
			for j := 0; j < cols; j += 3 {
				row[j] = float32(math.Inf(-1))
			}
		}
	}
	return x
}

func softmaxCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(14)
		for _, sh := range softmaxShapes {
			rows, cols := sh[0], sh[1]
			x := round(dt, softmaxInput(rng, rows, cols))
			cd := cpuF32(make([]float32, rows*cols))
			cpuB.Softmax(cd, cpuF32(x), rows, cols)
			want := cpuGet(cd, rows*cols)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dst := devOut(dt, rows*cols)
				must(t, kernels.Softmax(l, dt, dst, devIn(dt, x), rows, cols))
				return [][]float32{devGet(dst)}
			})
			checkClose(t, fmt.Sprintf("softmax %v %dx%d", dt, rows, cols), got[0], want, tol(dt))
		}
	}
}

func softmaxBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(15)
		for _, sh := range softmaxShapes {
			rows, cols := sh[0], sh[1]
			cy := cpuF32(make([]float32, rows*cols))
			cpuB.Softmax(cy, cpuF32(randF32(rng, rows*cols, 2)), rows, cols)
			y := round(dt, cpuGet(cy, rows*cols))
			dy := round(dt, randF32(rng, rows*cols, 1))
			cd := cpuF32(make([]float32, rows*cols))
			cpuB.SoftmaxBackward(cd, cpuF32(y), cpuF32(dy), rows, cols)
			want := cpuGet(cd, rows*cols)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dx := devOut(dt, rows*cols)
				must(t, kernels.SoftmaxBackward(l, dt, dx, devIn(dt, y), devIn(dt, dy), rows, cols))
				return [][]float32{devGet(dx)}
			})
			checkClose(t, fmt.Sprintf("softmax backward %v %dx%d", dt, rows, cols), got[0], want, tol(dt))
		}
	}
}

// ---- LayerNorm ----------------------------------------------------------------------

// lnShape is a LayerNorm test shape; bias false leaves b (or db) out.
type lnShape struct {
	rows, cols int
	bias       bool
}

var (
	lnFwdShapes = []lnShape{{1, 1, true}, {5, 7, true}, {40, 64, true}, {13, 100, false}, {0, 8, true}}
	// With chunks of 16 rows, 40, 35, 20 and 17 rows span three, three,
	// two and two chunks (blocks); 64 and 40 columns (and 100 in F32) are
	// whole 16-byte pieces.
	lnBwdShapes = []lnShape{{1, 1, true}, {5, 7, true}, {20, 100, true}, {3, 40, false}, {40, 33, true}, {35, 5, true}, {17, 64, false}, {1, 40, true}, {0, 6, true}}
)

// lnInput returns x with a row-dependent offset (so the mean matters), w
// and b.
func lnInput(rng *rand.Rand, rows, cols int) (x, w, b []float32) {
	x = randF32(rng, rows*cols, 1)
	for i := range x {
		x[i] += float32(i/max(cols, 1)%5) - 2
	}
	return x, randF32(rng, cols, 1), randF32(rng, cols, 0.5)
}

// elementwiseModule is elementwise.cu built for the emulator.
func elementwiseModule(t *testing.T) *emu.Module {
	for _, f := range cudakernels.Files() {
		if f.Name == "elementwise.cu" {
			return emu.MustBuild(t, f)
		}
	}
	t.Fatal("no elementwise.cu")
	return nil
}

// addLayerNormCase holds the fused residual add and LayerNorm to the two
// kernels it fuses, fleet_dropout_add then fleet_layernorm, bit for bit,
// and to the CPU's two ops: a plain add, a dropout add with a device base,
// and a dropout alone (no x).
func addLayerNormCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(26)
		const eps = 1e-5
		for _, sh := range lnFwdShapes {
			rows, cols := sh.rows, sh.cols
			x, w, b := lnInput(rng, rows, cols)
			x, y := round(dt, x), round(dt, randF32(rng, rows*cols, 1))
			base := []int32{int32(rng.Uint32()), int32(rng.Uint32())}
			for kind, mask := range []backend.DropoutMask{{Scale: 1}, backend.NewDropoutMask(rng.Uint64(), 0, 0, 0.3), backend.NewDropoutMask(rng.Uint64(), 7, 3+int64(rng.IntN(1<<30)), 0.1)} {
				withX := kind != 2
				cs, co := cpuF32(make([]float32, rows*cols)), cpuF32(make([]float32, rows*cols))
				cm, cr := cpuF32(make([]float32, rows)), cpuF32(make([]float32, rows))
				var cx, cb backend.Ref
				if withX {
					cx = cpuF32(x)
				}
				if sh.bias {
					cb = cpuF32(b)
				}
				cmask := mask
				if kind == 1 {
					cmask.Base = cpuI32(base)
				}
				cpuB.AddLayerNorm(cs, co, cm, cr, cx, cpuF32(y), cpuF32(w), cb, rows, cols, eps, cmask)
				want := [][]float32{cpuGet(cs, rows*cols), cpuGet(co, rows*cols), cpuGet(cm, rows), cpuGet(cr, rows)}
				run := func(fused bool) [][]float32 {
					return twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
						sum, out := devOut(dt, rows*cols), devOut(dt, rows*cols)
						mean, rstd := emu.Poison(emu.F32, rows), emu.Poison(emu.F32, rows)
						var dx, db, dbase *emu.Buffer
						if withX {
							dx = devIn(dt, x)
						}
						if sh.bias {
							db = emu.NewF32(b)
						}
						if kind == 1 {
							dbase = emu.NewI32(base)
						}
						if fused {
							must(t, kernels.AddLayerNorm(l, dt, sum, out, mean, rstd, dx, devIn(dt, y), emu.NewF32(w), db, rows, cols, eps, mask, dbase))
						} else {
							el := launcher{elementwiseModule(t).WithSchedule(m.Schedule()), l.(launcher).sms}
							must(t, kernels.DropoutAdd(el, dt, sum, dx, devIn(dt, y), rows*cols, mask, dbase))
							must(t, kernels.LayerNorm(l, dt, out, mean, rstd, sum, emu.NewF32(w), db, rows, cols, eps))
						}
						return [][]float32{devGet(sum), devGet(out), mean.F32(), rstd.F32()}
					})
				}
				got, apart := run(true), run(false)
				what := fmt.Sprintf("add layernorm %v %dx%d bias=%v kind %d", dt, rows, cols, sh.bias, kind)
				for k, name := range []string{"sum", "out", "mean", "rstd"} {
					checkBits(t, what+" "+name+" (fused against the two kernels)", got[k], apart[k])
					tl := tol(dt) // (bf16: the device's sum is stored rounded, the CPU's is not)
					if k >= 2 && dt == backend.F32 {
						tl = 1e-5
					}
					checkClose(t, what+" "+name+" (against the CPU)", got[k], want[k], tl)
				}
			}
		}
	}
}

func layerNormCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(16)
		const eps = 1e-5
		for _, sh := range lnFwdShapes {
			rows, cols := sh.rows, sh.cols
			x, w, b := lnInput(rng, rows, cols)
			x = round(dt, x)
			co, cm, cr := cpuF32(make([]float32, rows*cols)), cpuF32(make([]float32, rows)), cpuF32(make([]float32, rows))
			cb := backend.Ref{}
			if sh.bias {
				cb = cpuF32(b)
			}
			cpuB.LayerNorm(co, cm, cr, cpuF32(x), cpuF32(w), cb, rows, cols, eps)
			want := [][]float32{cpuGet(co, rows*cols), cpuGet(cm, rows), cpuGet(cr, rows)}
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				out, mean, rstd := devOut(dt, rows*cols), emu.Poison(emu.F32, rows), emu.Poison(emu.F32, rows)
				var db *emu.Buffer
				if sh.bias {
					db = emu.NewF32(b)
				}
				must(t, kernels.LayerNorm(l, dt, out, mean, rstd, devIn(dt, x), emu.NewF32(w), db, rows, cols, eps))
				return [][]float32{devGet(out), mean.F32(), rstd.F32()}
			})
			what := fmt.Sprintf("layernorm %v %dx%d bias=%v", dt, rows, cols, sh.bias)
			checkClose(t, what+" out", got[0], want[0], tol(dt))
			checkClose(t, what+" mean", got[1], want[1], 1e-5)
			checkClose(t, what+" rstd", got[2], want[2], 1e-5)
		}
	}
}

func layerNormBackwardCase(dt backend.DType, shapes []lnShape) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(17)
		defer kernels.SetChunkRows(16)()
		for _, sh := range shapes {
			rows, cols := sh.rows, sh.cols
			x, w, _ := lnInput(rng, rows, cols)
			x = round(dt, x)
			dout := round(dt, randF32(rng, rows*cols, 1))
			cm, cr := cpuF32(make([]float32, rows)), cpuF32(make([]float32, rows))
			cpuB.LayerNorm(cpuF32(make([]float32, rows*cols)), cm, cr, cpuF32(x), cpuF32(w), backend.Ref{}, rows, cols, 1e-5)
			mean, rstd := cpuGet(cm, rows), cpuGet(cr, rows)
			dw0, db0 := randF32(rng, cols, 1), randF32(rng, cols, 1)
			res := round(dt, randF32(rng, rows*cols, 1)) // every other case adds a gradient gathered before
			withRes := (rows+cols)%2 == 0
			cdx, cdw, cdb, cres := cpuF32(make([]float32, rows*cols)), cpuF32(dw0), backend.Ref{}, backend.Ref{}
			if sh.bias {
				cdb = cpuF32(db0)
			}
			if withRes {
				cres = cpuF32(res)
			}
			// The same cases write the masked gradient of a dropout too.
			mask := backend.NewDropoutMask(rng.Uint64(), 2, 2+int64(rng.IntN(1<<20)), 0.25)
			base := []int32{int32(rng.Uint32()), int32(rng.Uint32())}
			var cdrop backend.Ref
			cmask := mask
			if withRes {
				cdrop, cmask.Base = cpuF32(make([]float32, rows*cols)), cpuI32(base)
			}
			cpuB.LayerNormBackward(cdx, cres, cdw, cdb, cpuF32(dout), cpuF32(x), cpuF32(mean), cpuF32(rstd), cpuF32(w), rows, cols, backend.DropoutOut{Dst: cdrop, Mask: cmask})
			want := [][]float32{cpuGet(cdx, rows*cols), cpuGet(cdw, cols), db0, nil}
			if sh.bias {
				want[2] = cpuGet(cdb, cols)
			}
			if withRes {
				want[3] = cpuGet(cdrop, rows*cols)
			}
			// The counters start at zero, and every launch leaves them so:
			// the runs share them, and they are checked after.
			done := emu.NewU32(make([]uint32, kernels.LayerNormBackwardCounters(cols)))
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dx, dw, db := devOut(dt, rows*cols), emu.NewF32(dw0), emu.NewF32(db0)
				var dbArg *emu.Buffer
				if sh.bias {
					dbArg = db
				}
				var resArg, dropArg, baseArg *emu.Buffer
				if withRes {
					resArg, dropArg, baseArg = devIn(dt, res), devOut(dt, rows*cols), emu.NewI32(base)
				}
				scratch := emu.Poison(emu.F32, kernels.LayerNormBackwardScratch(rows, cols))
				must(t, kernels.LayerNormBackward(l, dt, dx, resArg, dw, dbArg, devIn(dt, dout), devIn(dt, x),
					emu.NewF32(mean), emu.NewF32(rstd), emu.NewF32(w), scratch, done, rows, cols, dropArg, mask, baseArg))
				o := [][]float32{devGet(dx), dw.F32(), db.F32(), nil}
				if withRes {
					o[3] = devGet(dropArg)
				}
				return o
			})
			what := fmt.Sprintf("layernorm backward %v %dx%d bias=%v dres=%v", dt, rows, cols, sh.bias, withRes)
			for i, v := range done.U32() {
				if v != 0 {
					t.Errorf("%s: counter %d is %d after the launches, want 0", what, i, v)
				}
			}
			checkClose(t, what+" dx", got[0], want[0], tol(dt))
			checkClose(t, what+" dw", got[1], want[1], 1e-5)
			checkClose(t, what+" db", got[2], want[2], 1e-5)
			if withRes {
				checkClose(t, what+" masked dx", got[3], want[3], tol(dt))
			}
		}
	}
}

// ---- Cross-entropy --------------------------------------------------------------------

// ceShapes include GPT-2's padded vocabulary, 50304, for one row.
var ceShapes = [][2]int{{1, 1}, {6, 7}, {3, 300}, {1, 1000}, {1, 50304}, {0, 5}}

// ceInput returns logits and targets; every third target is out of range
// (-1, then V), so its row is ignored.
func ceInput(rng *rand.Rand, n, v int) ([]float32, []int32) {
	x := randF32(rng, n*v, 3)
	t := make([]int32, n)
	for i := range t {
		switch i % 3 {
		case 2:
			t[i] = int32([]int{-1, v}[i/3%2])
		default:
			t[i] = int32(rng.IntN(v))
		}
	}
	return x, t
}

func crossEntropyCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(19)
		for _, sh := range ceShapes {
			n, v := sh[0], sh[1]
			x, tg := ceInput(rng, n, v)
			x = round(dt, x)
			cl, cz := cpuF32(make([]float32, n)), cpuF32(make([]float32, n))
			cpuB.CrossEntropy(cl, cz, cpuF32(x), cpuI32(tg), n, v)
			want := [][]float32{cpuGet(cl, n), cpuGet(cz, n)}
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				losses, lse := emu.Poison(emu.F32, n), emu.Poison(emu.F32, n)
				must(t, kernels.CrossEntropy(l, dt, losses, lse, devIn(dt, x), emu.NewI32(tg), n, v))
				return [][]float32{losses.F32(), lse.F32()}
			})
			what := fmt.Sprintf("crossentropy %v %dx%d", dt, n, v)
			checkClose(t, what+" losses", got[0], want[0], 1e-5)
			checkClose(t, what+" lse", got[1], want[1], 1e-5)
		}
	}
}

func crossEntropyBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(20)
		for _, sh := range ceShapes {
			n, v := sh[0], sh[1]
			x, tg := ceInput(rng, n, v)
			x = round(dt, x)
			cl, cz := cpuF32(make([]float32, n)), cpuF32(make([]float32, n))
			cpuB.CrossEntropy(cl, cz, cpuF32(x), cpuI32(tg), n, v)
			lse := cpuGet(cz, n)
			scale := 1 / float32(max(n, 1))
			dloss := []float32{0.8}
			cd := cpuF32(make([]float32, n*v))
			cpuB.CrossEntropyBackward(cd, cpuF32(x), cpuF32(lse), cpuI32(tg), cpuF32(dloss), scale, n, v)
			want := cpuGet(cd, n*v)
			for _, inPlace := range []bool{false, true} { // the gradient written over the logits, too
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					logits := devIn(dt, x)
					d := devOut(dt, n*v)
					if inPlace {
						d = logits
					}
					must(t, kernels.CrossEntropyBackward(l, dt, d, logits, emu.NewF32(lse), emu.NewI32(tg), emu.NewF32(dloss), scale, n, v))
					return [][]float32{devGet(d)}
				})
				checkClose(t, fmt.Sprintf("crossentropy backward %v %dx%d in place %v", dt, n, v, inPlace), got[0], want, tol(dt))
			}
		}
	}
}

// crossEntropyFusedCase holds the loss and the gradient of one pass over
// the logits to the CPU's two passes (CrossEntropy, CrossEntropyBackward),
// the gradient written apart and over the logits.
func crossEntropyFusedCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(21)
		for _, sh := range ceShapes {
			n, v := sh[0], sh[1]
			x, tg := ceInput(rng, n, v)
			x = round(dt, x)
			cl, cz := cpuF32(make([]float32, n)), cpuF32(make([]float32, n))
			cpuB.CrossEntropy(cl, cz, cpuF32(x), cpuI32(tg), n, v)
			scale := 1 / float32(max(n, 1))
			dloss := []float32{0.8}
			cd := cpuF32(make([]float32, n*v))
			cpuB.CrossEntropyBackward(cd, cpuF32(x), cz, cpuI32(tg), cpuF32(dloss), scale, n, v)
			wantL, wantD := cpuGet(cl, n), cpuGet(cd, n*v)
			for _, inPlace := range []bool{false, true} {
				got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
					logits, losses := devIn(dt, x), emu.Poison(emu.F32, n)
					d := devOut(dt, n*v)
					if inPlace {
						d = logits
					}
					must(t, kernels.CrossEntropyFused(l, dt, losses, d, logits, emu.NewI32(tg), emu.NewF32(dloss), scale, n, v))
					return [][]float32{losses.F32(), devGet(d)}
				})
				what := fmt.Sprintf("crossentropy fused %v %dx%d in place %v", dt, n, v, inPlace)
				checkClose(t, what+" losses", got[0], wantL, 1e-5)
				checkClose(t, what+" dlogits", got[1], wantD, tol(dt))
			}
		}
	}
}

// ---- Embedding --------------------------------------------------------------------------

// embShapes are (n tokens, dim, vocab); 300 columns take two blocks; 16
// columns are whole 16-byte pieces in F32 and BF16 (the 128-bit path).
var embShapes = [][3]int{{1, 1, 1}, {20, 33, 50}, {100, 300, 7}, {40, 5, 3}, {0, 4, 4}, {6, 16, 5}}

// embIDs returns n ids in [0, vocab) with every fifth one out of range.
func embIDs(rng *rand.Rand, n, vocab int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		if i%5 == 4 {
			ids[i] = []int32{-1, int32(vocab), 1 << 30}[i/5%3]
		} else {
			ids[i] = int32(rng.IntN(vocab))
		}
	}
	return ids
}

func embeddingCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(21)
		for _, sh := range embShapes {
			n, dim, vocab := sh[0], sh[1], sh[2]
			table := randF32(rng, vocab*dim, 1)
			ids := embIDs(rng, n, vocab)
			// The CPU backend has no notion of an out-of-range id: gather
			// the valid ones and expect zeros for the rest.
			clamped := make([]int32, n)
			for i, id := range ids {
				if id >= 0 && int(id) < vocab {
					clamped[i] = id
				}
			}
			co := cpuF32(make([]float32, n*dim))
			cpuB.Embedding(co, cpuF32(table), cpuI32(clamped), n, dim)
			want := round(dt, cpuGet(co, n*dim))
			for i, id := range ids {
				if id < 0 || int(id) >= vocab {
					clear(want[i*dim : (i+1)*dim])
				}
			}
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				out := devOut(dt, n*dim)
				must(t, kernels.Embedding(l, dt, out, emu.NewF32(table), emu.NewI32(ids), n, dim, vocab))
				return [][]float32{devGet(out)}
			})
			checkBits(t, fmt.Sprintf("embedding %v n=%d dim=%d vocab=%d", dt, n, dim, vocab), got[0], want)
		}
	}
}

func embeddingBackwardCase(dt backend.DType) emu.Case {
	return func(t *testing.T, m *emu.Module) {
		rng := newRNG(22)
		for _, sh := range embShapes {
			n, dim, vocab := sh[0], sh[1], sh[2]
			dt0 := randF32(rng, vocab*dim, 1)
			dout := round(dt, randF32(rng, n*dim, 1))
			ids := embIDs(rng, n, vocab)
			// The CPU reference sees only the valid tokens, in order.
			var vIDs []int32
			var vOut []float32
			for i, id := range ids {
				if id >= 0 && int(id) < vocab {
					vIDs = append(vIDs, id)
					vOut = append(vOut, dout[i*dim:(i+1)*dim]...)
				}
			}
			cdt := cpuF32(dt0)
			cpuB.EmbeddingBackward(cdt, cpuF32(vOut), cpuI32(vIDs), len(vIDs), dim)
			want := cpuGet(cdt, vocab*dim)
			got := twice(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				d := emu.NewF32(dt0)
				must(t, kernels.EmbeddingBackward(l, dt, d, devIn(dt, dout), emu.NewI32(ids), n, dim, vocab))
				return [][]float32{d.F32()}
			})
			// Each element adds its tokens in token order, as the CPU does.
			checkBits(t, fmt.Sprintf("embedding backward %v n=%d dim=%d vocab=%d", dt, n, dim, vocab), got[0], want)
		}
	}
}

// ---- The trainer's step statistics --------------------------------------------

// trackLossCase feeds a run of losses, some not finite, into the step
// statistics, on the device and on the CPU: the same bits.
func trackLossCase(t *testing.T, m *emu.Module) {
	losses := []float32{1.5, 2.25, float32(math.NaN()), 0.125, float32(math.Inf(1))}
	st0 := []float32{0.5, -1, 3, -1}
	cs := cpuF32(st0)
	for i, v := range losses {
		cpuB.TrackLoss(cs, cpuF32([]float32{v}), 0.25, i+1)
	}
	want := cpuGet(cs, 4)
	got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
		ds := emu.NewF32(st0)
		for i, v := range losses {
			must(t, kernels.TrackLoss(l, ds, emu.NewF32([]float32{v}), 0.25, i+1))
		}
		return [][]float32{ds.F32()}
	})
	if fmt.Sprint(got[0]) != fmt.Sprint(want) || want[1] != 3 {
		t.Errorf("track loss: device %v, CPU %v (first bad step 3)", got[0], want)
	}
}

// clipCoefCase turns sums of squares into norms and clip coefficients, on
// the device and on the CPU: the same bits, for norms below, at and above
// the limit, with clipping off, and for sums that are not finite.
func clipCoefCase(t *testing.T, m *emu.Module) {
	for _, maxNorm := range []float64{0, 1, 0.3} {
		for _, sq := range []float32{0.25, 1, 4, 1e6, float32(math.Inf(1)), float32(math.NaN())} {
			st0 := []float32{0, -1, 0, -1}
			cc, cs := cpuF32([]float32{7}), cpuF32(st0)
			cpuB.ClipCoef(cc, cs, cpuF32([]float32{sq}), maxNorm, 9)
			want := append(cpuGet(cc, 1), cpuGet(cs, 4)...)
			got := once(t, m, func(l kernels.Launcher[*emu.Buffer]) [][]float32 {
				dc, ds := emu.NewF32([]float32{7}), emu.NewF32(st0)
				must(t, kernels.ClipCoef(l, dc, ds, emu.NewF32([]float32{sq}), maxNorm, 9))
				return [][]float32{append(dc.F32(), ds.F32()...)}
			})
			if fmt.Sprint(got[0]) != fmt.Sprint(want) {
				t.Errorf("clip coef of sum %v, max %v: device %v, CPU %v", sq, maxNorm, got[0], want)
			}
			finite := !math.IsInf(float64(sq), 0) && sq == sq
			if norm := math.Sqrt(float64(sq)); finite && maxNorm > 0 && norm > maxNorm && want[0] != float32(maxNorm/(norm+1e-6)) {
				t.Errorf("clip coef of norm %v to %v: %v", norm, maxNorm, want[0])
			}
			if !finite && want[4] != 9 {
				t.Errorf("a sum of %v did not record its step: %v", sq, want)
			}
		}
	}
}

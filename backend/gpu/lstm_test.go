package gpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// The LSTM's gate kernels, as the runtime issues them, held to the CPU
// backend: a whole sequence of steps forward and backward on random
// inputs (lstmOpCases), and whole LSTM models' loss, gradients and
// weights after optimizer steps (checkGPTTraining with lstmCases), on the
// emulated CUDA device, on opencl:0 and on cuda:0.

// lstmOpCases run T steps of LSTMCell (the first without a recurrent
// part or a previous cell), then T steps of LSTMCellBackward (the last
// without carries, the cell's gradient carried in place), on random
// recurrent parts and carries.
func lstmOpCases(seed uint64) []opCase {
	r := rand.New(rand.NewPCG(seed, 13))
	rnd := func(n int) []float32 { return randF32(r, n) }
	var cases []opCase
	for _, s := range [][3]int{{1, 1, 1}, {3, 4, 5}, {2, 3, 70}, {7, 2, 33}} {
		B, T, H := s[0], s[1], s[2]
		xg, rec, out0 := rnd(B*T*4*H), rnd(T*B*4*H), rnd(B*T*H)
		dout, dh, dxg0 := rnd(B*T*H), rnd(T*B*H), rnd(B*T*4*H)
		cases = append(cases, opCase{fmt.Sprintf("lstm B=%d T=%d H=%d", B, T, H), 1e-5, false, func(h host) [][]float32 {
			k := h.be.(backend.LSTMCells)
			at := func(r backend.Ref, off int) backend.Ref { return backend.Ref{S: r.S, Off: r.Off + off} }
			x, recs, out := h.up(backend.F32, xg), h.up(backend.F32, rec), h.up(backend.F32, out0)
			act, cs, hh := h.alloc(backend.F32, T*B*4*H, 1), h.alloc(backend.F32, (T+1)*B*H, 2), h.alloc(backend.F32, B*H, 0)
			for st := 0; st < T; st++ {
				rr, cp := at(recs, st*B*4*H), at(cs, st*B*H)
				if st == 0 {
					rr, cp = backend.Ref{}, backend.Ref{}
				}
				k.LSTMCell(backend.LSTMStep{B: B, T: T, H: H, Step: st}, at(act, st*B*4*H), at(cs, (st+1)*B*H), hh, out, x, rr, cp)
			}
			dg, dx, dc := h.alloc(backend.F32, T*B*4*H, 3), h.up(backend.F32, dxg0), h.alloc(backend.F32, B*H, 1)
			dhs, douts := h.up(backend.F32, dh), h.up(backend.F32, dout)
			for st := T - 1; st >= 0; st-- {
				dhr, dcr, cp := at(dhs, st*B*H), dc, at(cs, st*B*H)
				if st == T-1 {
					dhr, dcr = backend.Ref{}, backend.Ref{}
				}
				if st == 0 {
					cp = backend.Ref{}
				}
				k.LSTMCellBackward(backend.LSTMStep{B: B, T: T, H: H, Step: st}, at(dg, st*B*4*H), dx, dc, douts, dhr, dcr, at(act, st*B*4*H), at(cs, (st+1)*B*H), cp)
			}
			return [][]float32{h.down(act, T*B*4*H), h.down(at(cs, B*H), T*B*H), h.down(out, B*T*H), h.down(dg, T*B*4*H), h.down(dx, B*T*4*H), h.down(dc, B*H)}
		}})
	}
	return cases
}

// lstmCases are LSTM models for checkGPTTraining (F32: the LSTM trains in
// fp32 only): tied with gate biases, and untied without, with dropout.
func lstmCases() []gptCase {
	lstm := func(c *model.Config) { c.Arch = model.ArchLSTM }
	untied := func(c *model.Config) { c.Arch, c.UntiedHead = model.ArchLSTM, true }
	return []gptCase{
		{bias: true, prec: tensor.F32, arch: lstm, name: "lstm,"},
		{prec: tensor.F32, drop: 0.25, arch: untied, name: "lstm untied,"},
	}
}

// TestLSTMOpsOnEmulatedDevice holds the LSTM's kernels, as the backend
// issues them, to the CPU backend on the emulated device.
func TestLSTMOpsOnEmulatedDevice(t *testing.T) {
	be, err := backend.Get(emulatedDevice(t, 45))
	if err != nil {
		t.Fatal(err)
	}
	checkOpCases(t, be, lstmOpCases(1))
}

// TestLSTMOnEmulatedDevice trains LSTMs for a few steps on the emulated
// device and on the CPU (checkGPTTraining); under -short only the untied
// one with dropout.
func TestLSTMOnEmulatedDevice(t *testing.T) {
	f := newFakeGPU(256 << 20).withEmulator(t)
	cases := lstmCases()
	if testing.Short() {
		cases = cases[1:]
	}
	checkGPTTraining(t, fakeDevice(t, 46, f), cases...)
	for _, k := range []string{"fleet_lstm_cell_f32", "fleet_lstm_cell_backward_f32"} {
		if !slices.Contains(f.launches, k) {
			t.Errorf("%s never ran", k)
		}
	}
}

// TestLSTMOpsOnOpenCL and TestLSTMOnOpenCL are the checks on opencl:0
// (PoCL in CI), running the OpenCL kernels for real.
func TestLSTMOpsOnOpenCL(t *testing.T) {
	be, _ := backend.Get(openCLDevice(t))
	checkOpCases(t, be, lstmOpCases(1))
}

func TestLSTMOnOpenCL(t *testing.T) { checkGPTTraining(t, openCLDevice(t), lstmCases()...) }

// TestLSTMOpsOnGPU and TestLSTMOnGPU are the checks on cuda:0, where there
// is one.
func TestLSTMOpsOnGPU(t *testing.T) {
	be, _ := backend.Get(realDevice(t))
	checkOpCases(t, be, lstmOpCases(1))
}

func TestLSTMOnGPU(t *testing.T) { checkGPTTraining(t, realDevice(t), lstmCases()...) }

// TestSimCountsLSTM is TestSimCountsEveryLaunch for an LSTM: the simulated
// GPU counts exactly the kernels the backend hands the test's fake
// device, a gate kernel per layer and step each way, and prices them.
func TestSimCountsLSTM(t *testing.T) {
	f := newFakeGPU(256 << 20)
	f.launchFn = func(string, [3]int, [3]int, int, []any) error { return nil } // count only
	fake, simulated := fakeDevice(t, 47, f), backend.Device{Kind: "sim", Index: 1}
	be, err := backend.Get(simulated)
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.Config{Arch: model.ArchLSTM, VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 1, NEmbd: 16, Bias: true, Dropout: 0.1}
	const B, T = 2, 7
	step := func(dev tensor.Device) {
		m, err := model.New(cfg, dev, 5)
		if err != nil {
			t.Fatal(err)
		}
		o := optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
		x := make([]int32, B*T)
		for i := range x {
			x[i] = int32(i % cfg.VocabSize)
		}
		if err := tensor.Catch(func() {
			tensor.Step(func() {
				m.Loss(tensor.FromInt32s(dev, x, B, T), tensor.FromInt32s(dev, x, B, T)).Backward()
			})
			optim.ClipGradNorm(o.Params, 1)
			o.Step()
			o.ZeroGrad()
		}); err != nil {
			t.Fatal(err)
		}
	}
	f.launches = nil
	w := SimWindow(be, func() {
		step(fake)
		step(simulated)
	})
	want, got := launchCounts(f.launches), fleetKernels(w.ByKernel)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the simulator counted kernels\n%v\nthe backend launched\n%v", got, want)
	}
	if n := got["fleet_lstm_cell_f32"]; n != int64(cfg.NLayer*T) {
		t.Errorf("%d forward gate launches, want a layer's %d steps × %d layers", n, T, cfg.NLayer)
	}
	if n := got["fleet_lstm_cell_backward_f32"]; n != int64(cfg.NLayer*T) {
		t.Errorf("%d backward gate launches, want %d", n, cfg.NLayer*T)
	}
	if w.BytesTouched <= 0 || w.FLOPs <= 0 || w.DeviceSeconds <= 0 {
		t.Errorf("nothing priced: %+v", w)
	}
}

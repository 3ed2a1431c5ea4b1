package gpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestSimCountsLlama is TestSimCountsEveryLaunch for a Llama-style model
// (grouped attention, QK-norm, SwiGLU): the simulated GPU counts exactly
// the kernels the backend hands the test's fake device. It runs on
// sim:h100, so that the norms' backward counters it makes (once a device,
// by an I32 fill, which it leaves out of the comparison) are not
// sim:h200's, which TestSimCountsEveryLaunch counts.
func TestSimCountsLlama(t *testing.T) {
	f := newFakeGPU(256 << 20)
	f.launchFn = func(string, [3]int, [3]int, int, []any) error { return nil } // count only
	fake, simulated := fakeDevice(t, 43, f), backend.Device{Kind: "sim", Index: 1}
	be, err := backend.Get(simulated)
	if err != nil {
		t.Fatal(err)
	}
	cfg := model.Config{Arch: model.ArchLlama, VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 4, NKVHead: 2, NEmbd: 32, MLPHidden: 40, QKNorm: true}
	for _, prec := range []tensor.DType{tensor.F32, tensor.BF16} {
		step := func(dev tensor.Device) {
			m, err := model.New(cfg, dev, 5)
			if err != nil {
				t.Fatal(err)
			}
			o := optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
			r := rand.New(rand.NewPCG(1, 2))
			x, y := make([]int32, 2*7), make([]int32, 2*7)
			for i := range x {
				x[i], y[i] = int32(r.IntN(cfg.VocabSize)), int32(r.IntN(cfg.VocabSize))
			}
			if err := tensor.Catch(func() {
				tensor.Step(func() {
					var l *tensor.Tensor
					tensor.Autocast(prec, func() { l = m.Loss(tensor.FromInt32s(dev, x, 2, 7), tensor.FromInt32s(dev, y, 2, 7)) })
					l.Backward()
				})
				optim.ClipGradNorm(o.Params, 1)
				o.Step()
				o.ZeroGrad()
			}); err != nil {
				t.Fatal(err)
			}
		}
		f.launches, f.gemms = nil, 0
		w := SimWindow(be, func() {
			step(fake)
			step(simulated)
		})
		want, got := launchCounts(f.launches), fleetKernels(w.ByKernel)
		delete(want, "fleet_fill_i32")
		delete(got, "fleet_fill_i32")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%v: the simulator counted kernels\n%v\nthe backend launched\n%v", prec, got, want)
		}
		for _, k := range []string{"rmsnorm_backward", "add_rmsnorm", "rotary", "rotary_backward", "swiglu", "swiglu_backward"} {
			if got["fleet_"+k+"_"+prec.String()] == 0 {
				t.Errorf("%v: no fleet_%s_%v counted", prec, k, prec)
			}
		}
		if got["fleet_rotary_backward_dw_f32"] == 0 {
			t.Errorf("%v: QK-norm's weight gradients were not summed", prec)
		}
		if w.BytesTouched <= 0 || w.FLOPs <= 0 || w.DeviceSeconds <= 0 {
			t.Errorf("%v: nothing priced: %+v", prec, w)
		}
	}
}

// TestSimPricesReLU2: the simulated GPU counts ReLU²'s launches (no model
// family runs them yet, so TestSimCountsLlama does not) and prices them
// by their formulas: 2 FLOPs an element forward, 3 backward; x and out
// moved once (backward: x, dout and dx).
func TestSimPricesReLU2(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim", Index: 1})
	if err != nil {
		t.Fatal(err)
	}
	lb := be.(backend.LlamaBlocks)
	const n = 3<<20 + 5
	for _, dt := range []backend.DType{backend.F32, backend.BF16} {
		ref := func() backend.Ref { return backend.Ref{S: be.Alloc(dt, n)} }
		x, out, dout, dx := ref(), ref(), ref(), ref()
		w := SimWindow(be, func() {
			lb.ReLU2(out, x, n)
			lb.ReLU2Backward(dx, x, dout, n)
		})
		for _, k := range []string{"fleet_relu2_", "fleet_relu2_backward_"} {
			if got := w.ByKernel[k+dt.String()]; got != 1 {
				t.Errorf("%s%v counted %d times, want 1", k, dt, got)
			}
		}
		if w.FLOPs != 5*n {
			t.Errorf("%v: %v FLOPs, want %d", dt, w.FLOPs, 5*n)
		}
		if want := float64(5 * n * dt.Size()); w.BytesTouched != want {
			t.Errorf("%v: %v bytes, want %v", dt, w.BytesTouched, want)
		}
		if w.DeviceSeconds <= 0 {
			t.Errorf("%v: no device time: %+v", dt, w)
		}
	}
}

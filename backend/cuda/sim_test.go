package cuda

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestSimCountsEveryLaunch trains the same small GPT for a step on the
// simulated H200 and on the test's fake device, which lists every kernel
// and cuBLAS call the backend hands it (running none of them here): the
// simulator, recording at the driver's level, must count exactly the same
// kernels, each as often, and the same products. Both precisions.
func TestSimCountsEveryLaunch(t *testing.T) {
	f := newFakeGPU(256 << 20)
	f.launchFn = func(string, [3]int, [3]int, int, []any) error { return nil } // count only
	fake, simulated := fakeDevice(t, 12, f), backend.Device{Kind: "sim"}
	be, err := backend.Get(simulated)
	if err != nil {
		t.Fatal(err)
	}
	sd := be.(*CUDA).Sim()
	if sd == nil || !be.(*CUDA).Simulated() || simulated.String() != "sim:h200" {
		t.Fatalf("sim:h200 opened as %v, %T", simulated, be)
	}
	cfg := model.Config{VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 16, Bias: true}
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
		before := sd.Counters()
		step(fake)
		step(simulated)
		w := sd.Counters().Sub(before)
		want := map[string]int64{}
		for _, k := range f.launches {
			want[k]++
		}
		got := map[string]int64{}
		for k, v := range w.ByKernel {
			if strings.HasPrefix(k, "fleet_") {
				got[k] = v
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(want) < 10 {
			t.Errorf("%v: the simulator counted kernels\n%v\nthe backend launched\n%v", prec, got, want)
		}
		if g := w.ByKernel["cublasGemmStridedBatchedEx"] + w.ByKernel["cublasGemmEx"]; g != int64(f.gemms) || g == 0 {
			t.Errorf("%v: the simulator counted %d products, the backend made %d", prec, g, f.gemms)
		}
		if w.BytesTouched <= 0 || w.FLOPs <= 0 || w.DeviceSeconds <= 0 {
			t.Errorf("%v: nothing priced: %+v", prec, w)
		}
	}
}

// TestDeviceErrorNamesTheWork: a kernel's failure reaches the host at its
// next wait, where the driver does not say which launch failed; the
// backend's error names the work queued since the last clean wait.
func TestDeviceErrorNamesTheWork(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	dev, sd := backend.Device{Kind: "sim"}, be.(*CUDA).Sim()
	err = tensor.Catch(func() {
		tensor.Step(func() {
			x := tensor.Ones(dev, 4, 8)
			tensor.GELU(tensor.Add(x, x)).Float32s() // a clean wait
			y := tensor.Softmax(tensor.Add(x, x))
			sd.FailNextWait(700)
			y.Float32s()
		})
	})
	if err == nil {
		t.Fatal("the injected failure was not reported")
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "fleet_softmax_f32") || !strings.Contains(msg, "fleet_binary_f32") || strings.Contains(msg, "fleet_gelu_f32") {
		t.Fatalf("the error does not name the work queued since the last wait (softmax, binary; not gelu): %v", err)
	}
	// The device goes on: the next wait is clean.
	if err := tensor.Catch(func() { tensor.Step(func() { tensor.Ones(dev, 1).Item() }) }); err != nil {
		t.Fatal(err)
	}
}

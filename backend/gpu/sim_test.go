package gpu

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
	if !be.(*Backend).Simulated() || simulated.String() != "sim:h200" {
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
		w := SimWindow(be, func() {
			step(fake)
			step(simulated)
		})
		want, got := launchCounts(f.launches), fleetKernels(w.ByKernel)
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

// TestSimCuBLASLtDeclines: the simulated cuBLASLt finds no algorithm for a
// GELU epilogue whose auxiliary matrix's leading dimension is not a
// multiple of 8 (cublasLt.h's rule), so a GPT with an odd n_embd (its MLP
// 4·n_embd wide) runs the fallback, a product and fleet's GELU kernels,
// and one with an even n_embd the epilogues. Separate simulated models,
// since a refusal turns the epilogues off for the device.
func TestSimCuBLASLtDeclines(t *testing.T) {
	for _, c := range []struct {
		index, embd, heads int
		fallback           bool
	}{{2, 9, 3, true}, {1, 8, 2, false}} {
		dev := backend.Device{Kind: "sim", Index: c.index}
		be, err := backend.Get(dev)
		if err != nil {
			t.Fatal(err)
		}
		cfg := model.Config{VocabSize: 11, BlockSize: 8, NLayer: 1, NHead: c.heads, NEmbd: c.embd}
		w := SimWindow(be, func() {
			m, err := model.New(cfg, dev, 5)
			if err != nil {
				t.Fatal(err)
			}
			x := make([]int32, 2*8)
			if err := tensor.Catch(func() {
				tensor.Step(func() {
					var l *tensor.Tensor
					tensor.Autocast(tensor.BF16, func() { l = m.Loss(tensor.FromInt32s(dev, x, 2, 8), tensor.FromInt32s(dev, x, 2, 8)) })
					l.Backward()
				})
			}); err != nil {
				t.Fatal(err)
			}
		})
		gelu := w.ByKernel["fleet_gelu_bf16"] + w.ByKernel["fleet_gelu_backward_bf16"]
		lt := w.ByKernel["cublasLtMatmul"]
		if c.fallback && (gelu != 2 || lt != 0) || !c.fallback && (gelu != 0 || lt != 2) {
			t.Errorf("n_embd %d: %d GELU kernels and %d cuBLASLt products, want fallback %v (%v)", c.embd, gelu, lt, c.fallback, w.ByKernel)
		}
	}
}

// launchCounts counts each kernel among the launches a fake GPU saw.
func launchCounts(launches []string) map[string]int64 {
	n := map[string]int64{}
	for _, k := range launches {
		n[k]++
	}
	return n
}

// fleetKernels is a simulator's count per kernel, fleet's kernels only
// (not the libraries' calls).
func fleetKernels(byKernel map[string]int64) map[string]int64 {
	n := map[string]int64{}
	for k, v := range byKernel {
		if strings.HasPrefix(k, "fleet_") {
			n[k] = v
		}
	}
	return n
}

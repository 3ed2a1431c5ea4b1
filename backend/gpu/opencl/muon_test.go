package opencl_test

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/opencl"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
)

// TestMuonRunOnOpenCLTracksCPU is TestReferenceRunOnOpenCLTracksCPU with
// Muon, through the trainer's own step (the packed buffers, Muon's
// matrices after AdamW's stretch, the clip coefficient on the device):
// the reference model's Llama-style variant with grouped keys and values
// trains 60 steps on opencl:0 and on the CPU from the same weights on the
// same batches, and every 10-step mean loss on OpenCL must stay within
// 1e-3 (relative) of the CPU's.
func TestMuonRunOnOpenCLTracksCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("60 steps on the OpenCL device")
	}
	if _, err := opencl.Devices(); err != nil {
		testenv.NoOpenCL(t, err)
	}
	if err := opencl.CLBlast(); err != nil {
		testenv.NoOpenCL(t, err)
	}
	dev := backend.Device{Kind: "opencl"}
	if _, err := backend.Get(dev); err != nil {
		t.Fatal(err)
	}
	text, _, err := data.DefaultCorpus(1 << 20)
	if err != nil {
		t.Skipf("no corpus: %v", err)
	}
	tok := data.NewChar(text)
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	cfg := train.Default()
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize, cfg.GradAccum = 2, 4, 64, 32, 8, 1
	cfg.Arch, cfg.NKVHead, cfg.QKNorm, cfg.UntiedHead = "llama", 2, true, true
	cfg.Optimizer, cfg.MuonWeightDecay = "muon", 0.01
	cfg.Dropout, cfg.GradClip = 0, 1
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	const steps, every = 60, 10
	run := func(dev tensor.Device) []float64 {
		m, err := model.New(cfg.ModelConfig(tok.Size()), dev, 7)
		if err != nil {
			t.Fatal(err)
		}
		s, err := data.NewSampler(ids, cfg.BlockSize, 7, data.StreamTrain)
		if err != nil {
			t.Fatal(err)
		}
		var losses []float64
		err = tensor.Catch(func() {
			st := train.NewStepper(cfg, dev, m, s)
			defer st.Close()
			for step := range steps {
				lr := 1e-3 * math.Min(1, float64(step+1)/20)
				if err := st.Step(step, lr); err != nil {
					panic(err)
				}
				if (step+1)%every == 0 {
					losses = append(losses, st.Loss(step+1))
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		return losses
	}
	want, got := run(tensor.CPU), run(dev)
	worst := 0.0
	for i := range want {
		r := math.Abs(got[i]-want[i]) / math.Abs(want[i])
		worst = max(worst, r)
		if !(r <= 1e-3) {
			t.Errorf("steps %d-%d: mean loss %.6f on OpenCL, %.6f on the CPU (%.2g apart)", i*every+1, (i+1)*every, got[i], want[i], r)
		}
	}
	t.Logf("mean loss %.4f → %.4f over %d steps; OpenCL within %.2g (relative) of the CPU at every 10 steps", want[0], want[len(want)-1], steps, worst)
}

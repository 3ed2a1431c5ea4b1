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

// TestReferenceRunOnOpenCLTracksCPU trains the reference model (4 layers,
// 4 heads, 128 wide, block 64, batch 12) for 200 steps through the
// trainer's own step on opencl:0 and on the CPU, from the same weights on
// the same batches (characters of the Go standard library's source, the
// default corpus), with warm-up and clipping: every 10-step mean loss on
// OpenCL must stay within 1e-3 (relative) of the CPU's. The two sum their
// products in different orders, so they part in the last bits from the
// first step; this checks that nothing makes them drift further.
func TestReferenceRunOnOpenCLTracksCPU(t *testing.T) {
	if testing.Short() {
		t.Skip("200 steps on the OpenCL device take about a minute on PoCL")
	}
	cfg := train.Default()
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize, cfg.GradAccum = 4, 4, 128, 64, 12, 1
	cfg.Dropout, cfg.GradClip = 0, 1
	trackCPU(t, cfg, 2<<20, 200, 100)
}

// trackCPU trains cfg for steps steps (the learning rate 1e-3 after a
// linear warm-up of warmup steps) through the trainer's own step on
// opencl:0 and on the CPU, from the same weights on the same batches of
// the default corpus's first corpusBytes, and requires every 10-step mean
// loss on OpenCL within 1e-3 (relative) of the CPU's.
func trackCPU(t *testing.T, cfg train.Config, corpusBytes, steps, warmup int) {
	t.Helper()
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
	text, _, err := data.DefaultCorpus(corpusBytes)
	if err != nil {
		t.Skipf("no corpus: %v", err)
	}
	tok := data.NewChar(text)
	ids, err := tok.Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	const every = 10
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
				lr := 1e-3 * math.Min(1, float64(step+1)/float64(warmup))
				if err := st.Step(step, lr); err != nil {
					panic(err)
				}
				if (step+1)%every == 0 {
					losses = append(losses, st.Loss(step+1)) // the mean since the last read
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

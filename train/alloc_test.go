package train

import (
	"fmt"
	"testing"

	"github.com/fleetml/fleet/internal/testenv"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestStepAllocations checks that a steady-state training step makes no
// Go heap allocations and does not grow the device pool: tensor storage
// comes from the pool, tensor headers and tape nodes are recycled, and the
// kernels use pooled scratch. It covers the reference config's shape at a
// smaller batch, with and without biases, dropout and accumulation.
func TestStepAllocations(t *testing.T) {
	tok := data.NewChar(testenv.Text())
	ids, _ := tok.Encode(testenv.Text())
	for _, tc := range []struct {
		bias      bool
		dropout   float64
		accum     int
		recompute bool
	}{{false, 0, 1, false}, {true, 0.1, 2, false}, {true, 0.1, 2, true}} {
		t.Run(fmt.Sprintf("bias=%v,dropout=%v,accum=%d,recompute=%v", tc.bias, tc.dropout, tc.accum, tc.recompute), func(t *testing.T) {
			if tc.recompute && testing.Short() {
				t.Skip("a third model: skipped in -short mode (the arm64 run under emulation)")
			}
			c := Default()
			c.BatchSize = 4
			c.Bias, c.Dropout, c.GradAccum = tc.bias, tc.dropout, tc.accum
			m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 1)
			if err != nil {
				t.Fatal(err)
			}
			m.SetRecompute(tc.recompute)
			s, _ := data.NewSampler(ids, c.BlockSize, 1, data.StreamTrain)
			r := newRun(c, tensor.CPU, nil)
			r.model, r.train, r.tel = m, s, newTelemetry(tensor.CPU)
			r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
			step := 0
			for ; step < 2; step++ { // the first steps fill the pools
				r.tel.begin(phH2D)
				r.mustStep(step, 1e-3)
				r.tel.end(true)
			}
			before := tensor.MemStats(tensor.CPU).Reserved
			one := func() { // a step as the loop runs it, with telemetry, and a read point's read
				r.tel.begin(phH2D)
				r.mustStep(step, 1e-3)
				r.tel.end(true)
				step++
			}
			allocs := testing.AllocsPerRun(5, one)
			if allocs != 0 {
				// A garbage collection empties the kernels' sync.Pool scratch
				// once; an allocation the step itself makes shows up again.
				allocs = testing.AllocsPerRun(5, one)
			}
			after := tensor.MemStats(tensor.CPU).Reserved
			t.Logf("%.0f heap allocations per step; pool reserved %d bytes before, %d after", allocs, before, after)
			if allocs != 0 {
				t.Errorf("a steady-state step made %.0f heap allocations, want 0", allocs)
			}
			if after != before {
				t.Errorf("the pool grew from %d to %d bytes in steady state", before, after)
			}
		})
	}
}

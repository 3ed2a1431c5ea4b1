package train

import (
	"testing"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestStepAllocations reports the Go heap allocations of one steady-state
// training step (the reference config's shape at a smaller batch). It
// logs the figure; the tensor storage itself comes from the pool.
func TestStepAllocations(t *testing.T) {
	tok := data.NewChar(testText())
	ids, _ := tok.Encode(testText())
	c := Default()
	c.BatchSize = 4
	m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := data.NewSampler(ids, c.BlockSize, 1, data.StreamTrain)
	r := &run{cfg: c, dev: tensor.CPU, model: m, train: s,
		opt: optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})}
	step := 0
	r.step(step, 1e-3) // the first step fills the pool
	step++
	before := tensor.MemStats(tensor.CPU).Reserved
	allocs := testing.AllocsPerRun(5, func() { r.step(step, 1e-3); step++ })
	after := tensor.MemStats(tensor.CPU).Reserved
	t.Logf("%.0f heap allocations per step; pool reserved %d bytes before, %d after", allocs, before, after)
	if after != before {
		t.Errorf("the pool grew from %d to %d bytes in steady state", before, after)
	}
}

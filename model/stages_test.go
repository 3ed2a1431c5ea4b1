package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/pipeline"
	"github.com/fleetml/fleet/tensor"
)

// TestStagedMatchesOneDevice trains one step of a GPT on one device and
// the same GPT split over 2 and 4 logical CPU devices with the batch cut
// into micro-batches (GPipe and 1F1B, dropout on, with and without
// recomputation), and compares the loss and every gradient.
func TestStagedMatchesOneDevice(t *testing.T) {
	cfg := Config{VocabSize: 23, BlockSize: 8, NLayer: 4, NHead: 2, NEmbd: 16, Dropout: 0.2, Bias: true}
	const B, T = 6, 8
	r := rng.New(9)
	ids := make([]int32, B*T)
	tg := make([]int32, B*T)
	for i := range ids {
		ids[i], tg[i] = int32(r.Intn(cfg.VocabSize)), int32(r.Intn(cfg.VocabSize))
	}
	const seed = 0xfeed
	ref, err := New(cfg, tensor.CPU, 3)
	if err != nil {
		t.Fatal(err)
	}
	var refLoss float64
	tensor.Step(func() {
		ref.SetDropout(seed, 3)
		l := ref.Loss(tensor.FromInt32s(tensor.CPU, ids, B, T), tensor.FromInt32s(tensor.CPU, tg, B, T))
		refLoss = float64(l.Item())
		l.Backward()
	})
	cases := []struct {
		devs      []int
		counts    []int
		micros    int
		sched     string
		recompute bool
	}{
		{[]int{0, 1}, []int{2, 2}, 3, pipeline.GPipeName, false},
		{[]int{0, 1}, []int{1, 3}, 1, pipeline.GPipeName, false},
		{[]int{1, 2, 3, 4}, []int{1, 1, 1, 1}, 6, pipeline.OneFOneB, true},
		{[]int{0, 1, 2, 3}, []int{0, 2, 2, 0}, 2, pipeline.GPipeName, false},
		{[]int{5, 5}, []int{3, 1}, 2, pipeline.OneFOneB, false}, // one device, two stages
	}
	for _, c := range cases {
		name := fmt.Sprintf("%v/%v/M%d/%s/recompute=%v", c.devs, c.counts, c.micros, c.sched, c.recompute)
		t.Run(name, func(t *testing.T) {
			m, err := New(cfg, tensor.CPU, 3)
			if err != nil {
				t.Fatal(err)
			}
			m.SetRecompute(c.recompute)
			devs := make([]tensor.Device, len(c.devs))
			for i, d := range c.devs {
				devs[i] = tensor.Device{Kind: "cpu", Index: d}
			}
			s, err := m.Place(devs, c.counts)
			if err != nil {
				t.Fatal(err)
			}
			sch, err := pipeline.New(c.sched, len(devs), c.micros)
			if err != nil {
				t.Fatal(err)
			}
			b := B / c.micros
			var loss float64
			run := &pipeline.Runner{Schedule: sch, Devices: devs,
				Input: func(mi int) *tensor.Tensor { return tensor.FromInt32s(devs[0], ids[mi*b*T:(mi+1)*b*T], b, T) },
				Forward: func(st, mi int, x *tensor.Tensor) *tensor.Tensor {
					return s.Forward(st, x, mi*b)
				},
				Loss: func(mi int, logits *tensor.Tensor) *tensor.Tensor {
					l := tensor.CrossEntropy(logits, tensor.FromInt32s(devs[len(devs)-1], tg[mi*b*T:(mi+1)*b*T], b, T))
					loss += float64(l.Item()) / float64(c.micros)
					return tensor.Scale(l, 1/float32(c.micros))
				}}
			s.SetDropout(seed, 3, B)
			tensor.Step(run.Run)
			s.ReduceHeadGrad()
			if math.Abs(loss-refLoss) > 1e-5 {
				t.Errorf("loss %v, one device %v", loss, refLoss)
			}
			wantCopies := int64(0)
			for i := 1; i < len(devs); i++ {
				if devs[i] != devs[i-1] {
					wantCopies += int64(c.micros)
				}
			}
			if run.ActCopies != wantCopies || run.GradCopies != wantCopies {
				t.Errorf("%d activation and %d gradient copies, want %d each", run.ActCopies, run.GradCopies, wantCopies)
			}
			refPs := ref.Parameters()
			for i, p := range m.Parameters() {
				if p.Name != refPs[i].Name {
					t.Fatalf("parameter %d is %s, want %s", i, p.Name, refPs[i].Name)
				}
				if p.T.Grad == nil {
					t.Fatalf("%s has no gradient", p.Name)
				}
				got, want := p.T.Grad.Float32s(), refPs[i].T.Grad.Float32s()
				for k := range got {
					if d := math.Abs(float64(got[k] - want[k])); d > 1e-5 {
						t.Fatalf("%s[%d]: gradient %v, one device %v", p.Name, k, got[k], want[k])
					}
				}
			}
			for st, r := range s.Ranges {
				for _, p := range s.StageParams(st) {
					if p.T.Device() != devs[st] {
						t.Errorf("%s is on %v, stage %d is %v (blocks %v)", p.Name, p.T.Device(), st, devs[st], r)
					}
				}
			}
			st := run.Stats()
			if st.Makespan <= 0 || st.Makespan > st.Serial*(1+1e-9) || len(st.Busy) != len(devs) {
				t.Errorf("stats %+v", st)
			}
			s.Gather(tensor.CPU)
			if m.Device() != tensor.CPU || m.LNF.(*nn.LayerNorm).W.T.Device() != tensor.CPU {
				t.Errorf("Gather left parameters off the CPU")
			}
		})
	}
}

package train

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestTrajectoryMatchesPyTorch replays 25 optimizer steps that
// scripts/make_train_fixture.py ran in PyTorch (float64) from the same
// weights on the same batches, through the trainer's own step (forward,
// backward, clipping, schedule, AdamW with decay on 2-D weights only), and
// compares every step's loss and the final weights.
func TestTrajectoryMatchesPyTorch(t *testing.T) {
	f, err := checkpoint.Load("../testdata/gpt_train.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	md := func(k string) float64 {
		v, err := strconv.ParseFloat(f.Metadata[k], 64)
		if err != nil {
			t.Fatalf("metadata %s: %v", k, err)
		}
		return v
	}
	c := Default()
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = int(md("n_layer")), int(md("n_head")), int(md("n_embd")), int(md("block_size"))
	c.Bias = f.Metadata["bias"] == "true"
	c.BatchSize, c.GradAccum = int(md("batch_size")), 1
	c.LR, c.MinLR, c.WarmupIters, c.LRDecayIters = md("learning_rate"), md("min_lr"), int(md("warmup_iters")), int(md("lr_decay_iters"))
	c.Beta1, c.Beta2, c.WeightDecay, c.GradClip = md("beta1"), md("beta2"), md("weight_decay"), md("grad_clip")
	steps := int(md("steps"))

	m, err := model.New(c.ModelConfig(int(md("vocab_size"))), tensor.CPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	weights := func(prefix string) *checkpoint.File {
		w := &checkpoint.File{Tensors: map[string]checkpoint.Tensor{}}
		for name, ten := range f.Tensors {
			if strings.HasPrefix(name, prefix) {
				w.Tensors[strings.TrimPrefix(name, prefix)] = ten
			}
		}
		return w
	}
	if err := m.SetWeights(weights("init.")); err != nil {
		t.Fatal(err)
	}
	xs, _ := f.Tensors["x"].Int32s()
	ys, _ := f.Tensors["y"].Int32s()
	losses, _ := f.Tensors["losses"].Float64s()
	lrs, _ := f.Tensors["lrs"].Float64s()
	n := c.BatchSize * c.BlockSize
	r := &run{cfg: c, dev: tensor.CPU, model: m,
		batch: func(step, _ int, x, y []int32) {
			if step >= steps { // the trainer prefetches the batch after the last
				clear(x)
				clear(y)
				return
			}
			copy(x, xs[step*n:(step+1)*n])
			copy(y, ys[step*n:(step+1)*n])
		},
		opt: optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: float32(c.LR), Beta1: float32(c.Beta1),
			Beta2: float32(c.Beta2), Eps: float32(md("eps")), WeightDecay: float32(c.WeightDecay)}),
		sched: optim.Schedule{LR: c.LR, MinLR: c.MinLR, WarmupIters: c.WarmupIters, DecayIters: c.decayIters()},
	}
	for s := 0; s < steps; s++ {
		lr := r.sched.At(s)
		if math.Abs(lr-lrs[s]) > 1e-12 {
			t.Fatalf("step %d: lr %v, PyTorch %v", s, lr, lrs[s])
		}
		loss := r.mustStep(s, lr)
		if math.Abs(loss-losses[s]) > 1e-5*losses[s] {
			t.Errorf("step %d: loss %.7f, PyTorch %.7f", s, loss, losses[s])
		}
	}
	final := weights("final.")
	worst, where := 0.0, ""
	for _, p := range m.Parameters() {
		want, _ := final.Tensors[p.Name].Float32s()
		got := p.T.Float32s()
		for i := range got {
			if d := math.Abs(float64(got[i] - want[i])); d > worst {
				worst, where = d, p.Name
			}
		}
	}
	t.Logf("largest final-weight difference %.3g (%s)", worst, where)
	if worst > 1e-4 {
		t.Errorf("final weights differ from PyTorch by %.3g at %s", worst, where)
	}
}

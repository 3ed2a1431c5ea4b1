package train

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
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
	replayTrainFixture(t, "../testdata/gpt_train.safetensors", 1e-4)
}

// TestMuonTrajectoryMatchesPyTorch is TestTrajectoryMatchesPyTorch with
// Muon for the blocks' matrices (q, k and v orthogonalised apart) and
// AdamW for the rest, against scripts/make_muon_fixture.py's plain-PyTorch
// Muon (float64), weight decay on the matrices included.
func TestMuonTrajectoryMatchesPyTorch(t *testing.T) {
	replayTrainFixture(t, "../testdata/gpt_train_muon.safetensors", 1e-5)
}

// replayTrainFixture replays a training fixture's steps through the
// trainer's step with the fixture's optimizer (the run's newOptimizer),
// holding every step's loss (relative 1e-5) and the final weights (tol)
// to PyTorch's.
func replayTrainFixture(t *testing.T, path string, tol float64) {
	f, c, md := loadTrainFixture(t, path)
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
	r := newRun(c, tensor.CPU, nil)
	r.model = m
	r.feed.batch = func(step, _ int, x, y []int32) {
		if step >= steps { // the trainer prefetches the batch after the last
			clear(x)
			clear(y)
			return
		}
		copy(x, xs[step*n:(step+1)*n])
		copy(y, ys[step*n:(step+1)*n])
	}
	if eps := md("eps"); eps != 1e-8 {
		t.Fatalf("the fixture's AdamW eps is %v; the trainer's is 1e-8", eps)
	}
	if r.opt, err = newOptimizer(c, m.Parameters()); err != nil {
		t.Fatal(err)
	}
	r.sched = optim.Schedule{LR: c.LR, MinLR: c.MinLR, WarmupIters: c.WarmupIters, DecayIters: c.DecayIters()}
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
	if worst > tol {
		t.Errorf("final weights differ from PyTorch by %.3g at %s", worst, where)
	}
}

// TestLongTrajectoryMatchesPyTorch runs `fleet train` as a user would (its
// own initial weights and windows for the seed, the README's reference model
// and optimizer settings) for 300 steps, through warm-up and the whole cosine
// decay, on the synthetic corpus of scripts/make_long_train_fixture.py, and
// compares every step's loss and gradient norm and every evaluation with
// PyTorch's float32 run of the same model from the same weights on the same
// windows (the script ports fleet's generators). Both sides train in F32, so
// they part only by rounding: measured, at most 3.6e-6 in a step's loss and
// 2.7e-5 (relative) in its gradient norm.
func TestLongTrajectoryMatchesPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("300 training steps of the reference model: skipped in -short mode")
	}
	f, c, md := loadTrainFixture(t, "../testdata/gpt_long_train.safetensors")
	c.Data, c.Out, c.Device = filepath.Join("../testdata", f.Metadata["corpus"]), filepath.Join(t.TempDir(), "run"), "cpu"
	c.Dropout = 0
	c.MaxIters, c.EvalInterval, c.EvalIters, c.LogInterval = int(md("max_iters")), int(md("eval_interval")), int(md("eval_iters")), 1
	c.Seed = uint64(md("seed"))
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	losses, _ := f.Tensors["losses"].Float64s()
	norms, _ := f.Tensors["norms"].Float64s()
	lrs, _ := f.Tensors["lrs"].Float64s()
	evalSteps, _ := f.Tensors["eval_steps"].Int32s()
	evalTrain, _ := f.Tensors["eval_train"].Float64s()
	evalVal, _ := f.Tensors["eval_val"].Float64s()

	steps, evals := 0, 0
	var worstLoss, worstNorm float64
	for _, line := range splitLines(mustRead(t, filepath.Join(c.Out, MetricsFile))) {
		var m Metric
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatal(err)
		}
		if m.TrainLoss == nil || (m.LR != nil && m.GradNorm == nil) {
			t.Fatalf("step %d: no finite loss or gradient norm logged: %s", m.Step, line)
		}
		switch {
		case m.ValLoss != nil: // an evaluation before step m.Step
			if evals >= len(evalSteps) || int(evalSteps[evals]) != m.Step {
				t.Fatalf("evaluation at step %d, PyTorch's evaluations are at %v", m.Step, evalSteps)
			}
			if d := math.Abs(*m.TrainLoss - evalTrain[evals]); d > 1e-4 {
				t.Errorf("step %d: evaluated train loss %.6f, PyTorch %.6f", m.Step, *m.TrainLoss, evalTrain[evals])
			}
			if d := math.Abs(*m.ValLoss - evalVal[evals]); d > 1e-4 {
				t.Errorf("step %d: val loss %.6f, PyTorch %.6f", m.Step, *m.ValLoss, evalVal[evals])
			}
			evals++
		case m.LR != nil: // the log line of step m.Step-1
			s := m.Step - 1
			if s != steps {
				t.Fatalf("log line for step %d after %d steps", s, steps)
			}
			if math.Abs(*m.LR-lrs[s]) > 1e-12 {
				t.Errorf("step %d: lr %v, PyTorch %v", s, *m.LR, lrs[s])
			}
			dl, dn := math.Abs(*m.TrainLoss-losses[s]), math.Abs(*m.GradNorm-norms[s])/norms[s]
			worstLoss, worstNorm = max(worstLoss, dl), max(worstNorm, dn)
			if dl > 1e-4 {
				t.Errorf("step %d: loss %.7f, PyTorch %.7f", s, *m.TrainLoss, losses[s])
			}
			if dn > 1e-3 {
				t.Errorf("step %d: gradient norm %.6f, PyTorch %.6f", s, *m.GradNorm, norms[s])
			}
			steps++
		}
	}
	if steps != len(losses) || evals != len(evalSteps) {
		t.Fatalf("%d steps and %d evaluations logged, PyTorch ran %d and %d", steps, evals, len(losses), len(evalSteps))
	}
	t.Logf("largest difference from PyTorch over %d steps: loss %.3g, gradient norm %.3g (relative)", steps, worstLoss, worstNorm)
}

// loadTrainFixture opens a PyTorch training fixture and returns it, a
// Config with its model and optimizer settings (one micro-batch a step),
// and a reader of its numeric metadata.
func loadTrainFixture(t *testing.T, path string) (*checkpoint.File, Config, func(string) float64) {
	t.Helper()
	f, err := checkpoint.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	md := func(k string) float64 {
		v, err := strconv.ParseFloat(f.Metadata[k], 64)
		if err != nil {
			t.Fatalf("%s: metadata %s: %v", path, k, err)
		}
		return v
	}
	c := Default()
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = int(md("n_layer")), int(md("n_head")), int(md("n_embd")), int(md("block_size"))
	c.Bias = f.Metadata["bias"] == "true"
	c.BatchSize, c.GradAccum = int(md("batch_size")), 1
	c.LR, c.MinLR, c.WarmupIters, c.LRDecayIters = md("learning_rate"), md("min_lr"), int(md("warmup_iters")), int(md("lr_decay_iters"))
	c.Beta1, c.Beta2, c.WeightDecay, c.GradClip = md("beta1"), md("beta2"), md("weight_decay"), md("grad_clip")
	if f.Metadata["optimizer"] == "muon" {
		c.Optimizer = "muon"
		c.MuonLR, c.MuonMomentum, c.MuonWeightDecay = md("muon_lr"), md("muon_momentum"), md("muon_weight_decay")
	}
	return f, c, md
}

package train

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/testenv"

	"github.com/fleetml/fleet/checkpoint"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// fp16Run is a tiny fp16 trainer on the CPU with a scaler that starts at
// scale and grows after interval clean steps.
func fp16Run(t *testing.T, scale float32, interval int) *run {
	t.Helper()
	tok := data.NewChar(testenv.Text())
	ids, _ := tok.Encode(testenv.Text())
	c := Default()
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize = 2, 2, 32, 16
	c.BatchSize, c.GradAccum = 4, 2
	c.Precision = "fp16"
	m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 7)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := data.NewSampler(ids, c.BlockSize, 3, data.StreamTrain)
	r := newRun(c, tensor.CPU, nil)
	r.model, r.train = m, s
	r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
	r.scaler.Scale, r.scaler.GrowthInterval = scale, interval
	return r
}

// state is the weights and AdamW moments, copied to the host.
func (r *run) state() [][]float32 {
	var out [][]float32
	for i, p := range r.opt.Parameters() {
		m, v := r.opt.State(i)
		out = append(out, p.T.Float32s(), m.Float32s(), v.Float32s())
	}
	return out
}

func bitwiseEqual(a, b [][]float32) bool {
	for i := range a {
		for j := range a[i] {
			if math.Float32bits(a[i][j]) != math.Float32bits(b[i][j]) {
				return false
			}
		}
	}
	return len(a) == len(b)
}

// TestGradScaler: the scale goes 4 → 8 after growth_interval clean steps;
// an injected inf gradient halves it and skips the step, leaving the
// weights, the Adam moments and step count, and the schedule untouched.
func TestGradScaler(t *testing.T) {
	r := fp16Run(t, 4, 3)
	defer r.close()
	for step := 0; step < 3; step++ {
		if r.scaler.Scale != 4 {
			t.Fatalf("scale %v before step %d, want 4", r.scaler.Scale, step)
		}
		r.mustStep(step, 1e-3)
	}
	if r.scaler.Scale != 8 || r.scaler.Tracker != 0 || r.opt.StepCount() != 3 {
		t.Fatalf("after 3 clean steps: scale %v, tracker %d, adam steps %d; want 8, 0, 3", r.scaler.Scale, r.scaler.Tracker, r.opt.StepCount())
	}
	r.mustStep(3, 1e-3)
	before := r.state()
	lrBefore := r.scheduleStep(5)
	r.mustStepWithHook(4, 1e-3, func() {
		g := r.opt.Parameters()[1].T.Grad
		v := g.Float32s()
		v[0] = float32(math.Inf(1))
		g.SetFloat32s(v)
	})
	if r.scaler.Scale != 4 || r.scaler.Tracker != 0 || r.scaler.Skipped != 1 {
		t.Fatalf("after an inf: scale %v, tracker %d, skipped %d; want 4, 0, 1", r.scaler.Scale, r.scaler.Tracker, r.scaler.Skipped)
	}
	if r.opt.StepCount() != 4 {
		t.Fatalf("adam steps %d after a skipped step, want 4", r.opt.StepCount())
	}
	if !bitwiseEqual(before, r.state()) {
		t.Fatal("a skipped step changed the weights or the Adam moments")
	}
	if got := r.scheduleStep(5); got != lrBefore-1 {
		t.Fatalf("schedule step %d at step 5 after a skip, want %d", got, lrBefore-1)
	}
	for _, p := range r.opt.Parameters() {
		if g := p.T.Grad; g != nil {
			for _, v := range g.Float32s() {
				if v != 0 {
					t.Fatal("the skipped step's gradients were not cleared")
				}
			}
		}
	}
	r.mustStep(5, 1e-3) // training goes on
	if r.opt.StepCount() != 5 || bitwiseEqual(before, r.state()) {
		t.Fatal("the step after a skipped one did not update")
	}
}

// TestFP16Learns: fp16 training on the CPU (emulated products, default
// scaler) lowers the loss over 50 steps and says that it is emulated.
func TestFP16Learns(t *testing.T) {
	c := tinyConfig(t)
	c.Precision = "fp16"
	c.MaxIters = 50
	c.LogInterval = 10
	c.EvalInterval = 50
	var log bytes.Buffer
	res, err := Run(c, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "emulated") {
		t.Errorf("the log does not say fp16 is emulated on the CPU:\n%s", log.String())
	}
	first := trainLosses(t, c.Out)
	if !(first[len(first)-1] < first[0]-0.3) {
		t.Fatalf("fp16 train loss went %v → %v over 50 steps:\n%s", first[0], first[len(first)-1], log.String())
	}
	if math.IsNaN(res.Summary.BestValLoss) || math.IsInf(res.Summary.BestValLoss, 0) {
		t.Fatalf("best val loss %v", res.Summary.BestValLoss)
	}
}

// trainLosses reads the logged train losses of a run.
func trainLosses(t *testing.T, out string) []float64 {
	t.Helper()
	var losses []float64
	for _, line := range splitLines(mustRead(t, filepath.Join(out, MetricsFile))) {
		var m Metric
		if err := json.Unmarshal(line, &m); err == nil && m.TrainLoss != nil {
			losses = append(losses, *m.TrainLoss)
		}
	}
	if len(losses) < 2 {
		t.Fatalf("%d train losses logged", len(losses))
	}
	return losses
}

// TestResumeRestoresScaler: an fp16 run resumed from a checkpoint carries
// on with the saved scale, growth tracker and skipped steps, and ends
// bitwise where the uninterrupted run does.
func TestResumeRestoresScaler(t *testing.T) {
	c := tinyConfig(t)
	c.Precision = "fp16"
	c.MaxIters = 12
	c.CkptInterval = 6
	c.Keep = 0
	c.EvalInterval = 6
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := mustRead(t, filepath.Join(c.Out, ModelFile))
	root := filepath.Join(c.Out, CheckpointDir)
	st, err := checkpoint.Load(filepath.Join(root, checkpoint.DirName(6), StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Metadata["grad_scaler"] != "dynamic" || st.Metadata["grad_scale"] == "" {
		t.Fatalf("checkpoint metadata lacks the scaler: %v", st.Metadata)
	}
	saved := optim.NewGradScaler()
	if err := saved.Restore(st.Metadata); err != nil {
		t.Fatal(err)
	}

	// Resume from step 6, in a copy of the run that holds only that
	// checkpoint.
	rc := c
	rc.Out = filepath.Join(t.TempDir(), "out")
	os.MkdirAll(filepath.Join(rc.Out, CheckpointDir), 0o755)
	for _, f := range []string{ConfigFile, TokenizerFile, MetricsFile} {
		os.WriteFile(filepath.Join(rc.Out, f), mustRead(t, filepath.Join(c.Out, f)), 0o644)
	}
	if err := os.CopyFS(filepath.Join(rc.Out, CheckpointDir, checkpoint.DirName(6)), os.DirFS(filepath.Join(root, checkpoint.DirName(6)))); err != nil {
		t.Fatal(err)
	}
	rc.Resume = true
	log.Reset()
	if _, err := Run(rc, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "continuing from") {
		t.Fatalf("did not resume:\n%s", log.String())
	}
	if got := mustRead(t, filepath.Join(rc.Out, ModelFile)); !bytes.Equal(got, want) {
		t.Fatal("the resumed fp16 run's weights differ from the uninterrupted run's")
	}
	r := &run{scaler: optim.NewGradScaler()}
	if err := r.scaler.Restore(st.Metadata); err != nil || *r.scaler != *saved {
		t.Fatalf("restored scaler %+v, saved %+v (err %v)", *r.scaler, *saved, err)
	}
	st.Metadata["grad_scale"] = "-1"
	if err := optim.NewGradScaler().Restore(st.Metadata); err == nil {
		t.Fatal("a negative grad_scale was accepted")
	}
}

// TestDeviceScalerMatchesHost holds fp16's loss scaler on the device (the
// one-device path) to the same scaler on the host (the pipelines' path,
// which reads the norm every step): over clean steps that grow the scale,
// a clipped step and a skipped one, the scale, the skipped count, AdamW's
// step count and the weights agree (the weights to rounding: the host
// unscales, then clips; the device does both in one factor).
func TestDeviceScalerMatchesHost(t *testing.T) {
	dev, host := fp16Run(t, 4, 3), fp16Run(t, 4, 3)
	host.upd = &hostUpdate{r: host} // the pipelines' update
	defer dev.close()
	defer host.close()
	dev.cfg.GradClip, host.cfg.GradClip = 0.05, 0.05 // clipping acts
	for step := 0; step < 8; step++ {
		var hook func(r *run) func()
		if step == 4 {
			hook = func(r *run) func() {
				return func() {
					g := r.opt.Parameters()[1].T.Grad
					v := g.Float32s()
					v[0] = float32(math.NaN())
					g.SetFloat32s(v)
				}
			}
		}
		for _, r := range []*run{dev, host} {
			var h func()
			if hook != nil {
				h = hook(r)
			}
			r.mustStepWithHook(step, 1e-3, h)
		}
		if dev.scaler.Scale != host.scaler.Scale || dev.scaler.Skipped != host.scaler.Skipped || dev.scaler.Tracker != host.scaler.Tracker || dev.opt.StepCount() != host.opt.StepCount() {
			t.Fatalf("after step %d: device scale %v, skipped %d, tracker %d, adam steps %d; host %v, %d, %d, %d", step,
				dev.scaler.Scale, dev.scaler.Skipped, dev.scaler.Tracker, dev.opt.StepCount(), host.scaler.Scale, host.scaler.Skipped, host.scaler.Tracker, host.opt.StepCount())
		}
		// The two paths' states drift apart a little (see below): the
		// norms have been measured up to 4e-6 apart (amd64) and 1.5e-5
		// (arm64, whose Go kernels fuse multiply-adds) by step 8. A norm
		// left scaled would be off by the scale, 4 or more.
		if d := math.Abs(dev.upd.gradNorm()-host.upd.gradNorm()) / host.upd.gradNorm(); step != 4 && !(d < 1e-3) {
			t.Fatalf("step %d: gradient norm %v on the device, %v on the host", step, dev.upd.gradNorm(), host.upd.gradNorm())
		}
	}
	if dev.scaler.Skipped != 1 || dev.scaler.Scale != 8 { // 4, grown to 8, halved at the skip, grown again
		t.Fatalf("the run did not grow and then halve the scale: scale %v, skipped %d", dev.scaler.Scale, dev.scaler.Skipped)
	}
	// The paths round differently in the last bit, and fp16's products
	// turn such bits into an f16 rounding step now and then, so the
	// states drift apart a little. Adam's update hardly depends on the
	// gradients' scale, so the weights alone would not show a gradient
	// left scaled or unclipped; the moments would (m by the factor, v by
	// its square).
	a, b := dev.state(), host.state()
	var worstW, worstM float64
	for i := range a {
		var norm, diff float64
		for j := range a[i] {
			d := math.Abs(float64(a[i][j] - b[i][j]))
			if i%3 == 0 {
				worstW = max(worstW, d)
				continue
			}
			norm, diff = norm+math.Abs(float64(b[i][j])), diff+d
		}
		if i%3 != 0 && norm > 0 {
			worstM = max(worstM, diff/norm)
		}
	}
	t.Logf("after 8 steps: weights at most %.3g apart; moments at most %.3g apart (relative L1)", worstW, worstM)
	if worstW > 5e-5 || worstM > 2e-2 {
		t.Fatalf("the device's scaler ends %.3g (weights) and %.3g (moments, relative) from the host's", worstW, worstM)
	}
}

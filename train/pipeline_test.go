package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
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

// pipelineData is tinyshakespeare where the shared data folder has it,
// else the tests' own text.
func pipelineData(t *testing.T) string {
	if p := filepath.Join("..", "..", "shared", "data", "tinyshakespeare.txt"); fileExists(p) {
		return p
	}
	p := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(p, []byte(testenv.Text()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// runWeights trains cfg into a fresh folder and loads model.safetensors.
func runWeights(t *testing.T, cfg Config) (*checkpoint.File, string) {
	t.Helper()
	if cfg.Out == "" {
		cfg.Out = filepath.Join(t.TempDir(), "out")
	}
	var log bytes.Buffer
	if _, err := Run(cfg, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	f, err := checkpoint.Load(filepath.Join(cfg.Out, ModelFile))
	if err != nil {
		t.Fatal(err)
	}
	return f, log.String()
}

// TestPipelineAcceptance is the acceptance command: 30 steps of the
// default model on 2 logical CPU devices with 4 micro-batches leave the
// weights of the same run on one device (evaluation shortened).
func TestPipelineAcceptance(t *testing.T) {
	if testing.Short() {
		t.Skip("two 30-step runs of the reference model: skipped in -short mode")
	}
	c := Default()
	c.Data = pipelineData(t)
	c.Device = "cpu"
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize = 4, 4, 128, 64, 12
	c.MaxIters, c.Seed = 30, 5
	c.EvalIters = 2
	c.Out = filepath.Join(t.TempDir(), "one")
	one, _ := runWeights(t, c)
	c.Pipeline, c.MicroBatches = "cpu:0,cpu:1", 4
	c.Out = filepath.Join(t.TempDir(), "out")
	piped, log := runWeights(t, c)
	if d := maxDiff(t, one, piped); d > 1e-5 {
		t.Fatalf("pipelined weights differ from one device's by %g", d)
	} else {
		t.Logf("max abs difference %g", d)
	}
	for _, want := range []string{"stage 0 on cpu: embeddings, blocks [0, 2)", "stage 1 on cpu:1: blocks [2, 4), final norm and head",
		"schedule bubble 0.200", "all stages busy at once"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	var rep PipelineReport
	b, err := os.ReadFile(filepath.Join(c.Out, PipelineFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if math.Abs(rep.ScheduleBubble-0.2) > 1e-12 || rep.Runs != 25 || len(rep.StageBusyMs) != 2 || rep.StageBusyMs[0] <= 0 || rep.StageBusyMs[1] <= 0 {
		t.Errorf("report %+v", rep)
	}
	if rep.ActCopiesPerStep != 4 || rep.GradCopiesPerStep != 4 || rep.ActBytesPerStep != 4*3*64*128*4 || rep.HeadCopiesPerStep != 2 {
		t.Errorf("copies in the report: %+v", rep)
	}
	if rep.MeasuredBubble <= 0 || rep.MeasuredBubble >= 1 || rep.MakespanMs > rep.SerialMs {
		t.Errorf("measured bubble %v, makespan %v ms, serial %v ms", rep.MeasuredBubble, rep.MakespanMs, rep.SerialMs)
	}
}

func pipeTinyConfig(t *testing.T) Config {
	c := tinyConfig(t)
	c.NLayer, c.NHead, c.NEmbd, c.BlockSize, c.BatchSize = 4, 2, 32, 16, 4
	c.MaxIters, c.LRDecayIters, c.WarmupIters = 8, 16, 2
	// A small learning rate: AdamW divides each gradient by its own
	// running size, so rounding differences (1e-7) in gradients near zero
	// grow into weight differences in proportion to the rate.
	c.LR = 1e-4
	c.EvalInterval, c.EvalIters = 4, 2
	return c
}

// TestPipelineStepGradients compares the loss and the gradients (at the
// hook, before clipping) of training steps on 2 and 4 logical CPU devices
// with those on one device: dropout on, gradient accumulation, GPipe and
// 1F1B.
func TestPipelineStepGradients(t *testing.T) {
	tok := data.NewChar(testenv.Text())
	ids, _ := tok.Encode(testenv.Text())
	newRun := func(c Config) *run {
		m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 11)
		if err != nil {
			t.Fatal(err)
		}
		m.SetRecompute(c.Recompute)
		s, _ := data.NewSampler(ids, c.BlockSize, 4, data.StreamTrain)
		r := newRun(c, tensor.CPU, io.Discard)
		r.model, r.train = m, s
		if c.Pipeline != "" {
			pl, err := c.Place()
			if err != nil {
				panic(err)
			}
			if r.multi, err = newPipeRun(r, pl.Stages); err != nil {
				t.Fatal(err)
			}
		}
		r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
		return r
	}
	grads := func(r *run, step int) (float64, [][]float32) {
		var g [][]float32
		loss := r.mustStepWithHook(step, 1e-3, func() {
			for _, p := range r.opt.Parameters() {
				g = append(g, p.T.Grad.Float32s())
			}
		})
		return loss, g
	}
	for _, tc := range []struct {
		devs, sched string
		micros      int
		accum       int
		recompute   bool
	}{
		{"cpu:0,cpu:1", "gpipe", 4, 1, false},
		{"cpu:1,cpu:2,cpu:3,cpu:4", "1f1b", 2, 2, true},
		{"cpu:1,cpu:2,cpu:3,cpu:4", "gpipe", 1, 1, false},
	} {
		t.Run(fmt.Sprintf("%s/%s/M%d/accum%d", tc.devs, tc.sched, tc.micros, tc.accum), func(t *testing.T) {
			c := pipeTinyConfig(t)
			c.Dropout, c.GradAccum, c.Recompute = 0.1, tc.accum, tc.recompute
			one := newRun(c)
			c.Pipeline, c.PipelineSchedule, c.MicroBatches = tc.devs, tc.sched, tc.micros
			piped := newRun(c)
			defer one.close()
			defer piped.close()
			for step := range 3 {
				l1, g1 := grads(one, step)
				l2, g2 := grads(piped, step)
				if math.Abs(l1-l2) > 1e-5 {
					t.Fatalf("step %d: loss %v, one device %v", step, l2, l1)
				}
				for i := range g1 {
					for k := range g1[i] {
						if d := math.Abs(float64(g1[i][k] - g2[i][k])); d > 1e-5 {
							t.Fatalf("step %d: %s[%d]: gradient %v, one device %v", step, one.opt.Parameters()[i].Name, k, g2[i][k], g1[i][k])
						}
					}
				}
			}
		})
	}
}

// TestPipelineComposes trains on 4 logical CPU devices with 1F1B, dropout,
// gradient accumulation and recomputation, and with bf16 products on 2,
// against the same runs on one device.
func TestPipelineComposes(t *testing.T) {
	cases := []struct {
		name  string
		setup func(*Config)
		tol   float64
	}{
		{"4 stages 1f1b dropout accum recompute", func(c *Config) {
			c.Dropout, c.GradAccum, c.Recompute = 0.1, 2, true
			c.Pipeline, c.MicroBatches, c.PipelineSchedule = "cpu:1,cpu:2,cpu:3,cpu:4", 2, "1f1b"
		}, 1e-5},
		{"2 stages bf16 split", func(c *Config) {
			c.Precision = "bf16"
			c.Pipeline, c.MicroBatches, c.PipelineSplit = "cpu:0,cpu:3", 4, "1,3"
		}, 1e-5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := pipeTinyConfig(t)
			tc.setup(&c)
			piped, _ := runWeights(t, c)
			c.Pipeline, c.MicroBatches, c.PipelineSchedule, c.PipelineSplit = "", 0, "", ""
			c.Out = filepath.Join(t.TempDir(), "one")
			one, _ := runWeights(t, c)
			if d := maxDiff(t, one, piped); d > tc.tol {
				t.Fatalf("pipelined weights differ from one device's by %g", d)
			}
		})
	}
}

// TestPipelineCheckpoints resumes a pipelined run's checkpoint on one
// device and a one-device checkpoint in a pipeline: both end where an
// uninterrupted run on one device does.
func TestPipelineCheckpoints(t *testing.T) {
	c := pipeTinyConfig(t)
	c.Dropout = 0.1
	c.MaxIters = 12
	want, _ := runWeights(t, c)
	for _, firstPiped := range []bool{true, false} {
		r := c
		r.Out = filepath.Join(t.TempDir(), "out")
		r.MaxIters, r.CkptInterval = 6, 6
		if firstPiped {
			r.Pipeline, r.MicroBatches = "cpu:1,cpu:2", 2
		}
		runWeights(t, r)
		r.MaxIters, r.Resume = 12, true
		r.Pipeline, r.MicroBatches = "", 0
		if !firstPiped {
			r.Pipeline, r.MicroBatches = "cpu:1,cpu:2", 2
		}
		got, log := runWeights(t, r)
		if !strings.Contains(log, "continuing from") {
			t.Fatalf("no resume:\n%s", log)
		}
		if d := maxDiff(t, want, got); d > 1e-5 {
			t.Fatalf("first half pipelined=%v: resumed weights differ from one run's by %g", firstPiped, d)
		}
	}
}

func TestPipelineConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.MicroBatches = 2 }, "need Pipeline"},
		{func(c *Config) { c.Pipeline, c.MicroBatches = "cpu:0,cpu:1", 3 }, "not a multiple"},
		{func(c *Config) { c.Pipeline = "cpu:0,cpu:0" }, "twice"},
		{func(c *Config) { c.Pipeline = "cpu:0,tpu:1" }, "unknown device"},
		{func(c *Config) { c.Pipeline, c.PipelineSchedule = "cpu:0,cpu:1", "zigzag" }, "unknown schedule"},
		{func(c *Config) { c.Pipeline, c.PipelineSplit = "cpu:0,cpu:1", "1,2" }, "places 3 layers"},
	} {
		c := pipeTinyConfig(t)
		tc.set(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one saying %q", err, tc.want)
		}
	}
	c := pipeTinyConfig(t)
	c.Pipeline, c.MicroBatches = "cpu:0,cpu:1,cpu:2", 4
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

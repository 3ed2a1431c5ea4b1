package train

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// llamaOf sets c's model to a Llama-style one with every piece on:
// grouped keys and values, QK-norm, q/k/v biases, an untied head.
func llamaOf(c Config) Config {
	c.Arch, c.NKVHead, c.QKNorm, c.QKVBias, c.UntiedHead = "llama", 1, true, true, true
	return c
}

// TestLlamaPipeline trains a Llama-style model on 2 logical CPU devices
// with 1F1B, dropout and recomputation, against the same run on one
// device: the untied head lives on the last stage, the rotary tables on
// each stage's device.
func TestLlamaPipeline(t *testing.T) {
	c := llamaOf(pipeTinyConfig(t))
	c.Dropout, c.Recompute = 0.1, true
	c.Pipeline, c.MicroBatches, c.PipelineSchedule = "cpu:1,cpu:2", 2, "1f1b"
	piped, _ := runWeights(t, c)
	c.Pipeline, c.MicroBatches, c.PipelineSchedule = "", 0, ""
	c.Out = filepath.Join(t.TempDir(), "one")
	one, _ := runWeights(t, c)
	if d := maxDiff(t, one, piped); d > 1e-5 {
		t.Fatalf("pipelined weights differ from one device's by %g", d)
	}
	if _, ok := one.Tensors["lm_head.weight"]; !ok {
		t.Fatal("the untied head is not in the weights")
	}
}

// TestLlamaDDP: 2 ranks of 6 windows end where one process of 12 does,
// with the optimizer whole on every rank and sharded (ZeRO-1).
func TestLlamaDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 2 groups")
	}
	base := llamaOf(ddpConfig(t, 2026))
	ref := runSingle(t, base)
	for _, zero := range []int{0, 1} {
		cfg := base
		cfg.Out = filepath.Join(t.TempDir(), "out")
		cfg.BatchSize, cfg.Zero = 6, zero
		ranks, _ := runGroupOut(t, cfg, 2)
		if name := sameBits(ranks[0], ranks[1]); name != "" {
			t.Errorf("zero %d: rank 1's %s differs from rank 0's", zero, name)
		}
		if d := maxDiff(t, ranks[0], ref); d > 1e-5 {
			t.Errorf("zero %d: 2 ranks × 6 end %.3g from 1 process × 12 (want ≤ 1e-5)", zero, d)
		}
	}
}

// TestLlamaResumeIsExact: a Llama-style run resumed from a checkpoint
// ends with the uninterrupted run's weights, bit for bit.
func TestLlamaResumeIsExact(t *testing.T) {
	c := llamaOf(resumeConfig(t))
	var log bytes.Buffer
	if _, err := Run(c, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	want := mustRead(t, filepath.Join(c.Out, ModelFile))
	rc := stoppedAt(t, c, 15)
	rc.Resume = true
	log.Reset()
	if _, err := Run(rc, &log); err != nil {
		t.Fatalf("resume: %v\n%s", err, log.String())
	}
	if got := mustRead(t, filepath.Join(rc.Out, ModelFile)); !bytes.Equal(got, want) {
		t.Error("the resumed run's weights differ from the uninterrupted run's")
	}
	// A resume that asks for another model is refused.
	bad := rc
	bad.QKNorm = false
	if _, err := Run(bad, &log); err == nil || !strings.Contains(err.Error(), "QKNorm") {
		t.Errorf("a resume without --qk-norm: %v, want a refusal naming it", err)
	}
}

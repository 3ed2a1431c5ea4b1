package train

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// lstmOf sets c's model to an LSTM with gate biases and an untied head.
func lstmOf(c Config) Config {
	c.Arch, c.Bias, c.UntiedHead = "lstm", true, true
	return c
}

// TestLSTMDDP: 2 ranks of 6 windows end where one process of 12 does
// (the gradient buckets and the hooks see an LSTM's parameters as any
// model's).
func TestLSTMDDP(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a group")
	}
	checkTwoRanksEqualOne(t, lstmOf(ddpConfig(t, 2026)))
}

// TestLSTMResumeIsExact: an LSTM run with dropout resumed from a
// checkpoint ends with the uninterrupted run's weights, bit for bit; a
// resume that asks for another family is refused.
func TestLSTMResumeIsExact(t *testing.T) {
	c := lstmOf(resumeConfig(t))
	c.Dropout = 0.1
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
	bad := rc
	bad.Arch = "gpt2"
	bad.UntiedHead = false
	if _, err := Run(bad, &log); err == nil || !strings.Contains(err.Error(), "Arch") {
		t.Errorf("a resume as gpt2: %v, want a refusal naming the arch", err)
	}
}

// What an LSTM does not run is refused before anything starts, naming
// the setting.
func TestLSTMRefusals(t *testing.T) {
	for _, set := range []struct {
		name string
		f    func(*Config)
	}{
		{"Precision", func(c *Config) { c.Precision = "bf16" }},
		{"Recompute", func(c *Config) { c.Recompute = true }},
		{"Pipeline", func(c *Config) { c.Pipeline = "cpu:1,cpu:2" }},
	} {
		c := lstmOf(Default())
		set.f(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), set.name) {
			t.Errorf("%s: %v, want a refusal naming it", set.name, err)
		}
	}
}

// TestLSTMReplicas: an LSTM with dropout on 2 replicas (--replicas, one
// process) ends where one device does.
func TestLSTMReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("trains twice")
	}
	c := lstmOf(ddpConfig(t, 2028))
	c.Dropout = 0.1
	ref := runSingle(t, c)
	c.Replicas = "cpu:0,cpu:1"
	c.Out = filepath.Join(t.TempDir(), "reps")
	reps, _ := runWeights(t, c)
	if d := maxDiff(t, ref, reps); d > 1e-5 {
		t.Fatalf("the replicas' weights differ from one device's by %g", d)
	}
}

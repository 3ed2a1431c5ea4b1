package train

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
)

// TestSettingsThatRunAsPlainTraining: --zero 1 on one process and
// --pipeline with one stage train as plain training, and the log says so
// in one line each; a run that does shard or pipeline has no such line.
func TestSettingsThatRunAsPlainTraining(t *testing.T) {
	const zeroLine = "zero: --zero 1 shards the optimizer's state over a data-parallel group; one process has none, so its state stays whole: plain training"
	const pipeLine = "pipeline: one stage holds the whole model on cpu, so nothing runs in parallel: plain training, its 2 micro-batches accumulating gradients"
	run := func(name string, edit func(*Config)) string {
		t.Helper()
		cfg := ddpConfig(t, 3)
		cfg.MaxIters, cfg.LogInterval = 2, 1
		cfg.Out = filepath.Join(t.TempDir(), "out")
		edit(&cfg)
		var log bytes.Buffer
		if _, err := Run(cfg, &log); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, log.String())
		}
		return log.String()
	}
	count := func(log, line string) int { return strings.Count(log, line) }

	log := run("--zero 1", func(c *Config) { c.Zero = 1 })
	if n := count(log, zeroLine); n != 1 {
		t.Errorf("--zero 1 on one process: the log says %d times %q:\n%s", n, zeroLine, log)
	}
	log = run("--pipeline cpu:0", func(c *Config) { c.Pipeline, c.MicroBatches = "cpu:0", 2 })
	if n := count(log, pipeLine); n != 1 {
		t.Errorf("--pipeline cpu:0: the log says %d times %q:\n%s", n, pipeLine, log)
	}
	log = run("plain", func(c *Config) {})
	log += run("--pipeline cpu:0,cpu:1", func(c *Config) { c.Pipeline, c.MicroBatches = "cpu:0,cpu:1", 2 })
	if strings.Contains(log, "zero:") || strings.Contains(log, "one stage") {
		t.Errorf("a plain run or a 2-stage pipeline says it runs as plain training:\n%s", log)
	}
}

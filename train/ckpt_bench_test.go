package train

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// benchCheckpoint times checkpoints of a model of shape mc on the CPU: the
// snapshot that blocks the training loop, and the background write.
func benchCheckpoint(b *testing.B, mc model.Config) {
	m, err := model.New(mc, tensor.CPU, 1)
	if err != nil {
		b.Fatal(err)
	}
	c := Default()
	c.Out = b.TempDir()
	c.Keep = 2
	if err := os.WriteFile(filepath.Join(c.Out, TokenizerFile), []byte("{}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	var log bytes.Buffer
	r := newRun(c, tensor.CPU, &log)
	r.model = m
	r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95})
	r.sched = optim.Schedule{LR: 1e-3, MinLR: 1e-4, WarmupIters: 10, DecayIters: 100}
	ck, err := newCheckpointer(r, config.RunConfig{Train: c, Model: mc})
	if err != nil {
		b.Fatal(err)
	}
	r.ckpt = ck
	// A first checkpoint allocates the host buffers.
	if err := ck.save(r, 0, math.Inf(1), false); err != nil {
		b.Fatal(err)
	}
	if err := ck.wait(&log); err != nil {
		b.Fatal(err)
	}
	var snap, write time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := ck.save(r, i+1, math.Inf(1), false); err != nil {
			b.Fatal(err)
		}
		if err := ck.wait(&log); err != nil {
			b.Fatal(err)
		}
		snap += ck.lastRes.snap
		write += ck.lastRes.write
	}
	b.ReportMetric(ms(snap)/float64(b.N), "snapshot-ms")
	b.ReportMetric(ms(write)/float64(b.N), "write-ms")
	b.Logf("%.1fM parameters: %s", float64(m.NumParams())/1e6, log.String())
}

// BenchmarkCheckpointReference is the shape of fleet train's defaults.
func BenchmarkCheckpointReference(b *testing.B) {
	c := Default()
	benchCheckpoint(b, c.ModelConfig(65))
}

// BenchmarkCheckpointGPT2 is GPT-2 124M's shape with nanoGPT's padded
// vocabulary.
func BenchmarkCheckpointGPT2(b *testing.B) {
	benchCheckpoint(b, model.Config{VocabSize: 50304, BlockSize: 1024, NLayer: 12, NHead: 12, NEmbd: 768})
}

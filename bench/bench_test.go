package bench

import (
	"testing"

	"github.com/fleetml/fleet/train"
)

// BenchmarkTrainStep times one optimizer step of the nanoGPT CPU reference
// configuration (4 layers, 4 heads, 128 embd, block 64, batch 12).
func BenchmarkTrainStep(b *testing.B) {
	cfg := train.Default()
	cfg.Device = "cpu"
	res, err := Steps(cfg, 65, 2, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.TokensPerSec, "tokens/s")
	b.ReportMetric(res.MsPerStep, "ms/step")
}

// BenchmarkTrainStepLarge times the larger CPU config of the speed
// target: 6 layers, 6 heads, 384 embd, block 128, batch 8.
func BenchmarkTrainStepLarge(b *testing.B) {
	cfg := train.Default()
	cfg.Device = "cpu"
	cfg.NLayer, cfg.NHead, cfg.NEmbd, cfg.BlockSize, cfg.BatchSize = 6, 6, 384, 128, 8
	res, err := Steps(cfg, 65, 1, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.TokensPerSec, "tokens/s")
	b.ReportMetric(res.MsPerStep, "ms/step")
}

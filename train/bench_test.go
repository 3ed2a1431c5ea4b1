package train

import "testing"

// BenchmarkTrainStep times one optimizer step of the nanoGPT CPU reference
// configuration (4 layers, 4 heads, 128 embd, block 64, batch 12).
func BenchmarkTrainStep(b *testing.B) {
	cfg := Default()
	cfg.Device = "cpu"
	res, err := Benchmark(cfg, 65, 2, b.N)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(res.TokensPerSec, "tokens/s")
	b.ReportMetric(res.MsPerStep, "ms/step")
}

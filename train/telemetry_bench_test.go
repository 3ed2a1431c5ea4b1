package train

import (
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/stats"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// BenchmarkTelemetryOverhead measures what step telemetry costs: the
// reference step with and without it, in alternating blocks of steps on
// one model (so both see the same machine), reporting the median ms of
// each and the overhead in percent. Phase changes cost a clock read each
// on the CPU (an event record on a GPU).
func BenchmarkTelemetryOverhead(b *testing.B) {
	cfg := Default()
	cfg.Device = "cpu"
	tok := make([]int32, 1<<16)
	for i := range tok {
		tok[i] = int32(i * 7 % 65)
	}
	s, _ := data.NewSampler(tok, cfg.BlockSize, 1, data.StreamTrain)
	m, err := model.New(cfg.ModelConfig(65), tensor.CPU, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := newRun(cfg, tensor.CPU, nil)
	r.model, r.train = m, s
	r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
	defer r.close()
	tel := newTelemetry(tensor.CPU)
	var on, off []float64
	step := 0
	for range 3 { // warm-up
		r.mustStep(step, 1e-3)
		step++
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, with := range []bool{i%2 == 0, i%2 != 0} {
			r.tel = nil
			if with {
				r.tel = tel
			}
			t0 := time.Now()
			r.tel.begin(phH2D)
			r.mustStep(step, 1e-3)
			r.tel.end(true)
			ms := float64(time.Since(t0).Nanoseconds()) / 1e6
			step++
			if with {
				on = append(on, ms)
			} else {
				off = append(off, ms)
			}
		}
	}
	b.ReportMetric(stats.Median(on), "ms/step-telemetry")
	b.ReportMetric(stats.Median(off), "ms/step-plain")
	b.ReportMetric(100*(stats.Median(on)/stats.Median(off)-1), "overhead-%")
}

package train

import (
	"fmt"
	"io"
	"testing"

	"github.com/fleetml/fleet/internal/testenv"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// BenchmarkPipeline times training steps of the default model (batch 24)
// split over S = 2 and 4 logical CPU devices with M = 1, 4 and 8
// micro-batches, and reports the schedule's own bubble, the measured
// bubble (the stages' idle share of the wall time) and each stage's
// utilisation, the share of the last step in which every stage was busy
// at once, each stage's peak memory during the schedule above what it
// holds between steps (the micro-batches' activations in flight), and the
// wall and serial (summed slot) ms per schedule run. The stages run at the
// same time, each on its own goroutine, splitting the machine's cores:
//
//	go test ./train -run '^$' -bench Pipeline -benchtime 10x
func BenchmarkPipeline(b *testing.B) {
	tok := data.NewChar(testenv.Text())
	ids, _ := tok.Encode(testenv.Text())
	for _, sched := range []string{"gpipe", "1f1b"} {
		for _, S := range []int{2, 4} {
			for _, M := range []int{1, 4, 8} {
				b.Run(fmt.Sprintf("%s/S=%d/M=%d", sched, S, M), func(b *testing.B) {
					c := Default()
					c.Device = "cpu"
					c.BatchSize = 24
					c.Pipeline = "cpu:1"
					for i := 2; i <= S; i++ {
						c.Pipeline += fmt.Sprintf(",cpu:%d", i)
					}
					c.MicroBatches, c.PipelineSchedule = M, sched
					m, err := model.New(c.ModelConfig(tok.Size()), tensor.CPU, 1)
					if err != nil {
						b.Fatal(err)
					}
					s, _ := data.NewSampler(ids, c.BlockSize, 1, data.StreamTrain)
					r := newRun(c, tensor.CPU, io.Discard)
					r.model, r.train = m, s
					pl, err := c.Place()
					if err != nil {
						panic(err)
					}
					if r.multi, err = newPipeRun(r, pl.Stages); err != nil {
						b.Fatal(err)
					}
					defer r.close()
					r.opt = optim.NewAdamW(m.Parameters(), optim.AdamWConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
					for step := range 5 { // warm-up: the pipeline report skips these
						r.mustStep(step, 1e-3)
					}
					// What each stage holds between steps (weights, gradients,
					// optimizer state; and other benchmarks' models, in this
					// process): the schedule's peak above it is activations.
					var held []int64
					for _, d := range r.multi.(*pipeRun).devs {
						held = append(held, tensor.MemStats(d).Allocated)
					}
					b.ResetTimer()
					for i := range b.N {
						r.mustStep(5+i, 1e-3)
					}
					b.StopTimer()
					rep := r.multi.(*pipeRun).report()
					b.ReportMetric(rep.ScheduleBubble, "sched_bubble")
					b.ReportMetric(rep.MeasuredBubble, "bubble")
					for st, u := range rep.Utilisation {
						b.ReportMetric(100*u, fmt.Sprintf("util%%_s%d", st))
					}
					b.ReportMetric(100*rep.AllBusyShare, "all_busy%")
					for st, pk := range rep.SchedulePeakMemBytes {
						b.ReportMetric(float64(pk-held[st])/(1<<20), fmt.Sprintf("act_MiB_s%d", st))
					}
					b.ReportMetric(rep.MakespanMs, "wall_ms")
					b.ReportMetric(rep.SerialMs, "serial_ms")
				})
			}
		}
	}
}

package train

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"reflect"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/atomicfile"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// evaluate estimates train and val loss on EvalIters random batches each,
// saving best.safetensors when val loss improves. In a data-parallel group
// every rank evaluates its rows of the batches one process of the same
// global micro-batch would evaluate, and the losses are averaged, so the
// group's estimate is that process's.
func (r *run) evaluate(step int, sum *Summary) error {
	r.evaluating = true
	defer func() { r.evaluating = false }()
	var tl, vl float64
	ms := r.micros()
	loss, progs := ms.evaluator()
	rank, world := r.cfg.Rank, max(r.cfg.WorldSize, 1)
	eval := func() {
		progs.autocast(r.prec.DType(), func() { // evaluate as the model trains
			tl = estimateLoss(r.model, progs, loss, r.eval.train, step, r.cfg.EvalIters, r.cfg.BatchSize, rank, world)
			vl = estimateLoss(r.model, progs, loss, r.eval.val, step, r.cfg.EvalIters, r.cfg.BatchSize, rank, world)
		})
	}
	ms.evaluate(eval)
	vals := [...]float64{tl, vl} // the means over the ranks
	if err := r.group().Average(vals[:]); err != nil {
		return fmt.Errorf("step %d: averaging the evaluation: %w", step, err)
	}
	tl, vl = vals[0], vals[1]
	if r.simulated {
		if r.cfg.Rank == 0 {
			fmt.Fprintf(r.log, "eval step %d: train loss n/a, val loss n/a (simulated GPU)\n", step)
		}
		return nil
	}
	if !finite(tl) || !finite(vl) {
		// The weights the step left are not finite: no metric, no
		// best.safetensors, and no JSON could even hold the loss.
		advice, args := r.divergedAdvice(step)
		return setting.Errorf("step %d: the evaluation loss is not finite (train %v, val %v): the run diverged at or before this step; "+advice,
			append([]any{step, tl, vl}, args...)...)
	}
	if r.cfg.Rank != 0 {
		return nil // rank 0 logs and saves
	}
	ppl := math.Exp(vl)
	fmt.Fprintf(r.log, "eval step %d: train loss %.4f, val loss %.4f, val perplexity %.3f\n", step, tl, vl, ppl)
	sum.FinalValLoss = vl
	sum.ValPerplexity = ppl
	if vl < sum.BestValLoss {
		sum.BestValLoss = vl
		if err := r.model.SaveWeights(filepath.Join(r.cfg.Out, BestFile), map[string]string{"step": fmt.Sprint(step)}); err != nil {
			return err
		}
	}
	if err := r.out.sinks.sample(r.model, step, r.cfg.Seed); err != nil {
		return err
	}
	return r.addMetric(Metric{Step: step, TrainLoss: &tl, ValLoss: &vl, Perplexity: &ppl})
}

// EstimateLoss averages the loss over iters batches of random windows
// drawn for step, with dropout off and no gradients.
func EstimateLoss(m *model.GPT, s *data.Sampler, step, iters, batch int) float64 {
	return estimateLoss(m, programs{tensor.ProgramOf(m.Device())}, m.Loss, s, step, iters, batch, 0, 1)
}

// estimateLoss is EstimateLoss for rank of a group of world processes,
// each with batch rows: batch k of the group is windows k·batch·world
// onwards, and the rank evaluates its batch rows of it, with loss (the
// model's, or a pipeline's through its stages), in steps of the programs
// progs that drive the devices it runs on. The mean of the ranks'
// estimates is the estimate of one process with batch·world rows.
func estimateLoss(m *model.GPT, progs programs, loss func(x, y *tensor.Tensor) *tensor.Tensor, s *data.Sampler,
	step, iters, batch, rank, world int) float64 {
	defer m.SetTraining(m.SetTraining(false))
	T := s.BlockSize()
	x := make([]int32, batch*T)
	y := make([]int32, batch*T)
	dev := m.Device()
	var total float64
	progs.noGrad(func() {
		for k := 0; k < iters; k++ {
			s.Batch(step, (k*world+rank)*batch, batch, x, y)
			progs.step(func() {
				total += float64(loss(tensor.FromInt32s(dev, x, batch, T), tensor.FromInt32s(dev, y, batch, T)).Item())
			})
		}
	})
	return total / float64(iters)
}

// addMetric appends a line to metrics.jsonl, rewriting the file atomically.
func (r *run) addMetric(m Metric) error {
	dropNonFinite(&m)
	line, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if r.cfg.Rank != 0 {
		return nil
	}
	r.out.metrics.Write(line)
	r.out.metrics.WriteByte('\n')
	if err := r.out.sinks.emit(m); err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(r.cfg.Out, MetricsFile), r.out.metrics.Bytes())
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return atomicfile.WriteFile(path, append(b, '\n'))
}

// dropNonFinite leaves out the fields of m that are NaN or infinite (an
// fp16 step's gradient norm where the scaler skipped it, or a diverging
// run's), which JSON cannot hold: the log line still shows them.
func dropNonFinite(m *Metric) {
	v := reflect.ValueOf(m).Elem()
	for i := 0; i < v.NumField(); i++ {
		if f, ok := v.Field(i).Interface().(*float64); ok && f != nil && !finite(*f) {
			v.Field(i).SetZero()
		}
	}
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// simulated reports whether dev is a simulated GPU (backend.Simulated).
func simulated(dev tensor.Device) bool {
	b, err := backend.Get(dev)
	if err != nil {
		return false
	}
	s, ok := b.(backend.Simulated)
	return ok && s.Simulated()
}

// lossText formats a loss for the log: n/a on a simulated GPU.
func (r *run) lossText(v float64) string {
	if r.simulated {
		return "n/a"
	}
	return fmt.Sprintf("%.4f", v)
}

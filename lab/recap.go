package lab

// The recap experiment: the lecture's three generations of language
// models, side by side on the same data and the same wall-clock budget.
//
//   - n-gram: an interpolated Kneser-Ney model (data.NGram), counted at
//     orders 1, 2, 3, ... while the budget lasts; each order is a point
//     of its curve at the time its counting and evaluation ended, and its
//     figures are the order with the lowest val perplexity.
//   - lstm: fleet train --arch lstm with the lab's model flags (NLayer
//     layers of NEmbd units).
//   - transformer: fleet train with the lab's model flags as given.
//
// The neural models train in this process through train.Run, each with
// as many steps as the budget holds at the best speed of a few short
// benchmarks run first (so that the learning rate decays over the run),
// and are stopped when the budget runs out where they are slower than
// that, as on a shared machine they mostly are. Their
// curves are the trainer's periodic evaluations (EvalIters random
// windows of the val split); their final perplexity is the best
// evaluation's weights on the whole val split, in consecutive windows of
// the block size (runs.SequentialLoss, as fleet eval computes it). The
// n-gram's is over the whole val split too (each token given up to
// order-1 tokens before it, where a neural model sees the tokens before
// it in its window). Time is wall time from the start of each model's
// run, its set-up and periodic evaluations included; the final
// evaluation is not.

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/fleetml/fleet/bench"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/internal/stats"
	"github.com/fleetml/fleet/monitor/report"
	"github.com/fleetml/fleet/runs"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train"
	"github.com/fleetml/fleet/train/config"
)

// Recap is the recap experiment's result, RecapModel one of its models
// and RecapPoint a point of a curve: the report's types, which lab.json
// holds and `fleet report` plots.
type (
	Recap      = report.Recap
	RecapModel = report.RecapModel
	RecapPoint = report.RecapPoint
)

// RecapModels are the recap's models, in the order they train: the
// n-gram, then the architectures fleet train takes (--arch), the
// transformer being the lab's own model flags.
var RecapModels = []struct{ Name, Arch string }{{"n-gram", ""}, {"lstm", "lstm"}, {"transformer", ""}}

// recap runs the experiment on the lab's device and data.
func recap(dev tensor.Device, o Options) (Recap, error) {
	if simOf(dev) != nil {
		rc := Recap{Note: fmt.Sprintf("not applicable: %v computes nothing (a simulated GPU holds no data), and the recap needs a device that trains", dev)}
		fmt.Fprintf(o.Log, "   %s\n", rc.Note)
		return rc, nil
	}
	budget := o.RecapSeconds
	if budget <= 0 {
		budget = 60
		if o.Quick {
			budget = 4
		}
	}
	c := o.Model
	c.Data = o.Data
	trainToks, val, vocab, desc, closeData, err := train.OpenData(c)
	if err != nil {
		return Recap{}, err
	}
	defer closeData()
	rc := Recap{Data: desc, BudgetSec: budget, TrainTokens: trainToks.Len(), ValTokens: val.Len(),
		Method: "each model trains for the same wall-clock budget on the same train split; perplexity is per token on the whole val split " +
			"(the neural models' best periodic evaluation's weights, in consecutive windows of the block size; the n-gram's best order); " +
			"the curves are the n-gram's orders and the neural models' periodic evaluations (random val windows), against wall time " +
			"from each model's start, set-up and periodic evaluations included"}
	for _, m := range RecapModels {
		var leg RecapModel
		var err error
		if m.Name == "n-gram" {
			leg, err = ngramLeg(trainToks, val, vocab, budget)
		} else {
			cc := c
			if m.Arch != "" {
				cc.Arch = m.Arch
			}
			leg, err = neuralLeg(m.Name, cc, dev, val, vocab, budget, o)
		}
		if err != nil {
			return rc, fmt.Errorf("%s: %w", m.Name, err)
		}
		rc.Models = append(rc.Models, leg)
	}
	rc.Summary = recapSummary(rc)
	recapPrint(o, rc)
	return rc, nil
}

// ngramLeg counts n-grams of rising order while the budget lasts.
func ngramLeg(trainToks, val data.Tokens, vocab int, budget float64) (RecapModel, error) {
	leg := RecapModel{Name: "n-gram", Arch: "kneser-ney"}
	bits := 1
	for 1<<bits < vocab {
		bits++
	}
	start := time.Now()
	best := math.Inf(1)
	for order := 1; order*bits <= 64 && time.Since(start).Seconds() < budget; order++ {
		t0 := time.Now()
		m, err := data.TrainNGram(trainToks, order, vocab)
		if err != nil {
			return leg, err
		}
		counted := time.Since(t0).Seconds()
		ce, err := m.CrossEntropy(val)
		if err != nil {
			return leg, fmt.Errorf("val split: %w", err)
		}
		ppl := math.Exp(ce)
		at := time.Since(start).Seconds()
		leg.Curve = append(leg.Curve, RecapPoint{Sec: at, Perplexity: ppl, Step: order})
		if ppl < best {
			best = ppl
			n := 0
			for k := 1; k <= order; k++ {
				n += m.NumNGrams(k)
			}
			leg.Params, leg.ValPerplexity, leg.TokensPerSec = n, ppl, float64(trainToks.Len())/counted
			leg.Note = fmt.Sprintf("order %d, the best of orders 1 to %d on the val split; its parameters are the distinct n-grams it counted", order, order)
		}
		leg.ElapsedSec = at
	}
	if last := len(leg.Curve); last > 0 {
		leg.Note = fmt.Sprintf("%s (%d orders tried within the budget)", leg.Note, last)
	}
	return leg, nil
}

// neuralLeg trains c (its Arch) for the budget and evaluates it.
func neuralLeg(name string, c train.Config, dev tensor.Device, val data.Tokens, vocab int, budget float64, o Options) (RecapModel, error) {
	leg := RecapModel{Name: name, Arch: c.Arch}
	if leg.Arch == "" {
		leg.Arch = "gpt2"
	}
	c.Device = dev.String()
	c.GradAccum, c.TokensPerStep = 1, 0
	if err := c.Validate(); err != nil {
		if name != "transformer" { // this build may lack the architecture
			leg.Skipped = err.Error()
			return leg, nil
		}
		return leg, err
	}
	// The budget's steps at the best speed of a few short benchmarks: on
	// a shared machine a benchmark slowed by other work would plan too
	// few steps and leave the budget unused; planned from the fastest, a
	// slowed run is stopped by the budget instead.
	stepMs := math.Inf(1)
	for range 5 {
		r, err := bench.Steps(c, vocab, 1, 2)
		if err != nil {
			return leg, fmt.Errorf("timing a step: %w", err)
		}
		stepMs = min(stepMs, r.MsPerStep)
	}
	steps := max(10, int(budget*1e3/stepMs))
	tmp, err := os.MkdirTemp("", "fleet-lab-recap-")
	if err != nil {
		return leg, err
	}
	defer os.RemoveAll(tmp)
	c.Out = filepath.Join(tmp, name)
	c.MaxIters, c.LRDecayIters, c.WarmupIters = steps, 0, min(c.WarmupIters, steps/10)
	c.EvalInterval, c.EvalIters, c.LogInterval, c.CkptInterval = max(1, steps/8), 20, steps, steps
	stop := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	var after []float64 // seconds since the start at the end of each step
	start := time.Now()
	c.Stop = stop
	c.AfterStep = func(done int) {
		at := time.Since(start).Seconds()
		mu.Lock()
		after = append(after, at)
		mu.Unlock()
		if at >= budget {
			once.Do(func() { close(stop) })
		}
	}
	var log bytes.Buffer
	_, err = train.Run(c, &log)
	stopped := errors.Is(err, train.ErrInterrupted)
	if err != nil && !stopped {
		return leg, fmt.Errorf("%w\n%s", err, tail(log.String(), 2000))
	}
	leg.ElapsedSec = time.Since(start).Seconds()
	leg.Steps = len(after)
	var dts []float64
	for i := 1; i < len(after); i++ {
		dts = append(dts, after[i]-after[i-1])
	}
	if len(dts) > 0 {
		leg.TokensPerSec = float64(c.BatchSize*c.BlockSize) / stats.Median(dts)
	}
	leg.Note = fmt.Sprintf("%d of %d planned steps (%.1f ms the fastest benchmark step)", leg.Steps, steps, stepMs)
	if stopped {
		leg.Note += ", stopped by the budget"
	}
	// The curve: each evaluation at the time its step ended (0 for the
	// model before training).
	b, err := os.ReadFile(filepath.Join(c.Out, train.MetricsFile))
	if err != nil {
		return leg, err
	}
	recs, _, err := report.ReadMetrics(bytes.NewReader(b))
	if err != nil {
		return leg, err
	}
	for _, m := range recs {
		ppl, ok := m["val_perplexity"]
		if !ok {
			continue
		}
		s := int(m["step"])
		at := 0.0
		if s > 0 && s <= len(after) {
			at = after[s-1]
		}
		leg.Curve = append(leg.Curve, RecapPoint{Sec: at, Perplexity: ppl, Step: s})
	}
	sort.SliceStable(leg.Curve, func(i, j int) bool { return leg.Curve[i].Step < leg.Curve[j].Step })
	tr, err := runs.Load(c.Out, config.BestFile, dev)
	if err != nil {
		return leg, err
	}
	defer func() {
		for _, p := range tr.Model.Parameters() {
			p.T.Free()
		}
	}()
	leg.Params = tr.Model.NumParams()
	if o.Quick { // the first windows only
		val = runs.FirstWindows(val, 256, c.BlockSize)
		leg.Note += "; --quick: perplexity over the val split's first 256 windows"
	}
	ce, _, err := runs.SequentialLoss(tr.Model, val, 32)
	if err != nil {
		return leg, fmt.Errorf("val split: %w", err)
	}
	leg.ValPerplexity = math.Exp(ce)
	return leg, nil
}

// recapSummary ranks the models by val perplexity.
func recapSummary(rc Recap) string {
	var ran []RecapModel
	for _, m := range rc.Models {
		if m.Skipped == "" {
			ran = append(ran, m)
		}
	}
	if len(ran) == 0 {
		return "no model ran"
	}
	sort.SliceStable(ran, func(i, j int) bool { return ran[i].ValPerplexity < ran[j].ValPerplexity })
	s := fmt.Sprintf("in %.0f s each, val perplexity per token:", rc.BudgetSec)
	for i, m := range ran {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf(" %s %.3f", m.Name, m.ValPerplexity)
	}
	return s
}

func recapPrint(o Options, rc Recap) {
	w := o.Log
	fmt.Fprintf(w, "   data: %s (%d train, %d val tokens); budget %.0f s per model\n", rc.Data, rc.TrainTokens, rc.ValTokens, rc.BudgetSec)
	fmt.Fprintf(w, "   %-12s %-11s %12s %12s %14s %9s\n", "model", "arch", "parameters", "tokens/s", "val perplexity", "time s")
	for _, m := range rc.Models {
		if m.Skipped != "" {
			fmt.Fprintf(w, "   %-12s %-11s skipped: %s\n", m.Name, m.Arch, m.Skipped)
			continue
		}
		fmt.Fprintf(w, "   %-12s %-11s %12d %12.0f %14.3f %9.1f   %s\n", m.Name, m.Arch, m.Params, m.TokensPerSec, m.ValPerplexity, m.ElapsedSec, m.Note)
	}
	fmt.Fprintf(w, "   => %s\n", rc.Summary)
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

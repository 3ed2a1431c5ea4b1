package train

import (
	"io"

	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/ddp"
)

// Stepper runs the trainer's optimizer step outside Run, on batches a
// sampler deals out: exactly the step Run takes (accumulation, autocast,
// fp16 loss scaling, clipping and AdamW), without evaluation, logging or
// checkpoints. Benchmarks time it.
type Stepper struct{ r *run }

// NewStepper makes a Stepper for model m on dev with cfg's batch,
// precision and optimizer settings (cfg must be valid, with its
// accumulation resolved), drawing its batches from s.
func NewStepper(cfg Config, dev tensor.Device, m *model.GPT, s *data.Sampler) *Stepper {
	r := newRun(cfg, dev, io.Discard)
	r.model, r.train = m, s
	opt, err := newOptimizer(cfg, m.Parameters())
	if err != nil { // a model that marks no matrices for Muon
		panic(&tensor.Error{Op: "optimizer", Msg: err.Error()})
	}
	r.opt = opt
	return &Stepper{r: r}
}

// Step runs optimizer step step at learning rate lr. It reads nothing
// back from the device (Loss does). Data and communication failures are
// returned; a tensor op's failure panics, as a *tensor.Error (a
// programming error) or a *backend.DeviceError (out of memory, a failed
// launch): see tensor.Catch.
func (s *Stepper) Step(step int, lr float64) error { return s.r.step(step, lr) }

// Loss reads the mean loss of the steps since the last Loss (a wait for
// the device); done is the number of steps taken in all.
func (s *Stepper) Loss(done int) float64 {
	mean, _, _, _ := s.r.readStats(done)
	return mean
}

// UseDeviceGroup makes the Stepper's steps data-parallel over grp, as the
// trainer's are over NCCL: each step's gradients are averaged in device
// memory, in buckets of cfg.BucketMB launched during backward on the
// device's communication stream. The ranks start as they are (no
// broadcast). A benchmark passes a simulated group, whose other ranks are
// imagined. With cfg.Zero 1 the optimizer is sharded over grp (ZeRO-1)
// when the first step opens.
func (s *Stepper) UseDeviceGroup(grp dist.DeviceGroup) error {
	r := s.r
	g, err := ddp.WithDeviceGroup(grp, ddp.Options{Config: r.cfg, Dev: r.dev, Params: r.model.Parameters(), Opt: r.opt, Log: io.Discard})
	if err != nil {
		return err
	}
	r.grp = g
	return nil
}

// TokensPerStep is the tokens one Step trains on.
func (s *Stepper) TokensPerStep() int { return s.r.tokensPerStep() }

// Close stops the Stepper's loader and frees its staging memory.
func (s *Stepper) Close() { s.r.close() }

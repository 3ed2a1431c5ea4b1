package train

import "github.com/fleetml/fleet/tensor"

// microSteps is how a step's micro-batches go forward and backward: on the
// model's one device (oneDevice), through a pipeline's stages, each on a
// device of its own (*pipeRun), or scattered over replicas of the model
// (*replicaRun, --replicas). The step around them, accumulation,
// synchronisation and the update, is the same for all.
type microSteps interface {
	// begin readies a step, forwardBackward takes micro-batch micro of it forward and
	// backward, and end finishes the step's backward work.
	begin()
	forwardBackward(step, micro int, x, y *tensor.Tensor)
	end()
	// lossDevice is where the loss is computed, and the step statistics
	// kept.
	lossDevice() tensor.Device
	// pipelined reports whether the parameters are spread over several
	// devices: they are not one flat buffer to pack, clip on a device or
	// capture, and their backward passes run without the gradient hook.
	pipelined() bool
	// evaluator is the loss an evaluation computes and the programs it
	// runs in, and evaluate runs an evaluation.
	evaluator() (loss func(x, y *tensor.Tensor) *tensor.Tensor, progs programs)
	evaluate(fn func())
	// peakMem is the peak memory so far on the run's device (dev).
	peakMem(dev tensor.Device) int64
	// finish writes what the micro-steps report at the end of a run, and
	// close gives back what they hold.
	finish() error
	close()
}

// oneDevice runs a step's micro-steps on the model's one device.
type oneDevice struct{ r *run }

func (o oneDevice) begin() {}
func (o oneDevice) forwardBackward(step, micro int, x, y *tensor.Tensor) {
	o.r.microStep(step, micro, x, y)
}
func (o oneDevice) end()                            {}
func (o oneDevice) lossDevice() tensor.Device       { return o.r.dev }
func (o oneDevice) pipelined() bool                 { return false }
func (o oneDevice) evaluate(fn func())              { fn() }
func (o oneDevice) peakMem(dev tensor.Device) int64 { return tensor.MemStats(dev).Peak }
func (o oneDevice) finish() error                   { return nil }
func (o oneDevice) close()                          {}

func (o oneDevice) evaluator() (func(x, y *tensor.Tensor) *tensor.Tensor, programs) {
	return o.r.model.Loss, programs{tensor.ProgramOf(o.r.dev)}
}

// micros is the run's micro-steps: a pipeline's or the replicas', or the
// model's on its one device (where none were set, as in tests that build
// a run by hand).
func (r *run) micros() microSteps {
	if r.multi != nil {
		return r.multi
	}
	return oneDevice{r}
}

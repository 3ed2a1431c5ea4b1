package pipeline

import (
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/tensor"
)

// Runner executes a schedule's slots for one batch. The tensor package's
// step scopes, autocast and gradient recording are process-wide state,
// so the stages cannot run on goroutines of their own: the runner runs
// every slot on the calling goroutine, in Schedule.Order, and times each
// one. The stage busy times and the bubble of a concurrent pipeline are
// then estimated by laying the measured slot times on the schedule's
// timeline (Stats).
//
// Between stages the runner moves activations forward and their
// gradients backward as explicit copies: a stage's output is detached,
// copied to the next stage's device and made a leaf there; that leaf's
// gradient, after the next stage's backward pass, is copied back and
// seeds this stage's backward pass (tensor.BackwardWith). Stages on the
// same device hand over the detached tensor without a copy.
//
// Run must be called inside a tensor.Step: every micro-batch's graph stays
// alive until its backward pass, and the step frees them all.
type Runner struct {
	Schedule Schedule
	Devices  []tensor.Device
	// Input returns micro-batch m's input to the first stage, on its
	// device.
	Input func(m int) *tensor.Tensor
	// Forward runs stage st on micro-batch m's input x (on the stage's
	// device) and returns its output.
	Forward func(st, m int, x *tensor.Tensor) *tensor.Tensor
	// Loss maps the last stage's output for micro-batch m to the scalar
	// whose gradient the backward pass starts from.
	Loss func(m int, out *tensor.Tensor) *tensor.Tensor
	// Before, when set, is called before each slot runs (telemetry).
	Before func(Slot)

	// Counters, added to by every Run: activations and gradients copied
	// between devices, and their bytes.
	ActCopies, GradCopies int64
	ActBytes, GradBytes   int64
	// SlotTime is each slot's time in the last Run, in seconds: host wall
	// time, or device time where the backend times its own work.
	SlotTime map[Slot]float64

	outs [][]*tensor.Tensor // [stage][micro]: stage output, or the loss on the last stage
	ins  [][]*tensor.Tensor // [stage][micro]: stage input leaf (stages after the first)
}

// Run executes the schedule once, forward and backward, leaving the
// parameters' gradients accumulated as the stage graphs' leaves.
func (r *Runner) Run() {
	S, M := r.Schedule.Stages, r.Schedule.Micros
	if r.outs == nil || len(r.outs) != S || len(r.outs[0]) != M {
		r.outs, r.ins = make([][]*tensor.Tensor, S), make([][]*tensor.Tensor, S)
		for st := range S {
			r.outs[st], r.ins[st] = make([]*tensor.Tensor, M), make([]*tensor.Tensor, M)
		}
	}
	if r.SlotTime == nil {
		r.SlotTime = map[Slot]float64{}
	}
	timers := make([]backend.Timer, S)
	type marks struct{ a, b backend.Mark }
	var devMarks map[Slot]marks
	for st, d := range r.Devices {
		if timers[st] = tensor.DeviceTimer(d); timers[st] != nil && devMarks == nil {
			devMarks = map[Slot]marks{}
		}
	}
	for _, sl := range r.Schedule.Order() {
		st := sl.Stage
		var mk marks
		if tm := timers[st]; tm != nil {
			mk.a, _ = tm.Mark()
		}
		if r.Before != nil {
			r.Before(sl)
		}
		t0 := time.Now()
		if sl.Kind == Forward {
			r.forward(st, sl.Micro)
		} else {
			r.backward(st, sl.Micro)
		}
		r.SlotTime[sl] = time.Since(t0).Seconds()
		if tm := timers[st]; tm != nil {
			mk.b, _ = tm.Mark()
			devMarks[sl] = mk
		}
	}
	for sl, mk := range devMarks {
		tm := timers[sl.Stage]
		if ms, err := tm.Elapsed(mk.a, mk.b); err == nil {
			r.SlotTime[sl] = ms / 1000
		}
		tm.ReleaseMark(mk.a)
		tm.ReleaseMark(mk.b)
	}
	for st := range S {
		clear(r.outs[st])
		clear(r.ins[st])
	}
}

func (r *Runner) forward(st, m int) {
	var x *tensor.Tensor
	if st == 0 {
		x = r.Input(m)
	} else {
		x = r.ins[st][m]
	}
	out := r.Forward(st, m, x)
	if st == r.Schedule.Stages-1 {
		r.outs[st][m] = r.Loss(m, out)
		return
	}
	r.outs[st][m] = out
	next := r.Devices[st+1]
	in := out.Detach()
	if next != out.Device() {
		in = in.To(next)
		r.ActCopies++
		r.ActBytes += int64(in.Numel() * in.DType().Size())
	}
	if out.RequiresGrad() {
		in.SetRequiresGrad(true)
	}
	r.ins[st+1][m] = in
}

func (r *Runner) backward(st, m int) {
	out := r.outs[st][m]
	if !out.RequiresGrad() {
		return
	}
	if st == r.Schedule.Stages-1 {
		out.Backward()
		return
	}
	g := r.ins[st+1][m].Grad
	if g == nil { // no gradient reached the next stage's input
		return
	}
	if dev := r.Devices[st]; g.Device() != dev {
		g = g.To(dev)
		r.GradCopies++
		r.GradBytes += int64(g.Numel() * g.DType().Size())
	}
	out.BackwardWith(g)
}

// Stats are a run's measured stage times laid on the schedule.
type Stats struct {
	// Busy is each stage's total slot time in seconds; Makespan the
	// length of the batch if the stages ran concurrently with these slot
	// times; Serial the sum of all slot times (one goroutine's wall time).
	Busy     []float64
	Makespan float64
	Serial   float64
	// Bubble is 1 - Σ Busy / (stages × Makespan); Utilisation each
	// stage's Busy / Makespan.
	Bubble      float64
	Utilisation []float64
}

// Stats lays the last Run's slot times on the schedule's timeline.
func (r *Runner) Stats() Stats {
	tl := r.Schedule.Simulate(func(sl Slot) float64 { return r.SlotTime[sl] })
	s := Stats{Busy: tl.Busy, Makespan: tl.Makespan, Bubble: tl.BubbleFraction(), Utilisation: tl.Utilisation()}
	for _, b := range tl.Busy {
		s.Serial += b
	}
	return s
}

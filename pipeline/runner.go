package pipeline

import (
	"fmt"
	"sync"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/tensor"
)

// Runner executes a schedule's slots for one batch.
//
// With Programs set (one tensor program per stage, each driving its
// stage's device), every stage runs its own slots, in its schedule order,
// on a goroutine of its own, so micro-batches flow through the stages at
// the same time. Stages hand each other micro-batches over channels: a
// stage's output is detached and sent to the next stage, which copies it
// to its device (tensor.To) and makes it a leaf there; that leaf's
// gradient, after the next stage's backward pass, is sent back, copied
// onto this stage's device and seeds this stage's backward pass
// (tensor.BackwardWith). Every stage's work is the same, in the same
// order, as on one goroutine, so the results are too. Run opens a step of
// every stage's program around the stages, and each stage keeps a
// micro-batch's graph in a scope of its own (tensor.Program.In) that it
// frees right after the micro-batch's backward pass: a stage holds only
// the micro-batches in flight, S at most under 1F1B.
//
// Without Programs, every slot runs on the calling goroutine in
// Schedule.Order (tests, and stages that share a device). Run must then
// be called inside a tensor.Step: every micro-batch's graph stays alive
// until its backward pass, and the step frees them all.
type Runner struct {
	Schedule Schedule
	Devices  []tensor.Device
	// Programs, when set, are the stages' tensor programs: Programs[st]
	// drives Devices[st], and only stage st's goroutine drives it during a
	// Run. The devices must then be distinct.
	Programs []*tensor.Program
	// Input returns micro-batch m's input to the first stage, on its
	// device.
	Input func(m int) *tensor.Tensor
	// Forward runs stage st on micro-batch m's input x (on the stage's
	// device) and returns its output.
	Forward func(st, m int, x *tensor.Tensor) *tensor.Tensor
	// Loss maps the last stage's output for micro-batch m to the scalar
	// whose gradient the backward pass starts from.
	Loss func(m int, out *tensor.Tensor) *tensor.Tensor
	// Before, when set, is called before each slot runs (telemetry). It
	// is called from the stage's goroutine when the stages run
	// concurrently.
	Before func(Slot)
	// Prepare, when set, is called at the start of every Run on the
	// calling goroutine, inside the steps of every stage's program and
	// before any stage starts: the place to make each stage's inputs (the
	// first stage's micro-batches, the last stage's targets) on its
	// device, since while the stages run only a stage's own goroutine may
	// drive its program.
	Prepare func()

	// Counters, added to by every Run: activations and gradients copied
	// between devices, and their bytes.
	ActCopies, GradCopies int64
	ActBytes, GradBytes   int64
	// SlotTime is each slot's time in the last Run, in seconds: host wall
	// time, or device time where the backend times its own work.
	SlotTime map[Slot]float64
	// Spans is the last Run's timeline on one clock: each slot's start and
	// end in host seconds since the Run began, stage by stage in the
	// order they ran.
	Spans []Span

	outs [][]*tensor.Tensor // [stage][micro]: stage output, or the loss on the last stage
	ins  [][]*tensor.Tensor // [stage][micro]: stage input leaf (stages after the first)
	// concurrent runs
	acts, grads []chan handoff // [boundary st→st+1]: activations forward, gradients back
	stages      []stageRun
	abort       chan struct{}
	abortOnce   sync.Once
	failure     any
}

// Span is one slot of a run's timeline, in seconds since the run began.
type Span struct {
	Slot       Slot
	Start, End float64
}

// handoff is a micro-batch's tensor handed from one stage to another:
// a detached activation (grad: whether the stage wants its gradient), or
// an input's gradient (nil where none reached it).
type handoff struct {
	m    int
	t    *tensor.Tensor
	grad bool
}

// stageRun is one stage's part of a concurrent run.
type stageRun struct {
	// taken is a gradient this stage received and has yet to free (its
	// own once received): freed on a failure too.
	taken *tensor.Tensor
	// scopes[m] holds micro-batch m's graph on this stage from its forward
	// pass until its backward pass is done, when it is freed: a stage
	// holds only the micro-batches in flight (S for 1F1B, M for GPipe).
	scopes            []tensor.Scope
	spans             []Span
	times             []float64 // host seconds per slot, in the stage's order
	marks             [][2]backend.Mark
	actCopies, actB   int64
	gradCopies, gradB int64
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
	if r.Programs != nil {
		r.runConcurrent()
	} else {
		r.runSerial()
	}
	for st := range S {
		clear(r.outs[st])
		clear(r.ins[st])
	}
}

// runSerial runs every slot on the calling goroutine.
func (r *Runner) runSerial() {
	S := r.Schedule.Stages
	timers := make([]backend.Timer, S)
	type marks struct{ a, b backend.Mark }
	var devMarks map[Slot]marks
	for st, d := range r.Devices {
		if timers[st] = tensor.DeviceTimer(d); timers[st] != nil && devMarks == nil {
			devMarks = map[Slot]marks{}
		}
	}
	r.Spans = r.Spans[:0]
	t00 := time.Now()
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
			r.forward(st, sl.Micro, nil, handoff{})
		} else {
			r.backward(st, sl.Micro, nil, handoff{})
		}
		t1 := time.Now()
		r.SlotTime[sl] = t1.Sub(t0).Seconds()
		r.Spans = append(r.Spans, Span{sl, t0.Sub(t00).Seconds(), t1.Sub(t00).Seconds()})
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
}

// runConcurrent runs each stage's slots on a goroutine of its own, inside
// a step of its program opened (and closed, after every stage is done)
// here.
func (r *Runner) runConcurrent() {
	S, M := r.Schedule.Stages, r.Schedule.Micros
	if len(r.Programs) != S || len(r.Devices) != S {
		panic(&tensor.Error{Op: "pipeline", Msg: fmt.Sprintf("%d programs and %d devices for %d stages", len(r.Programs), len(r.Devices), S)})
	}
	for st, d := range r.Devices {
		for q := range st {
			if r.Programs[q] == r.Programs[st] {
				panic(&tensor.Error{Op: "pipeline", Msg: fmt.Sprintf("stages %d and %d share %v: concurrent stages need a program each", q, st, r.Programs[st])})
			}
		}
		if tensor.ProgramOf(d) != r.Programs[st] {
			panic(&tensor.Error{Op: "pipeline", Msg: fmt.Sprintf("stage %d's device %v is driven by %v, not by the stage's program %v", st, d, tensor.ProgramOf(d), r.Programs[st])})
		}
	}
	if len(r.acts) != S-1 || (S > 1 && cap(r.acts[0]) < M) {
		r.acts, r.grads = make([]chan handoff, S-1), make([]chan handoff, S-1)
		for b := range S - 1 {
			// Room for every micro-batch: a sender never waits.
			r.acts[b], r.grads[b] = make(chan handoff, M), make(chan handoff, M)
		}
	}
	if len(r.stages) != S {
		r.stages = make([]stageRun, S)
	}
	for st := range r.stages {
		if len(r.stages[st].scopes) != M {
			r.stages[st].scopes = make([]tensor.Scope, M)
		}
	}
	r.abort = make(chan struct{})
	r.abortOnce = sync.Once{}
	r.failure = nil
	t00 := time.Now()
	var wg sync.WaitGroup
	// Each program's step is opened here, on the calling goroutine, one
	// inside the other, so that every stage's tensors live until all the
	// stages are done (a stage reads its neighbours' handoffs until then).
	var nest func(st int)
	nest = func(st int) {
		if st == S {
			if r.Prepare != nil {
				r.Prepare()
			}
			wg.Add(S)
			for s := range S {
				go r.stage(s, t00, &wg)
			}
			wg.Wait()
			// A failed run leaves micro-batches in flight: their scopes
			// are freed here, once no stage reads them any more.
			for st := range r.stages {
				for i := range r.stages[st].scopes {
					r.stages[st].scopes[i].Free()
				}
			}
			return
		}
		r.Programs[st].Step(func() { nest(st + 1) })
	}
	nest(0)
	for b := range r.acts { // a failed run may leave handoffs behind
		drain(r.acts[b], false)
		drain(r.grads[b], true)
	}
	if r.failure != nil {
		panic(r.failure)
	}
	r.Spans = r.Spans[:0]
	for st := range S {
		sr := &r.stages[st]
		r.Spans = append(r.Spans, sr.spans...)
		r.ActCopies += sr.actCopies
		r.ActBytes += sr.actB
		r.GradCopies += sr.gradCopies
		r.GradBytes += sr.gradB
		tm := tensor.DeviceTimer(r.Devices[st])
		for i, sl := range r.Schedule.PerStage[st] {
			r.SlotTime[sl] = sr.times[i]
			if tm == nil || i >= len(sr.marks) {
				continue
			}
			mk := sr.marks[i]
			if ms, err := tm.Elapsed(mk[0], mk[1]); err == nil {
				r.SlotTime[sl] = ms / 1000
			}
			tm.ReleaseMark(mk[0])
			tm.ReleaseMark(mk[1])
		}
	}
}

// drain empties c after a failed run. Gradients handed over and never
// taken are freed (their receiver owned them); activations belong to
// their stage's scope.
func drain(c chan handoff, grads bool) {
	for {
		select {
		case h := <-c:
			if grads && h.t != nil {
				h.t.Free()
			}
		default:
			return
		}
	}
}

// stage runs stage st's slots in order. A panic (a failed op) is kept for
// Run to raise and aborts the other stages, which may be waiting for this
// one.
func (r *Runner) stage(st int, t00 time.Time, wg *sync.WaitGroup) {
	defer wg.Done()
	sr := &r.stages[st]
	defer func() {
		if sr.taken != nil { // a failure between receiving a gradient and freeing it
			sr.taken.Free()
			sr.taken = nil
		}
		if e := recover(); e != nil {
			r.abortOnce.Do(func() {
				r.failure = e
				close(r.abort)
			})
		}
	}()
	sr.spans, sr.times, sr.marks = sr.spans[:0], sr.times[:0], sr.marks[:0]
	sr.actCopies, sr.actB, sr.gradCopies, sr.gradB = 0, 0, 0, 0
	tm := tensor.DeviceTimer(r.Devices[st])
	prog := r.Programs[st]
	last := r.Schedule.Stages - 1
	for _, sl := range r.Schedule.PerStage[st] {
		// The wait for a neighbour's handoff is idle time, not the slot's.
		var h handoff
		switch {
		case sl.Kind == Forward && st > 0:
			h = r.receive(r.acts[st-1], sl.Micro, "the activation")
		case sl.Kind == Backward && st < last:
			h = r.receive(r.grads[st], sl.Micro, "the gradient")
			sr.taken = h.t
		}
		var mk [2]backend.Mark
		if tm != nil {
			mk[0], _ = tm.Mark()
		}
		if r.Before != nil {
			r.Before(sl)
		}
		t0 := time.Now()
		sc := &sr.scopes[sl.Micro]
		if sl.Kind == Forward {
			prog.In(sc, func() { r.forward(st, sl.Micro, sr, h) })
		} else {
			prog.In(sc, func() { r.backward(st, sl.Micro, sr, h) })
			sc.Free()
		}
		t1 := time.Now()
		sr.times = append(sr.times, t1.Sub(t0).Seconds())
		sr.spans = append(sr.spans, Span{sl, t0.Sub(t00).Seconds(), t1.Sub(t00).Seconds()})
		if tm != nil {
			mk[1], _ = tm.Mark()
			sr.marks = append(sr.marks, mk)
		}
	}
}

// receive takes micro-batch m's handoff from c, or gives up when another
// stage failed.
func (r *Runner) receive(c chan handoff, m int, what string) handoff {
	select {
	case h := <-c:
		if h.m != m {
			panic(&tensor.Error{Op: "pipeline", Msg: fmt.Sprintf("%s of micro-batch %d arrived where %d was due: the schedule runs micro-batches out of order", what, h.m, m)})
		}
		return h
	case <-r.abort:
		panic(errAborted)
	}
}

// errAborted stops a stage whose neighbour failed; the neighbour's error
// is the run's.
var errAborted = &tensor.Error{Op: "pipeline", Msg: "another stage failed"}

// forward runs stage st's forward pass of micro-batch m. sr is the stage's
// concurrent run, nil on one goroutine; h is then the activation the
// previous stage handed over.
func (r *Runner) forward(st, m int, sr *stageRun, h handoff) {
	var x *tensor.Tensor
	switch {
	case st == 0:
		x = r.Input(m)
	case sr == nil:
		x = r.ins[st][m]
	default:
		// The previous stage's detached output, copied onto this stage's
		// device by this stage's program: a leaf of this stage's graph.
		x = h.t.To(r.Devices[st])
		sr.actCopies++
		sr.actB += int64(x.Numel() * x.DType().Size())
		if h.grad {
			x.SetRequiresGrad(true)
		}
		r.ins[st][m] = x
	}
	out := r.Forward(st, m, x)
	if st == r.Schedule.Stages-1 {
		r.outs[st][m] = r.Loss(m, out)
		return
	}
	r.outs[st][m] = out
	in := out.Detach()
	if sr != nil {
		r.acts[st] <- handoff{m, in, out.RequiresGrad()}
		return
	}
	next := r.Devices[st+1]
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

// backward runs stage st's backward pass of micro-batch m; h is, in a
// concurrent run, the gradient the next stage handed over.
func (r *Runner) backward(st, m int, sr *stageRun, h handoff) {
	out := r.outs[st][m]
	last := st == r.Schedule.Stages-1
	if !last && sr != nil {
		// The next stage's input gradient (nil where none reached it):
		// this stage's to free once copied.
		g := h.t
		if g != nil {
			gl := g.To(r.Devices[st])
			g.Free()
			sr.taken = nil
			sr.gradCopies++
			sr.gradB += int64(gl.Numel() * gl.DType().Size())
			if out.RequiresGrad() {
				out.BackwardWith(gl)
			}
		}
	} else if out.RequiresGrad() {
		if last {
			out.Backward()
		} else if g := r.ins[st+1][m].Grad; g != nil {
			if dev := r.Devices[st]; g.Device() != dev {
				g = g.To(dev)
				r.GradCopies++
				r.GradBytes += int64(g.Numel() * g.DType().Size())
			}
			out.BackwardWith(g)
		}
	}
	if st > 0 && sr != nil {
		// The input's gradient goes to the previous stage, which frees it
		// once copied: this stage frees the micro-batch's graph now.
		var g *tensor.Tensor
		if in := r.ins[st][m]; in != nil {
			g, in.Grad = in.Grad, nil
		}
		r.grads[st-1] <- handoff{m, g, false}
	}
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

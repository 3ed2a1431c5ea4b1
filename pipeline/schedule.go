// Package pipeline plans and runs pipeline-parallel training: the
// schedules that order each stage's forward and backward passes over
// micro-batches (naive, GPipe, 1F1B), their timelines and bubble
// fractions, the split of a model's layers into contiguous stages, and
// the Runner that runs the stages at the same time, each on its own
// goroutine.
//
// A schedule is a list of slots per stage. A slot is one stage's forward
// or backward pass of one micro-batch. The dependencies are those of a
// pipeline: a forward pass needs the previous stage's forward pass of the
// same micro-batch, a backward pass the next stage's backward pass of it
// (the last stage's backward follows its own forward). Simulate lays the
// slots on a timeline, every stage running its own slots in order as soon
// as their inputs are ready, from durations that are given (one unit per
// slot for the schedule's own bubble) or measured.
package pipeline

import (
	"fmt"
	"sort"
)

// Kind says whether a slot is a forward or a backward pass.
type Kind uint8

// The slot kinds.
const (
	Forward Kind = iota
	Backward
)

func (k Kind) String() string {
	if k == Forward {
		return "F"
	}
	return "B"
}

// Slot is one stage's forward or backward pass of one micro-batch.
type Slot struct {
	Stage, Micro int
	Kind         Kind
}

func (s Slot) String() string { return fmt.Sprintf("%v%d@%d", s.Kind, s.Micro, s.Stage) }

// Schedule lists each stage's slots in the order the stage runs them.
type Schedule struct {
	Name     string
	Stages   int
	Micros   int
	PerStage [][]Slot
}

// Names of the schedules New knows.
const (
	GPipeName = "gpipe"
	OneFOneB  = "1f1b"
)

// New returns the schedule called name (gpipe or 1f1b; "" means gpipe)
// for stages stages and micros micro-batches. GPipe with one micro-batch
// is the naive schedule: the stages work in turn.
func New(name string, stages, micros int) (Schedule, error) {
	if stages < 1 || micros < 1 {
		return Schedule{}, fmt.Errorf("pipeline: need at least one stage and one micro-batch, got %d and %d", stages, micros)
	}
	switch name {
	case "", GPipeName:
		return GPipe(stages, micros), nil
	case OneFOneB:
		return OneF1B(stages, micros), nil
	}
	return Schedule{}, fmt.Errorf("pipeline: unknown schedule %q (want %s or %s)", name, GPipeName, OneFOneB)
}

// GPipe runs every micro-batch forward through the pipeline, then every
// one backward: each stage does F0..F(M-1), then B0..B(M-1). All M
// micro-batches' activations are alive at the turn.
func GPipe(stages, micros int) Schedule {
	s := Schedule{Name: GPipeName, Stages: stages, Micros: micros, PerStage: make([][]Slot, stages)}
	for st := range stages {
		for m := range micros {
			s.PerStage[st] = append(s.PerStage[st], Slot{st, m, Forward})
		}
		for m := range micros {
			s.PerStage[st] = append(s.PerStage[st], Slot{st, m, Backward})
		}
	}
	return s
}

// OneF1B is the one-forward-one-backward schedule (PipeDream-Flush):
// stage s runs min(S-s-1, M) warm-up forward passes, then alternates one
// forward and one backward pass, then drains the remaining backward
// passes. Its bubble equals GPipe's, but stage s holds the activations of
// at most S-s micro-batches instead of M.
func OneF1B(stages, micros int) Schedule {
	s := Schedule{Name: OneFOneB, Stages: stages, Micros: micros, PerStage: make([][]Slot, stages)}
	for st := range stages {
		warm := min(stages-st-1, micros)
		var slots []Slot
		f, b := 0, 0
		for ; f < warm; f++ {
			slots = append(slots, Slot{st, f, Forward})
		}
		for f < micros {
			slots = append(slots, Slot{st, f, Forward})
			f++
			slots = append(slots, Slot{st, b, Backward})
			b++
		}
		for ; b < micros; b++ {
			slots = append(slots, Slot{st, b, Backward})
		}
		s.PerStage[st] = slots
	}
	return s
}

// Validate checks that every stage runs each micro-batch's forward pass
// once and then its backward pass once.
func (s Schedule) Validate() error {
	if len(s.PerStage) != s.Stages {
		return fmt.Errorf("pipeline: %d stage lists for %d stages", len(s.PerStage), s.Stages)
	}
	for st, slots := range s.PerStage {
		fwd := make([]bool, s.Micros)
		bwd := make([]bool, s.Micros)
		for _, sl := range slots {
			if sl.Stage != st || sl.Micro < 0 || sl.Micro >= s.Micros {
				return fmt.Errorf("pipeline: stage %d lists slot %v", st, sl)
			}
			done := fwd
			if sl.Kind == Backward {
				if !fwd[sl.Micro] {
					return fmt.Errorf("pipeline: stage %d runs %v before its forward pass", st, sl)
				}
				done = bwd
			}
			if done[sl.Micro] {
				return fmt.Errorf("pipeline: stage %d runs %v twice", st, sl)
			}
			done[sl.Micro] = true
		}
		for m := range s.Micros {
			if !fwd[m] || !bwd[m] {
				return fmt.Errorf("pipeline: stage %d misses micro-batch %d", st, m)
			}
		}
	}
	return nil
}

// MaxInFlight is the largest number of micro-batches whose forward pass
// stage st has run and whose backward pass it has not: the activations it
// holds at its peak.
func (s Schedule) MaxInFlight(st int) int {
	n, peak := 0, 0
	for _, sl := range s.PerStage[st] {
		if sl.Kind == Forward {
			n++
			peak = max(peak, n)
		} else {
			n--
		}
	}
	return peak
}

// Timeline is a schedule laid out in time: each slot's start and end (in
// the units of the durations), per stage in the stage's order.
type Timeline struct {
	Schedule   Schedule
	Start, End [][]float64
	// Makespan is when the last slot ends; Busy each stage's total slot
	// time.
	Makespan float64
	Busy     []float64
}

// Simulate lays the schedule out in time, each slot taking dur(slot),
// every stage starting its next slot as soon as the stage is free and the
// slot's input is ready. It panics if the schedule deadlocks (a slot
// waits for one its stage can only run later).
func (s Schedule) Simulate(dur func(Slot) float64) Timeline {
	tl := Timeline{Schedule: s, Start: make([][]float64, s.Stages), End: make([][]float64, s.Stages), Busy: make([]float64, s.Stages)}
	// end[kind][stage][micro], -1 until scheduled
	end := [2][][]float64{}
	for k := range end {
		end[k] = make([][]float64, s.Stages)
		for st := range s.Stages {
			end[k][st] = make([]float64, s.Micros)
			for m := range end[k][st] {
				end[k][st][m] = -1
			}
		}
	}
	next := make([]int, s.Stages)
	free := make([]float64, s.Stages)
	left := 0
	for st := range s.Stages {
		tl.Start[st] = make([]float64, len(s.PerStage[st]))
		tl.End[st] = make([]float64, len(s.PerStage[st]))
		left += len(s.PerStage[st])
	}
	for left > 0 {
		progress := false
		for st := range s.Stages {
			for next[st] < len(s.PerStage[st]) {
				sl := s.PerStage[st][next[st]]
				ready, ok := s.readyAt(sl, end)
				if !ok {
					break
				}
				t0 := max(free[st], ready)
				d := dur(sl)
				i := next[st]
				tl.Start[st][i], tl.End[st][i] = t0, t0+d
				end[sl.Kind][st][sl.Micro] = t0 + d
				free[st] = t0 + d
				tl.Busy[st] += d
				tl.Makespan = max(tl.Makespan, t0+d)
				next[st]++
				left--
				progress = true
			}
		}
		if !progress {
			panic(fmt.Sprintf("pipeline: schedule %s deadlocks", s.Name))
		}
	}
	return tl
}

// readyAt is when slot sl's input is ready, and whether it is known yet.
func (s Schedule) readyAt(sl Slot, end [2][][]float64) (float64, bool) {
	var dep float64
	switch {
	case sl.Kind == Forward && sl.Stage > 0:
		dep = end[Forward][sl.Stage-1][sl.Micro]
	case sl.Kind == Forward:
		return 0, true
	case sl.Stage < s.Stages-1:
		dep = end[Backward][sl.Stage+1][sl.Micro]
	default:
		dep = end[Forward][sl.Stage][sl.Micro]
	}
	return dep, dep >= 0
}

// Unit is the duration of every slot in the schedule's own timeline.
func Unit(Slot) float64 { return 1 }

// Bubble is the schedule's own bubble fraction: idle slots over all
// slots, when every forward and backward pass takes one unit. For GPipe
// and 1F1B it is (S-1)/(M+S-1).
func (s Schedule) Bubble() float64 { return s.Simulate(Unit).BubbleFraction() }

// BubbleFraction is the share of stage time spent idle:
// 1 - Σ busy / (stages × makespan).
func (t Timeline) BubbleFraction() float64 {
	if t.Makespan == 0 {
		return 0
	}
	var busy float64
	for _, b := range t.Busy {
		busy += b
	}
	return 1 - busy/(float64(len(t.Busy))*t.Makespan)
}

// Utilisation is each stage's busy time over the makespan.
func (t Timeline) Utilisation() []float64 {
	u := make([]float64, len(t.Busy))
	for i, b := range t.Busy {
		if t.Makespan > 0 {
			u[i] = b / t.Makespan
		}
	}
	return u
}

// Order is an order in which one goroutine can run every slot of the
// schedule, respecting the dependencies: by start time in the unit
// timeline, then by stage.
func (s Schedule) Order() []Slot {
	tl := s.Simulate(Unit)
	type timed struct {
		t  float64
		sl Slot
	}
	var all []timed
	for st, slots := range s.PerStage {
		for i, sl := range slots {
			all = append(all, timed{tl.Start[st][i], sl})
		}
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].t != all[j].t {
			return all[i].t < all[j].t
		}
		return all[i].sl.Stage < all[j].sl.Stage
	})
	out := make([]Slot, len(all))
	for i, a := range all {
		out[i] = a.sl
	}
	return out
}

package emu_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// The mutation tests run deliberately broken kernels (testdata/mutants.cu)
// and assert that the harness reports each fault: a launch error, or a
// result that fails the comparison with the reference.

func mutants(t *testing.T) *emu.Module {
	t.Helper()
	return testModule(t, "mutants.cu").WithTimeout(20 * time.Second)
}

// caughtUnder runs check under every schedule, reps times each, and returns
// for each schedule how many runs the harness caught the fault in.
func caughtUnder(t *testing.T, m *emu.Module, reps int, check func(m *emu.Module) error) map[emu.Schedule]int {
	t.Helper()
	caught := map[emu.Schedule]int{}
	for _, s := range emu.Schedules() {
		for range reps {
			if err := check(m.WithSchedule(s)); err != nil {
				caught[s]++
				if caught[s] == 1 {
					t.Logf("%v: %v", s, err)
				}
			}
		}
	}
	return caught
}

// requireCaught fails unless every run under each of the schedules in must
// caught the fault.
func requireCaught(t *testing.T, caught map[emu.Schedule]int, reps int, must ...emu.Schedule) {
	t.Helper()
	for _, s := range must {
		if caught[s] != reps {
			t.Errorf("%v schedule caught the fault in %d of %d runs, want all", s, caught[s], reps)
		}
	}
	t.Logf("caught in: parallel %d/%d, forward %d/%d, reverse %d/%d",
		caught[emu.Parallel], reps, caught[emu.Forward], reps, caught[emu.Reverse], reps)
}

func TestMutantWritePastEnd(t *testing.T) {
	m := mutants(t)
	const reps = 2
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		const n = 300
		src := emu.NewF32(emu.RandF32(rand.New(rand.NewPCG(1, 1)), n))
		dst := emu.Poison(emu.F32, n)
		err := m.Launch("fleet_mut_scale_past_end", emu.Dim(2), emu.Dim(64), 0, dst, src, float32(2), n)
		var be *emu.BoundsError
		if err != nil && !(errors.As(err, &be) && be.Param == "dst" && be.Side() == "after" && be.Elem() == n) {
			t.Errorf("wrong report: %v", err)
		}
		return err
	})
	requireCaught(t, caught, reps, emu.Parallel, emu.Forward, emu.Reverse)
}

func TestMutantReadPastEnd(t *testing.T) {
	m := mutants(t)
	const reps = 2
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		x := emu.RandF32(rand.New(rand.NewPCG(2, 2)), 1000)
		return checkSum(m, "fleet_mut_sum_read_past_end", x, 3, 128, 0)
	})
	requireCaught(t, caught, reps, emu.Parallel, emu.Forward, emu.Reverse)
}

// A missing barrier is a race: under the parallel schedule the OS decides
// whether it shows. The forward schedule runs each thread to its next
// barrier before the next thread starts, so thread 0 reads slots that
// higher threads have not written yet (poison at the start of each block),
// every time.
func TestMutantMissingSyncAfterStore(t *testing.T) {
	m := mutants(t)
	const reps = 3
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		x := emu.RandF32(rand.New(rand.NewPCG(3, 3)), 1000)
		return checkSum(m, "fleet_mut_sum_no_sync_after_store", x, 2, 256, 0)
	})
	requireCaught(t, caught, reps, emu.Forward)
}

func TestMutantMissingSyncInLoop(t *testing.T) {
	m := mutants(t)
	const reps = 3
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		x := emu.RandF32(rand.New(rand.NewPCG(4, 4)), 1000)
		return checkSum(m, "fleet_mut_sum_no_sync_in_loop", x, 2, 128, 0)
	})
	requireCaught(t, caught, reps, emu.Forward)
}

func TestMutantWrongShuffleOffset(t *testing.T) {
	m := mutants(t)
	const reps = 2
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		x := emu.RandF32(rand.New(rand.NewPCG(5, 5)), 1000)
		return checkSum(m, "fleet_mut_warp_sum_bad_offset", x, 2, 256, 4*256/32)
	})
	requireCaught(t, caught, reps, emu.Parallel, emu.Forward, emu.Reverse)
}

// Threads that return early drop out of the barrier (no deadlock, the launch
// succeeds), but the tree then reads the slots they never wrote: poison.
func TestMutantEarlyReturnBeforeBarrier(t *testing.T) {
	m := mutants(t)
	const reps = 2
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		const n, block = 300, 128
		x := emu.RandF32(rand.New(rand.NewPCG(6, 6)), n)
		err := checkSum(m, "fleet_mut_early_exit_sum", x, (n+block-1)/block, block, 0)
		if err != nil && (strings.Contains(err.Error(), "deadlock") || strings.Contains(err.Error(), "did not finish")) {
			t.Errorf("the launch hung: %v", err)
		}
		return err
	})
	requireCaught(t, caught, reps, emu.Parallel, emu.Forward, emu.Reverse)
}

// A thread that reads its lower neighbour's slot without a barrier: only
// the reverse schedule exposes it every time (forward runs the neighbour
// first), which is why cases run under both.
func TestMutantNeighbourWithoutBarrier(t *testing.T) {
	m := mutants(t)
	const reps = 3
	caught := caughtUnder(t, m, reps, func(m *emu.Module) error {
		const n = 300
		x := emu.RandF32(rand.New(rand.NewPCG(7, 7)), n)
		out := emu.Poison(emu.F32, n)
		if err := m.Launch("fleet_mut_neighbour_no_sync", emu.Dim(3), emu.Dim(128), 0, emu.NewF32(x), out, n); err != nil {
			return err
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = x[i]
			if i > 0 {
				want[i] += x[i-1]
			}
		}
		return emu.AllClose(out.F32(), want, 1e-6, 0)
	})
	requireCaught(t, caught, reps, emu.Reverse)
	if caught[emu.Forward] != 0 {
		t.Errorf("forward caught it %d times; the test kernel no longer separates the schedules", caught[emu.Forward])
	}
}

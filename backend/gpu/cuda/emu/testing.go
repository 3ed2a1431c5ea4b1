package emu

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// MustBuild builds f for a test: it skips the test, saying why, when the
// harness is unavailable here, and fails it when f does not build.
func MustBuild(tb testing.TB, f kernels.File) *Module {
	tb.Helper()
	return MustBuildSource(tb, f.Name, f.Source)
}

// MustBuildSource is MustBuild for source outside package kernels.
func MustBuildSource(tb testing.TB, name, src string) *Module {
	tb.Helper()
	m, err := BuildSource(name, src)
	if errors.Is(err, ErrUnavailable) {
		tb.Skip(err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

// RunSchedules runs f as one subtest per schedule, on m set to it.
func RunSchedules(t *testing.T, m *Module, f func(t *testing.T, m *Module)) {
	t.Helper()
	for _, s := range Schedules() {
		t.Run(s.String(), func(t *testing.T) { f(t, m.WithSchedule(s)) })
	}
}

// Case checks one kernel against its Go reference on m, which is set to the
// schedule to run under. It builds its own buffers, so it can run again.
type Case func(t *testing.T, m *Module)

// Cases maps kernel names to their cases: the registry that says every
// kernel runs under the harness.
type Cases map[string]Case

// Add registers more cases. A kernel named twice is a programming error: it
// panics.
func (c Cases) Add(more map[string]Case) {
	for name, f := range more {
		if _, dup := c[name]; dup {
			panic(fmt.Sprintf("emu: two cases for kernel %s", name))
		}
		c[name] = f
	}
}

// Missing returns, sorted, the kernels declared in files that have no case
// and the cases that name no kernel.
func (c Cases) Missing(files []kernels.File) (uncovered, unknown []string, err error) {
	declared := map[string]bool{}
	for _, f := range files {
		sigs, err := parseKernels(f.Source)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %v", f.Name, err)
		}
		for _, s := range sigs {
			declared[s.Name] = true
			if c[s.Name] == nil {
				uncovered = append(uncovered, s.Name)
			}
		}
	}
	for name := range c {
		if !declared[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(uncovered)
	sort.Strings(unknown)
	return uncovered, unknown, nil
}

// Run fails t for every kernel in files without a case (and every case
// without a kernel), then builds each file and runs each kernel's case under
// every schedule, as subtests file/kernel/schedule. Without the harness the
// builds skip; the coverage check still runs.
func (c Cases) Run(t *testing.T, files []kernels.File) {
	t.Helper()
	uncovered, unknown, err := c.Missing(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(uncovered) > 0 {
		t.Errorf("kernels without an emulation case: %v", uncovered)
	}
	if len(unknown) > 0 {
		t.Errorf("cases for kernels that no file declares: %v", unknown)
	}
	for _, f := range files {
		t.Run(f.Name, func(t *testing.T) {
			m := MustBuild(t, f)
			for _, name := range m.Kernels() {
				if c[name] == nil {
					continue
				}
				t.Run(name, func(t *testing.T) { RunSchedules(t, m, c[name]) })
			}
		})
	}
}

// AllClose returns nil when got and want have the same length and every
// element satisfies |got-want| <= atol + rtol*|want|; a NaN matches only a
// NaN, an infinity only itself. The error says how many differ and where
// the first is.
func AllClose(got, want []float32, rtol, atol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("got %d elements, want %d", len(got), len(want))
	}
	bad, first := 0, -1
	for i := range got {
		g, w := float64(got[i]), float64(want[i])
		ok := false
		switch {
		case math.IsNaN(w) || math.IsNaN(g):
			ok = math.IsNaN(w) && math.IsNaN(g)
		case math.IsInf(w, 0) || math.IsInf(g, 0):
			ok = g == w
		default:
			ok = math.Abs(g-w) <= atol+rtol*math.Abs(w)
		}
		if !ok {
			if bad == 0 {
				first = i
			}
			bad++
		}
	}
	if bad == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d elements differ; the first, [%d], is %v, want %v", bad, len(got), first, got[first], want[first])
}

// RandF32 returns n random values with magnitudes in [0.25, 2) and random
// signs: never zero, so a kernel that skips an element or adds a stray zero
// does not get away with it.
func RandF32(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		x := 0.25 + 1.75*rng.Float32()
		if rng.IntN(2) == 0 {
			x = -x
		}
		v[i] = x
	}
	return v
}

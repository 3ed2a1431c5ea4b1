package pipeline

import (
	"math"
	"math/rand"
	"testing"
)

func TestBubbleFormula(t *testing.T) {
	for _, name := range []string{GPipeName, OneFOneB} {
		for S := 1; S <= 6; S++ {
			for M := 1; M <= 10; M++ {
				s, err := New(name, S, M)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Validate(); err != nil {
					t.Fatalf("%s S=%d M=%d: %v", name, S, M, err)
				}
				want := float64(S-1) / float64(M+S-1)
				if got := s.Bubble(); math.Abs(got-want) > 1e-12 {
					t.Errorf("%s S=%d M=%d: bubble %v, want (S-1)/(M+S-1) = %v", name, S, M, got, want)
				}
				tl := s.Simulate(Unit)
				if tl.Makespan != float64(2*(M+S-1)) {
					t.Errorf("%s S=%d M=%d: makespan %v, want %d", name, S, M, tl.Makespan, 2*(M+S-1))
				}
			}
		}
	}
}

func TestInFlight(t *testing.T) {
	S, M := 4, 8
	g, f := GPipe(S, M), OneF1B(S, M)
	for st := range S {
		if n := g.MaxInFlight(st); n != M {
			t.Errorf("gpipe stage %d holds %d micro-batches, want %d", st, n, M)
		}
		if n := f.MaxInFlight(st); n != S-st {
			t.Errorf("1f1b stage %d holds %d micro-batches, want %d", st, n, S-st)
		}
	}
}

// TestOrderRespectsDependencies runs Order's slots and checks that each
// one's input was produced before it.
func TestOrderRespectsDependencies(t *testing.T) {
	for _, s := range []Schedule{GPipe(3, 5), OneF1B(4, 7), OneF1B(5, 2), GPipe(1, 3)} {
		done := map[Slot]bool{}
		order := s.Order()
		if len(order) != 2*s.Stages*s.Micros {
			t.Fatalf("%s: %d slots", s.Name, len(order))
		}
		next := make([]int, s.Stages)
		for _, sl := range order {
			if want := s.PerStage[sl.Stage][next[sl.Stage]]; want != sl {
				t.Fatalf("%s: stage %d runs %v, its list says %v", s.Name, sl.Stage, sl, want)
			}
			next[sl.Stage]++
			var dep Slot
			switch {
			case sl.Kind == Forward && sl.Stage == 0:
				done[sl] = true
				continue
			case sl.Kind == Forward:
				dep = Slot{sl.Stage - 1, sl.Micro, Forward}
			case sl.Stage == s.Stages-1:
				dep = Slot{sl.Stage, sl.Micro, Forward}
			default:
				dep = Slot{sl.Stage + 1, sl.Micro, Backward}
			}
			if !done[dep] {
				t.Fatalf("%s: %v runs before %v", s.Name, sl, dep)
			}
			done[sl] = true
		}
	}
}

// TestSimulateMeasured checks a timeline with uneven durations against
// its definition: no slot starts before its stage is free or its input is
// ready, and busy time is the sum of the durations.
func TestSimulateMeasured(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	s := OneF1B(3, 6)
	d := map[Slot]float64{}
	for _, slots := range s.PerStage {
		for _, sl := range slots {
			d[sl] = 0.5 + r.Float64()
		}
	}
	tl := s.Simulate(func(sl Slot) float64 { return d[sl] })
	end := map[Slot]float64{}
	for st, slots := range s.PerStage {
		var busy float64
		for i, sl := range slots {
			end[sl] = tl.End[st][i]
			busy += d[sl]
			if i > 0 && tl.Start[st][i] < tl.End[st][i-1] {
				t.Fatalf("%v overlaps the slot before it", sl)
			}
		}
		if math.Abs(busy-tl.Busy[st]) > 1e-9 {
			t.Fatalf("stage %d busy %v, want %v", st, tl.Busy[st], busy)
		}
	}
	for st, slots := range s.PerStage {
		for i, sl := range slots {
			var dep Slot
			switch {
			case sl.Kind == Forward && st == 0:
				continue
			case sl.Kind == Forward:
				dep = Slot{st - 1, sl.Micro, Forward}
			case st == s.Stages-1:
				dep = Slot{st, sl.Micro, Forward}
			default:
				dep = Slot{st + 1, sl.Micro, Backward}
			}
			if tl.Start[st][i] < end[dep]-1e-12 {
				t.Fatalf("%v starts at %v before %v ends at %v", sl, tl.Start[st][i], dep, end[dep])
			}
		}
	}
	b := tl.BubbleFraction()
	if b <= 0 || b >= 1 {
		t.Fatalf("bubble %v", b)
	}
}

func TestBalance(t *testing.T) {
	cases := []struct {
		layers      []float64
		S           int
		first, last float64
		want        []int
	}{
		{[]float64{1, 1, 1, 1}, 2, 0, 0, []int{2, 2}},
		{[]float64{1, 1, 1, 1, 1, 1, 1, 1}, 4, 0, 0, []int{2, 2, 2, 2}},
		{[]float64{1, 1, 1, 1, 1, 1}, 2, 2, 0, []int{2, 4}},
		{[]float64{1, 1, 1, 1, 1, 1}, 3, 0, 2, []int{3, 3, 0}},
		{[]float64{5, 1, 1, 1, 1, 1}, 2, 0, 0, []int{1, 5}},
		{[]float64{1, 1}, 4, 0, 0, []int{1, 1, 0, 0}},
	}
	for _, c := range cases {
		got := Balance(c.layers, c.S, c.first, c.last)
		sum := 0
		for _, n := range got {
			sum += n
		}
		if sum != len(c.layers) {
			t.Errorf("Balance(%v, %d) = %v places %d layers", c.layers, c.S, got, sum)
		}
		if !equal(got, c.want) {
			t.Errorf("Balance(%v, %d, %v, %v) = %v, want %v", c.layers, c.S, c.first, c.last, got, c.want)
		}
	}
}

func TestParseSplit(t *testing.T) {
	got, err := ParseSplit("3,5", 2, 8)
	if err != nil || !equal(got, []int{3, 5}) {
		t.Fatalf("ParseSplit = %v, %v", got, err)
	}
	for _, bad := range []struct {
		s    string
		S, L int
	}{{"3,5", 3, 8}, {"3,4", 2, 8}, {"a,8", 2, 8}, {"-1,9", 2, 8}} {
		if _, err := ParseSplit(bad.s, bad.S, bad.L); err == nil {
			t.Errorf("ParseSplit(%q, %d, %d) accepted", bad.s, bad.S, bad.L)
		}
	}
	if r := Ranges([]int{3, 0, 5}); r[0] != [2]int{0, 3} || r[1] != [2]int{3, 3} || r[2] != [2]int{3, 8} {
		t.Fatalf("Ranges = %v", r)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

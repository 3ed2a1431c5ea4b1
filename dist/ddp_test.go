package dist

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestReducer(t *testing.T) {
	const world = 3
	groups := job(t, world, TCPOptions{ChunkBytes: 4096}, nil)
	rng := rand.New(rand.NewPCG(5, 5))
	sizes := []int{700, 3, 5000, 1, 1200, 64, 9000, 17, 2500, 10}
	const capBytes = 8 << 10 // 2048 floats
	grads := make([][][]float32, world)
	in := make([][][]float32, world)
	for r := range world {
		for _, n := range sizes {
			g := randomFloats(rng, n)
			in[r] = append(in[r], append([]float32(nil), g...))
			grads[r] = append(grads[r], g)
		}
	}
	reducers := make([]*Reducer, world)
	for r := range world {
		reducers[r] = NewReducer(groups[r], grads[r], capBytes)
	}
	// Buckets: reverse parameter order, each closed once it reaches the cap.
	got := fmt.Sprint(reducers[0].Buckets())
	if want := "[[9 8] [7 6] [5 4 3 2] [1 0]]"; got != want {
		t.Fatalf("buckets %s, want %s", got, want)
	}
	for step := range 2 {
		launchedEarly := make([]int, world)
		must(t, each(groups, func(r int, g *TCPGroup) error {
			red := reducers[r]
			// Backward produces gradients roughly in reverse order; ranks
			// differ in the details (rank 2 swaps neighbours), and
			// parameter 3 is unused on rank 1.
			order := make([]int, 0, len(sizes))
			for i := len(sizes) - 1; i >= 0; i-- {
				order = append(order, i)
			}
			if r == 2 {
				for k := 0; k+1 < len(order); k += 2 {
					order[k], order[k+1] = order[k+1], order[k]
				}
			}
			for k, i := range order {
				if r == 1 && i == 3 {
					continue
				}
				red.GradReady(i)
				if k == len(order)-3 {
					launchedEarly[r] = red.Launched()
				}
			}
			return red.Wait()
		}))
		for r := range world {
			if launchedEarly[r] < 2 {
				t.Errorf("rank %d: only %d buckets started before the backward pass ended", r, launchedEarly[r])
			}
		}
		for p, n := range sizes {
			for j := range n {
				var want float64
				for r := range world {
					want += float64(in[r][p][j])
				}
				want /= world
				if math.Abs(float64(grads[0][p][j])-want) > 1e-5 {
					t.Fatalf("step %d param %d[%d] = %v, want %v", step, p, j, grads[0][p][j], want)
				}
			}
			for r := 1; r < world; r++ {
				if !bytes.Equal(bytesOf(grads[r][p]), bytesOf(grads[0][p])) {
					t.Fatalf("step %d param %d differs between ranks", step, p)
				}
			}
		}
		for r := range world {
			for p := range sizes {
				in[r][p] = append(in[r][p][:0], grads[r][p]...)
			}
		}
	}
}

func TestBroadcastParams(t *testing.T) {
	const world = 3
	groups := job(t, world, TCPOptions{}, nil)
	rng := rand.New(rand.NewPCG(6, 6))
	sizes := []int{100, 7, 4000, 1, 300}
	params := make([][][]float32, world)
	for r := range world {
		for _, n := range sizes {
			params[r] = append(params[r], randomFloats(rng, n))
		}
	}
	var want []float32
	for _, p := range params[0] {
		want = append(want, p...)
	}
	must(t, each(groups, func(r int, g *TCPGroup) error { return BroadcastParams(g, params[r], 4096) }))
	for r := range world {
		var got []float32
		for _, p := range params[r] {
			got = append(got, p...)
		}
		if !bytes.Equal(bytesOf(got), bytesOf(want)) {
			t.Fatalf("rank %d's parameters differ from rank 0's", r)
		}
	}
}

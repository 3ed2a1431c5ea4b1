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

// TestShardReducer: a sharded optimizer's buckets are contiguous runs of
// the flat buffer, cut where gradients are not adjacent (here the layout
// puts even parameters first, as packing puts those with weight decay),
// started in the order backward finishes them; most start before
// backward ends, and each rank ends with its shard of the average, bit
// for bit what one reduce-scatter of the whole buffer gives.
func TestShardReducer(t *testing.T) {
	sizes := []int{700, 3, 5000, 1, 1200, 64, 9000, 17, 2500, 10}
	offs := make([]int, len(sizes))
	total := 0
	for pass := range 2 {
		for i, n := range sizes {
			if i%2 == pass {
				offs[i] = total
				total += n
			}
		}
	}
	const capBytes = 8 << 10 // 2048 floats
	for _, tc := range []struct {
		world  int
		uneven bool
	}{{2, false}, {3, false}, {4, false}, {3, true}} {
		world := tc.world
		b := EvenBounds(total, world)
		if tc.uneven {
			b = Bounds{0, 3000, 3001, total} // cut inside buckets, and a shard of one
		}
		groups := job(t, world, TCPOptions{ChunkBytes: 4096}, nil)
		rng := rand.New(rand.NewPCG(9, uint64(world)))
		flat := make([][]float32, world)
		reducers := make([]*Reducer, world)
		for r := range world {
			flat[r] = randomFloats(rng, total)
			red, err := NewShardReducer(groups[r], flat[r], b, offs, sizes, capBytes)
			if err != nil {
				t.Fatal(err)
			}
			reducers[r] = red
		}
		// Even parameters (the first run of flat) cut from the end once a
		// bucket is full; the odd ones are one run, cut from the even
		// ones where the parameter order breaks; the bucket holding
		// parameter 0 goes last.
		if got, want := fmt.Sprint(reducers[0].Buckets()), "[[8] [6] [4 2] [9 7 5 3 1] [0]]"; got != want {
			t.Fatalf("buckets %s, want %s", got, want)
		}
		for step := range 2 {
			whole := make([][]float32, world)
			want := make([]float64, total)
			for r := range world {
				whole[r] = append([]float32(nil), flat[r]...)
				for i, v := range flat[r] {
					want[i] += float64(v) / float64(world)
				}
			}
			must(t, each(groups, func(r int, g *TCPGroup) error { return g.ReduceScatterAsync(whole[r], 0, b, Avg, "").Wait() }))
			launchedEarly := make([]int, world)
			must(t, each(groups, func(r int, g *TCPGroup) error {
				red := reducers[r]
				for i := len(sizes) - 1; i >= 0; i-- {
					red.GradReady(i)
					if i == 1 {
						launchedEarly[r] = red.Launched()
					}
				}
				return red.Wait()
			}))
			for r := range world {
				if launchedEarly[r] != 4 {
					t.Errorf("world %d rank %d: %d buckets started before the last gradient, want 4", world, r, launchedEarly[r])
				}
				lo, hi := b.Shard(r)
				for i := lo; i < hi; i++ {
					if math.Float32bits(flat[r][i]) != math.Float32bits(whole[r][i]) {
						t.Fatalf("world %d step %d rank %d [%d]: %v, one reduce-scatter gives %v", world, step, r, i, flat[r][i], whole[r][i])
					}
					if math.Abs(float64(flat[r][i])-want[i]) > 1e-5 {
						t.Fatalf("world %d step %d rank %d [%d]: %v, want %v", world, step, r, i, flat[r][i], want[i])
					}
				}
			}
		}
	}
	if _, err := NewShardReducer(nil, make([]float32, 10), EvenBounds(10, 2), []int{0, 5}, []int{6, 5}, 0); err == nil {
		t.Error("overlapping gradients were accepted")
	}
	if _, err := NewShardReducer(nil, make([]float32, 10), EvenBounds(10, 2), []int{8}, []int{3}, 0); err == nil {
		t.Error("a gradient past the flat buffer's end was accepted")
	}
	if _, err := NewShardReducer(nil, make([]float32, 10), EvenBounds(9, 2), []int{0}, []int{3}, 0); err == nil {
		t.Error("shards of 9 elements over a flat buffer of 10 were accepted")
	}
}

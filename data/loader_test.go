package data

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func newLoader(t testing.TB, toks Tokens, T int, seed uint64, cfg LoaderConfig) *Loader {
	t.Helper()
	s, err := NewTokenSampler(toks, T, seed, StreamTrain)
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoader(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// drawAll returns the micro-batches of steps first .. first+steps-1, in
// the order a trainer asks for them, concatenated.
func drawAll(t testing.TB, l *Loader, first, steps int) (xs, ys []int32) {
	t.Helper()
	c := l.Config()
	n := c.Batch * l.Sampler().BlockSize()
	x, y := make([]int32, n), make([]int32, n)
	for s := first; s < first+steps; s++ {
		for m := 0; m < c.Accum; m++ {
			if err := l.Fill(s, m, x, y); err != nil {
				t.Fatal(err)
			}
			xs = append(xs, x...)
			ys = append(ys, y...)
		}
	}
	return xs, ys
}

// TestLoaderMatchesSampler: the loader's micro-batches are the Sampler's
// windows, for any number of workers and any prefetch depth.
func TestLoaderMatchesSampler(t *testing.T) {
	toks := Int32s(randomIDs(10_000, 65, 1))
	const B, T, A, steps = 4, 16, 3, 12
	s, _ := NewSampler(toks, T, 42, StreamTrain)
	var want []int32
	for step := range steps {
		for m := range A {
			x, _ := batch(s, step, MicroBatchFirst(B, A, 0, m), B)
			want = append(want, x...)
		}
	}
	var first []int32
	for _, workers := range []int{1, 2, 4} {
		for _, prefetch := range []int{1, 2, 5, 16} {
			l := newLoader(t, toks, T, 42, LoaderConfig{Batch: B, Accum: A, Workers: workers, Prefetch: prefetch})
			xs, ys := drawAll(t, l, 0, steps)
			if !slices.Equal(xs, want) {
				t.Fatalf("workers %d, prefetch %d: batches differ from the sampler's", workers, prefetch)
			}
			if first == nil {
				first = ys
			} else if !slices.Equal(ys, first) {
				t.Fatalf("workers %d, prefetch %d: targets differ", workers, prefetch)
			}
		}
	}
}

// TestLoaderRanks: with world 2 each rank draws its part of the global
// batch, and the parts, rank after rank, are the world-1 batch (whose
// process accumulates over world × as many micro-batches).
func TestLoaderRanks(t *testing.T) {
	toks := Int32s(randomIDs(10_000, 65, 2))
	const B, T, A, steps = 3, 8, 2, 5
	for _, W := range []int{2, 3} {
		one := newLoader(t, toks, T, 7, LoaderConfig{Batch: B, Accum: A * W, Workers: 2})
		wantX, wantY := drawAll(t, one, 0, steps)
		ranks := make([][]int32, W)
		rankY := make([][]int32, W)
		for r := range W {
			l := newLoader(t, toks, T, 7, LoaderConfig{Batch: B, Accum: A, Rank: r, World: W, Workers: r + 1})
			ranks[r], rankY[r] = drawAll(t, l, 0, steps)
		}
		per := B * A * T // tokens per rank per step
		var gotX, gotY []int32
		for s := range steps {
			for r := range W {
				gotX = append(gotX, ranks[r][s*per:(s+1)*per]...)
				gotY = append(gotY, rankY[r][s*per:(s+1)*per]...)
			}
		}
		if !slices.Equal(gotX, wantX) || !slices.Equal(gotY, wantY) {
			t.Errorf("world %d: ranks' parts concatenated differ from the world-1 batch", W)
		}
	}
}

// TestLoaderSeek: asking for a micro-batch out of order (a resumed run, a
// replayed step) gives the same data as asking in order.
func TestLoaderSeek(t *testing.T) {
	toks := Int32s(randomIDs(5000, 65, 3))
	cfg := LoaderConfig{Batch: 2, Accum: 2, Workers: 2, Prefetch: 3}
	all, _ := drawAll(t, newLoader(t, toks, 8, 1, cfg), 0, 10)
	per := 2 * 8
	l := newLoader(t, toks, 8, 1, cfg)
	x, y := make([]int32, per), make([]int32, per)
	for _, k := range []int{7, 8, 3, 0, 19, 19, 4, 5, 6} {
		if err := l.Fill(k/2, k%2, x, y); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(x, all[k*per:(k+1)*per]) {
			t.Fatalf("micro-batch %d out of order differs", k)
		}
	}
	// Starting at a later step is the same as reaching it.
	cfg.Start = 6
	late, _ := drawAll(t, newLoader(t, toks, 8, 1, cfg), 6, 4)
	if !slices.Equal(late, all[6*2*per:]) {
		t.Error("a loader started at step 6 differs from one that ran there")
	}
}

func TestLoaderErrors(t *testing.T) {
	toks := Int32s(randomIDs(1000, 65, 4))
	s, _ := NewTokenSampler(toks, 8, 0, StreamTrain)
	for _, cfg := range []LoaderConfig{
		{Batch: 0, Accum: 1},
		{Batch: 1, Accum: 0},
		{Batch: 1, Accum: 1, Rank: 2, World: 2},
		{Batch: 1, Accum: 1, Workers: -1},
		{Batch: 1, Accum: 1, Start: -1},
	} {
		if l, err := NewLoader(s, cfg); err == nil {
			l.Close()
			t.Errorf("NewLoader(%+v) succeeded", cfg)
		}
	}
	l := newLoader(t, toks, 8, 0, LoaderConfig{Batch: 2, Accum: 1, Vocab: 65})
	x, y := make([]int32, 16), make([]int32, 16)
	if err := l.Fill(0, 1, x, y); err == nil {
		t.Error("micro-batch 1 of 1 accepted")
	}
	if err := l.Fill(0, 0, x[:3], y); err == nil {
		t.Error("short x accepted")
	}
	// Ids outside the vocabulary are reported.
	bad := slices.Clone(toks)
	for i := range bad {
		bad[i] = 64 + int32(i%2)
	}
	lb := newLoader(t, bad, 8, 0, LoaderConfig{Batch: 2, Accum: 1, Vocab: 65, Name: "train split of test"})
	if err := lb.Fill(0, 0, x, y); err == nil || !strings.Contains(err.Error(), "token id 65") ||
		!strings.Contains(err.Error(), "train split of test") {
		t.Errorf("bad id: err = %v", err)
	}
	l.Close()
	l.Close()
	if err := l.Fill(0, 0, x, y); err == nil {
		t.Error("Fill after Close succeeded")
	}
}

// TestLoaderAllocations: steady-state Fill makes no heap allocations (nor
// do the workers); the buffers are recycled. The tokens are shards.
func TestLoaderAllocations(t *testing.T) {
	ids := randomIDs(10_000, 65, 5)
	var parts []Tokens
	for lo := 0; lo < len(ids); lo += 1000 {
		u := make(Uint16s, 1000)
		for i := range u {
			u[i] = uint16(ids[lo+i])
		}
		parts = append(parts, u)
	}
	l := newLoader(t, NewConcat(parts...), 64, 0, LoaderConfig{Batch: 12, Accum: 2, Workers: 2, Vocab: 65})
	x, y := make([]int32, 12*64), make([]int32, 12*64)
	k := 0
	next := func() {
		if err := l.Fill(k/2, k%2, x, y); err != nil {
			t.Fatal(err)
		}
		k++
	}
	for range 10 {
		next()
	}
	if a := testing.AllocsPerRun(100, next); a != 0 {
		t.Errorf("Fill made %.1f heap allocations per call, want 0", a)
	}
}

// BenchmarkLoader measures the tokens/s a loader hands out (x only, as a
// trainer counts them) from memory-mapped shards, for the CPU reference
// configuration (12×64) and a GPT-2 sized one (16×1024). The trainer
// consumes about 2e4 tokens/s on the CPU reference config.
func BenchmarkLoader(b *testing.B) {
	dir := b.TempDir()
	ids := randomIDs(4_000_000, 50257, 6)
	var parts []Tokens
	for i := range 4 {
		p := fmt.Sprintf("%s/train_%06d.bin", dir, i)
		if _, err := WriteShard(p, 50257, ids[i*1_000_000:(i+1)*1_000_000]); err != nil {
			b.Fatal(err)
		}
		s, err := OpenShard(p)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		parts = append(parts, s.Tokens)
	}
	toks := NewConcat(parts...)
	for _, shape := range []struct{ B, T int }{{12, 64}, {16, 1024}} {
		for _, workers := range []int{1, DefaultWorkers()} {
			b.Run(fmt.Sprintf("B=%d,T=%d,workers=%d", shape.B, shape.T, workers), func(b *testing.B) {
				l := newLoader(b, toks, shape.T, 0, LoaderConfig{Batch: shape.B, Accum: 1, Workers: workers, Vocab: 50257})
				x, y := make([]int32, shape.B*shape.T), make([]int32, shape.B*shape.T)
				b.ResetTimer()
				for i := range b.N {
					if err := l.Fill(i, 0, x, y); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*shape.B*shape.T)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

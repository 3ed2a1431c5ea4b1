package data

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct{ n, train, val int }{
		{10, 9, 1}, {1000, 900, 100}, {0, 0, 0}, {1, 0, 1},
	} {
		ids := make([]int32, tc.n)
		for i := range ids {
			ids[i] = int32(i)
		}
		train, val := Split(ids)
		if len(train) != tc.train || len(val) != tc.val {
			t.Errorf("Split(N=%d) = %d/%d, want %d/%d", tc.n, len(train), len(val), tc.train, tc.val)
		}
		if !slices.Equal(slices.Concat(train, val), ids) {
			t.Errorf("Split(N=%d) does not partition in order", tc.n)
		}
	}
}

func testTokens(n int) []int32 {
	toks := make([]int32, n)
	for i := range toks {
		toks[i] = int32(i)
	}
	return toks
}

func batch(s *Sampler, step, first, count int) (x, y []int32) {
	x = make([]int32, count*s.BlockSize())
	y = make([]int32, count*s.BlockSize())
	s.Batch(step, first, count, x, y)
	return x, y
}

func TestNewSamplerErrors(t *testing.T) {
	if _, err := NewSampler(testTokens(8), 8, 1, StreamTrain); err == nil ||
		!strings.Contains(err.Error(), "data has 8 tokens, fewer than block size 8 + 1") {
		t.Errorf("short data: err = %v", err)
	}
	if _, err := NewSampler(testTokens(8), 0, 1, StreamTrain); err == nil {
		t.Error("block size 0 accepted")
	}
	// Exactly one window fits.
	s, err := NewSampler(testTokens(9), 8, 1, StreamTrain)
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch(s, 3, 0, 4)
	for i := 0; i < 4; i++ {
		if !slices.Equal(x[i*8:(i+1)*8], testTokens(8)) || y[i*8] != 1 || y[i*8+7] != 8 {
			t.Fatalf("single-window data: x = %v, y = %v", x, y)
		}
	}
}

func TestSamplerWindows(t *testing.T) {
	const N, T, B = 1000, 16, 32
	toks := testTokens(N)
	s, err := NewSampler(toks, T, 1337, StreamTrain)
	if err != nil {
		t.Fatal(err)
	}
	x, y := batch(s, 5, 0, B)
	for i := 0; i < B; i++ {
		o := int(x[i*T])
		if o < 0 || o+T+1 > N {
			t.Fatalf("window %d at %d out of range", i, o)
		}
		if o != s.Offset(5, i) {
			t.Errorf("window %d at %d, Offset says %d", i, o, s.Offset(5, i))
		}
		for k := 0; k < T; k++ {
			if x[i*T+k] != toks[o+k] || y[i*T+k] != toks[o+k+1] {
				t.Fatalf("window %d: x/y not tokens[o:o+T]/tokens[o+1:o+T+1]", i)
			}
		}
	}

	// Deterministic, also across Sampler values.
	s2, _ := NewSampler(toks, T, 1337, StreamTrain)
	x2, y2 := batch(s2, 5, 0, B)
	if !slices.Equal(x, x2) || !slices.Equal(y, y2) {
		t.Error("same seed, step and stream gave different batches")
	}

	// Split into micro-batches: same windows.
	var xs, ys []int32
	for _, first := range []int{0, 8, 16, 24} {
		xm, ym := batch(s, 5, first, 8)
		xs = append(xs, xm...)
		ys = append(ys, ym...)
	}
	if !slices.Equal(x, xs) || !slices.Equal(y, ys) {
		t.Error("4 micro-batches of 8 differ from one batch of 32")
	}

	// Different steps, streams and seeds differ.
	if x3, _ := batch(s, 6, 0, B); slices.Equal(x, x3) {
		t.Error("steps 5 and 6 drew the same batch")
	}
	sv, _ := NewSampler(toks, T, 1337, StreamEvalVal)
	if x4, _ := batch(sv, 5, 0, B); slices.Equal(x, x4) {
		t.Error("streams train and val drew the same batch")
	}
	se, _ := NewSampler(toks, T, 1337, StreamEvalTrain)
	if x5, _ := batch(se, 5, 0, B); slices.Equal(x, x5) {
		t.Error("streams train and eval-train drew the same batch")
	}
	sd, _ := NewSampler(toks, T, 1338, StreamTrain)
	if x6, _ := batch(sd, 5, 0, B); slices.Equal(x, x6) {
		t.Error("seeds 1337 and 1338 drew the same batch")
	}
}

func TestSamplerCoverage(t *testing.T) {
	// Offsets should reach both ends of the valid range [0, N-T-1].
	const N, T = 40, 8
	s, _ := NewSampler(testTokens(N), T, 7, StreamTrain)
	seen := make(map[int]bool)
	for step := 0; step < 200; step++ {
		for j := 0; j < 8; j++ {
			seen[s.Offset(step, j)] = true
		}
	}
	if len(seen) != N-T {
		t.Errorf("saw %d distinct offsets, want %d", len(seen), N-T)
	}
}

func TestSamplerBatchPanics(t *testing.T) {
	s, _ := NewSampler(testTokens(100), 4, 1, StreamTrain)
	defer func() {
		if recover() == nil {
			t.Error("Batch with short x did not panic")
		}
	}()
	s.Batch(0, 0, 2, make([]int32, 4), make([]int32, 8))
}

func TestMicroBatchFirst(t *testing.T) {
	// B=4, A=3, W=2: rank 0 takes windows 0..11, rank 1 takes 12..23.
	const B, A, W = 4, 3, 2
	next := 0
	for r := 0; r < W; r++ {
		for m := 0; m < A; m++ {
			if got := MicroBatchFirst(B, A, r, m); got != next {
				t.Errorf("MicroBatchFirst(%d, %d, %d, %d) = %d, want %d", B, A, r, m, got, next)
			}
			next += B
		}
	}
	if got := MicroBatchFirst(12, 5, 3, 2); got != (3*5+2)*12 {
		t.Errorf("MicroBatchFirst(12, 5, 3, 2) = %d", got)
	}
}

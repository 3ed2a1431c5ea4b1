package data

import (
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/internal/rng"
)

// bruteKN is the estimator NGram documents, computed from its definition
// by scanning the tokens for every count it needs.
type bruteKN struct {
	toks []int32
	N, V int
}

func (b bruteKN) occurrences(g []int32) int {
	n := 0
	for i := 0; i+len(g) <= len(b.toks); i++ {
		match := true
		for j := range g {
			if b.toks[i+j] != g[j] {
				match = false
				break
			}
		}
		if match {
			n++
		}
	}
	return n
}

// c is c_k(g), len(g) = k: raw at the highest order, else the number of
// distinct tokens seen before g.
func (b bruteKN) c(g []int32) int {
	if len(g) == b.N {
		return b.occurrences(g)
	}
	n := 0
	for v := range b.V {
		if b.occurrences(append([]int32{int32(v)}, g...)) > 0 {
			n++
		}
	}
	return n
}

func (b bruteKN) discount(k int) float64 {
	var n1, n2 int
	g := make([]int32, k)
	var rec func(i int)
	rec = func(i int) {
		if i == k {
			switch b.c(g) {
			case 1:
				n1++
			case 2:
				n2++
			}
			return
		}
		for v := range b.V {
			g[i] = int32(v)
			rec(i + 1)
		}
	}
	rec(0)
	if n1 == 0 {
		return 0.5
	}
	return float64(n1) / float64(n1+2*n2)
}

// p is P_k(w | h) with len(h) = k-1.
func (b bruteKN) p(h []int32, w int32) float64 {
	k := len(h) + 1
	if k == 0 {
		return 1 / float64(b.V)
	}
	var lower float64
	if len(h) == 0 {
		lower = 1 / float64(b.V)
	} else {
		lower = b.p(h[1:], w)
	}
	total, types := 0, 0
	for v := range b.V {
		c := b.c(append(append([]int32{}, h...), int32(v)))
		total += c
		if c > 0 {
			types++
		}
	}
	if total == 0 {
		return lower
	}
	d := b.discount(k)
	c := float64(b.c(append(append([]int32{}, h...), w)))
	return (math.Max(c-d, 0) + d*float64(types)*lower) / float64(total)
}

// structured returns tokens with some regularity, so that contexts predict.
func structured(n, V int, seed uint64) []int32 {
	g := rng.New(seed)
	toks := make([]int32, n)
	for i := range toks {
		switch {
		case i >= 2 && g.Intn(3) > 0:
			toks[i] = (toks[i-1] + toks[i-2]) % int32(V)
		default:
			toks[i] = int32(g.Intn(V))
		}
	}
	return toks
}

func TestNGramMatchesBruteForce(t *testing.T) {
	const V = 5
	toks := structured(300, V, 1)
	for _, N := range []int{1, 2, 3, 4} {
		m, err := TrainNGram(Int32s(toks), N, V)
		if err != nil {
			t.Fatal(err)
		}
		b := bruteKN{toks, N, V}
		for k := 1; k <= N; k++ {
			if got, want := m.Discount(k), b.discount(k); math.Abs(got-want) > 1e-15 {
				t.Errorf("N=%d: D_%d = %v, brute force %v", N, k, got, want)
			}
		}
		g := rng.New(uint64(N))
		for q := range 60 {
			// Contexts from the data, random ones (often unseen), and
			// shorter ones (the start of a stream).
			var ctx []int32
			switch q % 3 {
			case 0:
				o := g.Intn(len(toks) - N)
				ctx = toks[o : o+N-1]
			case 1:
				for range N - 1 {
					ctx = append(ctx, int32(g.Intn(V)))
				}
			case 2:
				o := g.Intn(len(toks) - N)
				ctx = toks[o : o+g.Intn(N)]
			}
			w := int32(g.Intn(V))
			k := min(N, len(ctx)+1)
			want := b.p(ctx[len(ctx)-(k-1):], w)
			if got := m.Prob(ctx, w); math.Abs(got-want) > 1e-12 {
				t.Errorf("N=%d: P(%d | %v) = %v, brute force %v", N, w, ctx, got, want)
			}
		}
	}
}

func TestNGramSumsToOne(t *testing.T) {
	const V = 7
	toks := structured(5000, V, 2)
	m, err := TrainNGram(Int32s(toks), 4, V)
	if err != nil {
		t.Fatal(err)
	}
	for _, ctx := range [][]int32{nil, {3}, {1, 2}, toks[10:13], toks[100:103], {6, 6, 6}, {0, 1, 2, 3, 4, 5}} {
		var sum float64
		for w := range V {
			p := m.Prob(ctx, int32(w))
			if p <= 0 || p > 1 {
				t.Errorf("P(%d | %v) = %v", w, ctx, p)
			}
			sum += p
		}
		if math.Abs(sum-1) > 1e-12 {
			t.Errorf("probabilities after %v sum to %v", ctx, sum)
		}
	}
}

func TestNGramPerplexity(t *testing.T) {
	text := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 200)
	c := NewChar(text)
	ids, _ := c.Encode(text)
	train, val := Split(ids)
	// A repeated sentence is predictable from 3 characters on: orders 2
	// and 3 must improve on their predecessor, and every order on 1.
	var ces [6]float64
	for N := 1; N <= 5; N++ {
		m, err := TrainNGram(Int32s(train), N, c.Size())
		if err != nil {
			t.Fatal(err)
		}
		ce, err := m.CrossEntropy(Int32s(val))
		if err != nil {
			t.Fatal(err)
		}
		ces[N] = ce
	}
	if !(ces[2] < ces[1] && ces[3] < ces[2] && ces[4] < ces[1] && ces[5] < ces[1]) {
		t.Errorf("cross-entropy by order 1..5: %.4f", ces[1:])
	}
	if math.Exp(ces[5]) > 1.5 {
		t.Errorf("order 5 perplexity %.3f on a repeated sentence", math.Exp(ces[5]))
	}
	// Errors: order 0, keys too wide, ids outside the vocabulary.
	if _, err := TrainNGram(Int32s(train), 0, 10); err == nil {
		t.Error("order 0 accepted")
	}
	if _, err := TrainNGram(Int32s(train), 5, 50257); err == nil || !strings.Contains(err.Error(), "the most is order 4") {
		t.Errorf("order 5 of GPT-2's vocabulary: %v", err)
	}
	if _, err := TrainNGram(Int32s{1, 2, 9}, 2, 5); err == nil || !strings.Contains(err.Error(), "token id 9") {
		t.Errorf("id outside the vocabulary: %v", err)
	}
	m, _ := TrainNGram(Int32s{1, 2, 3}, 2, 5)
	if _, err := m.CrossEntropy(Int32s{1, 7}); err == nil {
		t.Error("CrossEntropy of an id outside the vocabulary succeeded")
	}
}

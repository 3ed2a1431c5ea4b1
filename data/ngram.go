package data

import (
	"fmt"
	"math"
	"math/bits"
)

// NGram is an interpolated Kneser-Ney n-gram language model (Chen and
// Goodman's interpolated KN with one discount per order), the baseline
// that shows what a Transformer buys. For a context h of the last k-1
// tokens and a token w,
//
//	P_k(w | h) = (max(c_k(h w) - D_k, 0) + D_k · N_k(h •) · P_{k-1}(w | h')) / Σ_v c_k(h v)
//
// where h' is h without its first token, N_k(h •) is the number of
// distinct v with c_k(h v) > 0, and P_0 is uniform over the vocabulary.
// At the highest order c_N is the raw count of the n-gram in the training
// tokens; at lower orders c_k(g) is its continuation count, the number of
// distinct tokens v for which v g occurs. A context never seen at order k
// (Σ_v c_k(h v) = 0) leaves P_k = P_{k-1}. D_k = n1/(n1 + 2·n2), from the
// numbers of k-grams with c_k 1 and 2 (0.5 when there are none with 1), so
// each P_k sums to 1 over the vocabulary.
type NGram struct {
	order, vocab int
	bits         uint                     // bits per token in a key
	count        []map[uint64]uint32      // count[k]: c_k of k-grams
	context      []map[uint64]contextStat // context[k]: totals of the (k-1)-gram contexts
	discount     []float64                // discount[k]: D_k
}

type contextStat struct {
	total uint32 // Σ_v c_k(h v)
	types uint32 // N_k(h •)
}

// TrainNGram counts the n-grams of tokens, all of whose ids must be below
// vocab. Each key packs order ids into 64 bits, so order times the bits of
// the largest id must be at most 64 (order 4 for GPT-2's 50257 tokens).
func TrainNGram(tokens Tokens, order, vocab int) (*NGram, error) {
	if order < 1 {
		return nil, fmt.Errorf("n-gram order %d must be at least 1", order)
	}
	if vocab < 1 {
		return nil, fmt.Errorf("n-gram vocabulary %d must be positive", vocab)
	}
	b := uint(max(bits.Len(uint(vocab-1)), 1))
	if uint(order)*b > 64 {
		return nil, fmt.Errorf("an order-%d model of a %d-token vocabulary needs %d-bit keys; the most is order %d",
			order, vocab, uint(order)*b, 64/b)
	}
	m := &NGram{order: order, vocab: vocab, bits: b,
		count: make([]map[uint64]uint32, order+1), context: make([]map[uint64]contextStat, order+1),
		discount: make([]float64, order+1)}
	// Raw counts of every order 1..N in one pass over the tokens.
	raw := make([]map[uint64]uint32, order+1)
	for k := 1; k <= order; k++ {
		raw[k] = map[uint64]uint32{}
	}
	mask := lowMask(b, order)
	var key uint64 // the last min(i+1, order) ids, packed
	buf := make([]int32, 1<<16)
	n := tokens.Len()
	for off := 0; off < n; off += len(buf) {
		chunk := buf[:min(len(buf), n-off)]
		tokens.Read(chunk, off)
		for j, id := range chunk {
			if id < 0 || int(id) >= vocab {
				return nil, fmt.Errorf("n-gram: token id %d at position %d is not below the vocabulary size %d", id, off+j, vocab)
			}
			key = (key<<b | uint64(id)) & mask
			i := off + j
			for k := 1; k <= min(order, i+1); k++ {
				raw[k][key&lowMask(b, k)]++
			}
		}
	}
	// The highest order keeps its raw counts; lower orders take the
	// continuation counts of the distinct n-grams one longer.
	m.count[order] = raw[order]
	for k := order - 1; k >= 1; k-- {
		cont := make(map[uint64]uint32, len(raw[k]))
		for g := range raw[k+1] {
			cont[g&lowMask(b, k)]++ // drop the first (oldest) id
		}
		m.count[k] = cont
		raw[k+1] = nil
	}
	for k := 1; k <= order; k++ {
		ctx := make(map[uint64]contextStat)
		var n1, n2 int
		for g, c := range m.count[k] {
			h := g >> b
			s := ctx[h]
			s.total += c
			s.types++
			ctx[h] = s
			switch c {
			case 1:
				n1++
			case 2:
				n2++
			}
		}
		m.context[k] = ctx
		m.discount[k] = 0.5
		if n1 > 0 {
			m.discount[k] = float64(n1) / float64(n1+2*n2)
		}
	}
	return m, nil
}

// lowMask keeps the last k ids of a key.
func lowMask(b uint, k int) uint64 {
	if b*uint(k) >= 64 {
		return ^uint64(0)
	}
	return uint64(1)<<(b*uint(k)) - 1
}

// Order returns the model's order.
func (m *NGram) Order() int { return m.order }

// Discount returns D_k.
func (m *NGram) Discount(k int) float64 { return m.discount[k] }

// NumNGrams returns the number of distinct k-grams with a nonzero c_k.
func (m *NGram) NumNGrams(k int) int { return len(m.count[k]) }

// Prob returns P(w | context) using the last order-1 ids of context (fewer
// if it is shorter).
func (m *NGram) Prob(context []int32, w int32) float64 {
	if len(context) > m.order-1 {
		context = context[len(context)-(m.order-1):]
	}
	p := 1 / float64(m.vocab)
	var h uint64 // the last k-1 ids of context, packed
	for k := 1; k <= len(context)+1; k++ {
		if k > 1 {
			h |= uint64(context[len(context)-(k-1)]) << (m.bits * uint(k-2))
		}
		s, ok := m.context[k][h]
		if !ok {
			continue
		}
		c := float64(m.count[k][h<<m.bits|uint64(w)])
		d := m.discount[k]
		p = (max(c-d, 0) + d*float64(s.types)*p) / float64(s.total)
	}
	return p
}

// CrossEntropy returns the mean negative log-probability (nats per token)
// of every token of tokens given the tokens before it in tokens (up to
// order-1 of them); its exponential is the perplexity.
func (m *NGram) CrossEntropy(tokens Tokens) (float64, error) {
	n := tokens.Len()
	if n == 0 {
		return 0, fmt.Errorf("n-gram: no tokens to evaluate")
	}
	ctx := make([]int32, 0, 2*m.order)
	buf := make([]int32, 1<<16)
	var sum float64
	for off := 0; off < n; off += len(buf) {
		chunk := buf[:min(len(buf), n-off)]
		tokens.Read(chunk, off)
		for j, w := range chunk {
			if w < 0 || int(w) >= m.vocab {
				return 0, fmt.Errorf("n-gram: token id %d at position %d is not below the vocabulary size %d", w, off+j, m.vocab)
			}
			sum -= math.Log(m.Prob(ctx, w))
			if len(ctx) == cap(ctx) {
				ctx = append(ctx[:0], ctx[len(ctx)-(m.order-1):]...)
			}
			ctx = append(ctx, w)
		}
	}
	return sum / float64(n), nil
}

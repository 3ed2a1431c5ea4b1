package tokenizer

import (
	"fmt"
	"sync"
	"unicode/utf8"
)

// hfBPE is the BPE model of a tokenizer.json: a vocabulary of token
// strings and merges in rank order, applied within each pre-token as the
// reference implementations do (the adjacent pair of lowest rank first,
// the leftmost of equal ones). Unlike BPE it has 32-bit ids, so that
// vocabularies of Llama 3 and Qwen2's size (128,256 and 151,665 ids) open.
//
// A word starts as its units: its bytes for a byte-level model (whose
// vocabulary is kept as the bytes that GPT-2's printable alphabet stands
// for), its characters otherwise. A character that is not in the
// vocabulary becomes its bytes' <0xNN> tokens when byte_fallback is on,
// else the unknown token (one for a run of them with fuse_unk).
type hfBPE struct {
	byteLevel    bool
	vocab        map[string]int32  // unit bytes -> id
	pairs        map[uint64]uint64 // a<<32|b -> rank<<32|id
	byteUnit     [256]int32        // byte-level: the id of each byte
	byteFallback bool
	fallback     [256]int32 // the <0xNN> ids; -1: missing
	unk          int32      // -1: none
	fuseUnk      bool
	ignoreMerges bool
	// junction holds the pairs of adjacent characters found inside some
	// token (character-level models only): no merge can join two symbols
	// across any other pair, so a long word is cut there and its parts
	// merged apart, with the same result. Nil: do not cut.
	junction map[uint64]struct{}
	caches   sync.Pool // *hfCache
}

type hfCache struct {
	m    map[string][]int32
	syms []int32
	rank []uint32
}

func (m *hfBPE) init() {
	m.caches.New = func() any { return &hfCache{m: make(map[string][]int32)} }
}

func (m *hfBPE) rankOf(a, b int32) (uint32, int32) {
	v, ok := m.pairs[uint64(uint32(a))<<32|uint64(uint32(b))]
	if !ok {
		return noRank, -1
	}
	return uint32(v >> 32), int32(uint32(v))
}

// unitKey is a character's key in junction: its code point, or 0x110000
// plus the byte for a byte that is not valid UTF-8.
func unitKey(s []byte) (key uint32, w int) {
	r, w := utf8.DecodeRune(s)
	if r == utf8.RuneError && w <= 1 {
		return 0x110000 + uint32(s[0]), 1
	}
	return uint32(r), w
}

// buildJunctions fills junction from the vocabulary's tokens.
func (m *hfBPE) buildJunctions() {
	m.junction = make(map[uint64]struct{})
	for tok := range m.vocab {
		b := []byte(tok)
		prev, w := unitKey(b)
		for i := w; i < len(b); i += w {
			var k uint32
			k, w = unitKey(b[i:])
			m.junction[uint64(prev)<<32|uint64(k)] = struct{}{}
			prev = k
		}
	}
}

// encode appends the ids of word w.
func (m *hfBPE) encode(out []int32, w []byte) ([]int32, error) {
	if len(w) == 0 {
		return out, nil
	}
	c := m.caches.Get().(*hfCache)
	defer m.caches.Put(c)
	if m.junction == nil || len(w) <= maxCachedWord {
		return m.encodeWord(c, out, w)
	}
	// Cut at pairs of characters that no token holds.
	start := 0
	prev, pw := unitKey(w)
	for i := pw; i < len(w); {
		k, kw := unitKey(w[i:])
		if _, ok := m.junction[uint64(prev)<<32|uint64(k)]; !ok {
			var err error
			if out, err = m.encodeWord(c, out, w[start:i]); err != nil {
				return out, err
			}
			start = i
		}
		prev = k
		i += kw
	}
	return m.encodeWord(c, out, w[start:])
}

func (m *hfBPE) encodeWord(c *hfCache, out []int32, w []byte) ([]int32, error) {
	if m.ignoreMerges {
		if id, ok := m.vocab[string(w)]; ok {
			return append(out, id), nil
		}
	}
	if len(w) <= maxCachedWord {
		if ids, ok := c.m[string(w)]; ok {
			return append(out, ids...), nil
		}
	}
	syms := c.syms[:0]
	if m.byteLevel {
		for _, b := range w {
			syms = append(syms, m.byteUnit[b])
		}
	} else {
		lastUnk := false
		for i := 0; i < len(w); {
			_, n := unitKey(w[i:])
			u := w[i : i+n]
			i += n
			if id, ok := m.vocab[string(u)]; ok {
				syms, lastUnk = append(syms, id), false
				continue
			}
			if m.byteFallback {
				ok := true
				for _, b := range u {
					ok = ok && m.fallback[b] >= 0
				}
				if ok {
					for _, b := range u {
						syms = append(syms, m.fallback[b])
					}
					lastUnk = false
					continue
				}
			}
			if m.unk < 0 {
				c.syms = syms
				return out, fmt.Errorf("%q has no token (the vocabulary has no unk_token and no byte_fallback tokens for it)", u)
			}
			if !(m.fuseUnk && lastUnk) {
				syms = append(syms, m.unk)
			}
			lastUnk = true
		}
	}
	start := len(out)
	if len(syms) > heapMergeAbove {
		out = m.mergeHeap(out, syms)
	} else {
		syms = m.mergeSmall(c, syms)
		out = append(out, syms...)
	}
	c.syms = syms
	if len(w) <= maxCachedWord {
		if len(c.m) >= maxCacheWords {
			clear(c.m)
		}
		c.m[string(w)] = append([]int32(nil), out[start:]...)
	}
	return out, nil
}

// mergeSmall merges syms in place by scanning for the lowest-ranked pair.
func (m *hfBPE) mergeSmall(c *hfCache, syms []int32) []int32 {
	ranks := c.rank[:0]
	for i := 0; i+1 < len(syms); i++ {
		r, _ := m.rankOf(syms[i], syms[i+1])
		ranks = append(ranks, r)
	}
	for len(syms) > 1 {
		best, bi := uint32(noRank), -1
		for i, r := range ranks {
			if r < best {
				best, bi = r, i
			}
		}
		if bi < 0 {
			break
		}
		_, id := m.rankOf(syms[bi], syms[bi+1])
		syms[bi] = id
		syms = append(syms[:bi+1], syms[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		if bi > 0 {
			ranks[bi-1], _ = m.rankOf(syms[bi-1], id)
		}
		if bi < len(ranks) {
			ranks[bi], _ = m.rankOf(id, syms[bi+1])
		}
	}
	c.rank = ranks
	return syms
}

// mergeHeap merges syms as mergeSmall does, in O(n log n).
func (m *hfBPE) mergeHeap(out []int32, in []int32) []int32 {
	n := len(in)
	syms := append([]int32(nil), in...)
	next := make([]int32, n)
	prev := make([]int32, n)
	rank := make([]uint32, n)
	for i := range syms {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := make(pairHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		rank[i], _ = m.rankOf(syms[i], syms[i+1])
		if rank[i] != noRank {
			h = append(h, uint64(rank[i])<<32|uint64(i))
		}
	}
	rank[n-1] = noRank
	h.init()
	for len(h) > 0 {
		it := h.pop()
		i := int32(uint32(it))
		if rank[i] != uint32(it>>32) || syms[i] < 0 {
			continue // stale
		}
		j := next[i]
		_, id := m.rankOf(syms[i], syms[j])
		syms[i] = id
		syms[j] = -1
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		rank[i] = noRank
		if k := next[i]; k >= 0 {
			if rank[i], _ = m.rankOf(id, syms[k]); rank[i] != noRank {
				h.push(uint64(rank[i])<<32 | uint64(i))
			}
		}
		if p := prev[i]; p >= 0 {
			if rank[p], _ = m.rankOf(syms[p], id); rank[p] != noRank {
				h.push(uint64(rank[p])<<32 | uint64(p))
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

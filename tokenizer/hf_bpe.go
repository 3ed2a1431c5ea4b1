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
	vocab        map[string]int32 // unit bytes -> id
	pairs        pairRanks
	byteUnit     [256]int32 // byte-level: the id of each byte
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
		out = mergeHeap(m.pairs, out, syms) // syms is scratch: the heap may overwrite it
	} else {
		syms, c.rank = mergeSmall(m.pairs, syms, c.rank)
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

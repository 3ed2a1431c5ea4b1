package tokenizer

import (
	"fmt"
	"math"
	"sync"
	"unicode/utf8"
)

// EndOfText is the text of the end-of-text token that separates documents.
const EndOfText = "<|endoftext|>"

// MaxVocab is the largest vocabulary this package builds or opens: token
// shards store ids as uint16.
const MaxVocab = 65535

// BPE is a byte-level BPE tokenizer with GPT-2's pre-tokenizer: either one
// that TrainBPE made (or that a bpe: file holds), or GPT-2's own (gpt2:).
// Text is split into pre-tokens, each pre-token starts as its bytes, and
// the pair of adjacent tokens with the lowest merge rank is merged (the
// leftmost, if it occurs more than once) until no pair has a merge. This
// is what GPT-2's encoder does, so with GPT-2's merges it gives GPT-2's
// ids. A BPE is a data.Tokenizer, and is safe for concurrent use.
type BPE struct {
	kind   string   // "bpe" or "gpt2"
	spec   string   // how to open it again; "" until saved, for a trained one
	tokens [][]byte // the bytes of each id; the end-of-text token's is EndOfText
	byteID [256]int32
	merges []Merge // in rank order
	pairs  pairRanks
	eot    int32     // -1: none
	caches sync.Pool // *wordCache
}

// Merge is one BPE merge: tokens A and B, adjacent, become token ID.
type Merge struct{ A, B, ID int32 }

const noRank = math.MaxUint32

// newBPE builds a BPE from the bytes of each token, the ids of the 256
// single bytes, and the merges in rank order. It checks what every source
// of merges needs: ids in range, merges that only use tokens that exist
// by then, no pair merged twice and merged bytes that match.
func newBPE(kind string, tokens [][]byte, byteID [256]int32, merges []Merge, eot int32) (*BPE, error) {
	n := len(tokens)
	if n > MaxVocab {
		return nil, fmt.Errorf("vocabulary of %d tokens is larger than %d (token ids are stored as uint16)", n, MaxVocab)
	}
	if len(merges) > math.MaxUint16+1 {
		return nil, fmt.Errorf("%d merges is too many", len(merges))
	}
	made := make([]bool, n) // made[id]: the token exists at this point of the merges
	for b, id := range byteID {
		if id < 0 || int(id) >= n || len(tokens[id]) != 1 || tokens[id][0] != byte(b) {
			return nil, fmt.Errorf("byte %#02x has no token of its own", b)
		}
		made[id] = true
	}
	t := &BPE{kind: kind, tokens: tokens, byteID: byteID, merges: merges, eot: eot,
		pairs: make(pairRanks, len(merges))}
	for rank, m := range merges {
		for _, id := range [...]int32{m.A, m.B, m.ID} {
			if id < 0 || int(id) >= n || id == eot {
				return nil, fmt.Errorf("merge %d (%d %d -> %d): id out of range", rank, m.A, m.B, m.ID)
			}
		}
		if !made[m.A] || !made[m.B] {
			return nil, fmt.Errorf("merge %d (%q %q): uses a token that no earlier merge makes", rank, tokens[m.A], tokens[m.B])
		}
		if made[m.ID] {
			return nil, fmt.Errorf("merge %d (%q %q): makes token %d (%q), which exists already", rank, tokens[m.A], tokens[m.B], m.ID, tokens[m.ID])
		}
		if string(tokens[m.ID]) != string(tokens[m.A])+string(tokens[m.B]) {
			return nil, fmt.Errorf("merge %d (%q %q): makes token %d, which is %q", rank, tokens[m.A], tokens[m.B], m.ID, tokens[m.ID])
		}
		if _, dup := t.pairs[pairKey(m.A, m.B)]; dup {
			return nil, fmt.Errorf("merge %d (%q %q): the pair is merged twice", rank, tokens[m.A], tokens[m.B])
		}
		t.pairs.set(m.A, m.B, rank, m.ID)
		made[m.ID] = true
	}
	for id, ok := range made {
		if !ok && int32(id) != eot {
			return nil, fmt.Errorf("token %d (%q) is not a byte and no merge makes it", id, tokens[id])
		}
	}
	t.caches.New = func() any { return &wordCache{m: make(map[string][]int32)} }
	return t, nil
}

// Size returns the number of token ids, the end-of-text token included.
func (t *BPE) Size() int { return len(t.tokens) }

// EOT returns the id of <|endoftext|>.
func (t *BPE) EOT() (int32, bool) { return t.eot, t.eot >= 0 }

// Spec returns the spec that opens this tokenizer again ("bpe:FILE",
// "gpt2:FILE", "gpt2:DIR"); for a trained BPE that has not been saved, "".
func (t *BPE) Spec() string { return t.spec }

// Merges returns the merges in rank order. The slice is shared: do not
// modify it.
func (t *BPE) Merges() []Merge { return t.merges }

// Token returns the bytes of token id (for the end-of-text token,
// "<|endoftext|>"), or nil if id is out of range. The slice is shared: do
// not modify it.
func (t *BPE) Token(id int32) []byte {
	if id < 0 || int(id) >= len(t.tokens) {
		return nil
	}
	return t.tokens[id]
}

// Decode returns the bytes of ids, concatenated (not necessarily valid
// UTF-8: a token may hold part of a character). The end-of-text token
// decodes to "<|endoftext|>"; an id outside the vocabulary decodes to
// U+FFFD.
func (t *BPE) Decode(ids []int32) string {
	n := 0
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			n += utf8.RuneLen(utf8.RuneError)
			continue
		}
		n += len(t.tokens[id])
	}
	out := make([]byte, 0, n)
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			out = utf8.AppendRune(out, utf8.RuneError)
			continue
		}
		out = append(out, t.tokens[id]...)
	}
	return string(out)
}

// Encode returns the ids of text; it never fails. It never produces the
// end-of-text token: "<|endoftext|>" in text is encoded as ordinary text.
// Any bytes can be encoded, valid UTF-8 or not, and Decode gives them
// back.
func (t *BPE) Encode(text string) ([]int32, error) { return t.encode([]byte(text)), nil }

// encode is Encode on bytes.
func (t *BPE) encode(text []byte) []int32 {
	out := make([]int32, 0, len(text)/3+1)
	c := t.caches.Get().(*wordCache)
	for p := 0; p < len(text); {
		e := pretokenEnd(text, p)
		out = t.encodeWord(c, out, text[p:e])
		p = e
	}
	t.caches.Put(c)
	return out
}

// wordCache remembers the ids of pre-tokens already encoded.
type wordCache struct {
	m    map[string][]int32
	syms []int32 // scratch
	rank []uint32
}

const (
	maxCachedWord  = 64      // longer pre-tokens are rarely repeated
	maxCacheWords  = 1 << 16 // the cache starts over past this many
	heapMergeAbove = 256     // longer pre-tokens merge with a heap
)

func (t *BPE) encodeWord(c *wordCache, out []int32, w []byte) []int32 {
	if len(w) == 1 {
		return append(out, t.byteID[w[0]])
	}
	if len(w) <= maxCachedWord {
		if ids, ok := c.m[string(w)]; ok {
			return append(out, ids...)
		}
	}
	start := len(out)
	if len(w) > heapMergeAbove {
		out = t.mergeHeap(out, w)
	} else {
		out = t.mergeSmall(c, out, w)
	}
	if len(w) <= maxCachedWord {
		if len(c.m) >= maxCacheWords {
			clear(c.m)
		}
		c.m[string(w)] = append([]int32(nil), out[start:]...)
	}
	return out
}

// mergeSmall merges w's bytes with the quadratic scan (merge.go).
func (t *BPE) mergeSmall(c *wordCache, out []int32, w []byte) []int32 {
	syms := c.syms[:0]
	for _, b := range w {
		syms = append(syms, t.byteID[b])
	}
	syms, c.rank = mergeSmall(t.pairs, syms, c.rank)
	c.syms = syms
	return append(out, syms...)
}

// mergeHeap merges w's bytes with the heap (merge.go), the same result as
// mergeSmall in O(n log n).
func (t *BPE) mergeHeap(out []int32, w []byte) []int32 {
	syms := make([]int32, len(w))
	for i, b := range w {
		syms[i] = t.byteID[b]
	}
	return mergeHeap(t.pairs, out, syms)
}

// pairHeap is a binary min-heap of candidate merges, each rank<<32 |
// position, so that the lowest rank, then the leftmost, comes first.
type pairHeap []uint64

func (h pairHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *pairHeap) push(x uint64) {
	*h = append(*h, x)
	s := *h
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p] <= x {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = x
}

func (h *pairHeap) pop() uint64 {
	s := *h
	x := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	if len(s) > 1 {
		h.down(0)
	}
	return x
}

func (h pairHeap) down(i int) {
	x := h[i]
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r] < h[l] {
			m = r
		}
		if h[m] >= x {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = x
}

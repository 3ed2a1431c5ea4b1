package data

import (
	"fmt"
	"math"
	"sort"
)

// Tokens is a read-only sequence of token ids: a slice in memory, or
// memory-mapped shards read in place.
type Tokens interface {
	// Len returns the number of tokens.
	Len() int
	// Read copies tokens off .. off+len(dst)-1 into dst. It panics if
	// that range is not inside [0, Len()).
	Read(dst []int32, off int)
}

// Int32s is a token sequence held in memory.
type Int32s []int32

// Len returns len(t).
func (t Int32s) Len() int { return len(t) }

// Read copies t[off:off+len(dst)] into dst.
func (t Int32s) Read(dst []int32, off int) { copy(dst, t[off:off+len(dst)]) }

// Uints is a token sequence of unsigned ids of one width, such as one
// shard's body: Uint16s in GPT-2's shards, Uint32s in those of larger
// vocabularies (Llama 3's, Qwen2's).
type Uints[T uint16 | uint32] []T

// Uint16s and Uint32s are the two widths of shard tokens.
type (
	Uint16s = Uints[uint16]
	Uint32s = Uints[uint32]
)

// Len returns len(t).
func (t Uints[T]) Len() int { return len(t) }

// Read converts t[off:off+len(dst)] into dst. A uint32 id above MaxInt32
// reads as negative; MaxID reports it as MaxInt32, above any vocabulary,
// so such a file is refused before training reads it.
func (t Uints[T]) Read(dst []int32, off int) {
	src := t[off : off+len(dst)]
	for i, v := range src {
		dst[i] = int32(v)
	}
}

// maxID is MaxID for t, clamped to MaxInt32.
func (t Uints[T]) maxID() int32 {
	m := int64(-1)
	for _, v := range t {
		m = max(m, int64(v))
	}
	return int32(min(m, math.MaxInt32))
}

// Concat is the concatenation of token sequences, read as one: a window
// may straddle the end of one part and the start of the next.
type Concat struct {
	parts  []Tokens
	starts []int // starts[i] is where parts[i] begins; starts[len(parts)] is the total
}

// NewConcat returns the concatenation of parts, in order.
func NewConcat(parts ...Tokens) *Concat {
	c := &Concat{parts: parts, starts: make([]int, len(parts)+1)}
	for i, p := range parts {
		c.starts[i+1] = c.starts[i] + p.Len()
	}
	return c
}

// Len returns the total number of tokens.
func (c *Concat) Len() int { return c.starts[len(c.parts)] }

// Read copies tokens off .. off+len(dst)-1 of the concatenation into dst.
func (c *Concat) Read(dst []int32, off int) {
	if off < 0 || off+len(dst) > c.Len() {
		panic(fmt.Sprintf("data: Read of %d tokens at %d from %d tokens", len(dst), off, c.Len()))
	}
	// The part holding off: the last one starting at or before it.
	i := sort.Search(len(c.parts), func(i int) bool { return c.starts[i+1] > off })
	for len(dst) > 0 {
		p := c.parts[i]
		o := off - c.starts[i]
		n := min(len(dst), p.Len()-o)
		p.Read(dst[:n], o)
		dst, off = dst[n:], off+n
		i++
	}
}

// Slice is the tokens lo .. hi-1 of another sequence.
type Slice struct {
	T      Tokens
	Lo, Hi int
}

// Len returns Hi - Lo.
func (s Slice) Len() int { return s.Hi - s.Lo }

// Read copies tokens Lo+off .. of T into dst.
func (s Slice) Read(dst []int32, off int) {
	if off < 0 || off+len(dst) > s.Len() {
		panic(fmt.Sprintf("data: Read of %d tokens at %d from %d tokens", len(dst), off, s.Len()))
	}
	s.T.Read(dst, s.Lo+off)
}

// SplitTokens divides t as Split does: the first int(0.9*N) tokens for
// training and the rest for validation.
func SplitTokens(t Tokens) (train, val Tokens) {
	n := int(0.9 * float64(t.Len()))
	return Slice{t, 0, n}, Slice{t, n, t.Len()}
}

// MaxID returns the largest id in t, or -1 when t is empty. It reads t in
// chunks, so it works on sequences larger than memory.
func MaxID(t Tokens) int32 {
	if c, ok := t.(*Concat); ok {
		m := int32(-1)
		for _, p := range c.parts {
			m = max(m, MaxID(p))
		}
		return m
	}
	switch u := t.(type) {
	case Uint16s:
		return u.maxID()
	case Uint32s:
		return u.maxID()
	}
	buf := make([]int32, 1<<16)
	m := int32(-1)
	for off := 0; off < t.Len(); off += len(buf) {
		b := buf[:min(len(buf), t.Len()-off)]
		t.Read(b, off)
		for _, v := range b {
			m = max(m, v)
		}
	}
	return m
}

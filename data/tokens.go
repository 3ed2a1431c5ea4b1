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

// Uint16s is a token sequence of 16-bit ids, such as one shard's body.
type Uint16s []uint16

// Len returns len(t).
func (t Uint16s) Len() int { return len(t) }

// Read widens t[off:off+len(dst)] into dst.
func (t Uint16s) Read(dst []int32, off int) {
	src := t[off : off+len(dst)]
	for i, v := range src {
		dst[i] = int32(v)
	}
}

// Uint32s is a token sequence of 32-bit ids, such as the body of a shard
// of a vocabulary too large for 16 bits (Llama 3's, Qwen2's).
type Uint32s []uint32

// Len returns len(t).
func (t Uint32s) Len() int { return len(t) }

// Read converts t[off:off+len(dst)] into dst. An id above MaxInt32 reads
// as negative; MaxID reports it as MaxInt32, above any vocabulary, so such
// a file is refused before training reads it.
func (t Uint32s) Read(dst []int32, off int) {
	src := t[off : off+len(dst)]
	for i, v := range src {
		dst[i] = int32(v)
	}
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
	if u, ok := t.(Uint16s); ok {
		m := int32(-1)
		for _, v := range u {
			m = max(m, int32(v))
		}
		return m
	}
	if u, ok := t.(Uint32s); ok {
		m := int64(-1)
		for _, v := range u {
			m = max(m, int64(v))
		}
		return int32(min(m, math.MaxInt32))
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

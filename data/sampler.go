package data

import (
	"fmt"

	"github.com/fleetml/fleet/internal/rng"
)

// Split divides tokens as nanoGPT does: train is the first 90%
// (int(0.9*N) tokens) and val is the rest. Both share tokens' memory;
// train's capacity is capped so appending to it cannot overwrite val.
func Split(ids []int32) (train, val []int32) {
	n := int(0.9 * float64(len(ids)))
	return ids[:n:n], ids[n:]
}

// Streams distinguish independent uses of the same tokens and seed, so
// that, for example, evaluation never draws the training batches.
const (
	StreamTrain     uint64 = 0 // training batches
	StreamEvalTrain uint64 = 1 // loss estimates on the training split
	StreamEvalVal   uint64 = 2 // loss estimates on the validation split
)

// Sampler draws random windows of blockSize+1 consecutive tokens. Window j
// of step s starts at
//
//	rng.New(rng.Mix(seed, stream, uint64(s), uint64(j))).Intn(len(tokens)-blockSize)
//
// so it depends only on (seed, stream, s, j), never on how the global
// batch is split into micro-batches or processes, and never on what was
// drawn before.
type Sampler struct {
	tokens    Tokens
	n         int // tokens.Len()
	blockSize int
	seed      uint64
	stream    uint64
}

// NewSampler returns a Sampler over tokens in memory. It fails if
// blockSize is not positive or tokens is too short to hold one window.
func NewSampler(tokens []int32, blockSize int, seed uint64, stream uint64) (*Sampler, error) {
	return NewTokenSampler(Int32s(tokens), blockSize, seed, stream)
}

// NewTokenSampler returns a Sampler over any token sequence, such as
// memory-mapped shards. For the same ids it draws exactly the windows
// NewSampler does.
func NewTokenSampler(tokens Tokens, blockSize int, seed uint64, stream uint64) (*Sampler, error) {
	if blockSize <= 0 {
		return nil, fmt.Errorf("data: block size must be positive, got %d", blockSize)
	}
	if n := tokens.Len(); n < blockSize+1 {
		return nil, fmt.Errorf("data has %d tokens, fewer than block size %d + 1", n, blockSize)
	}
	return &Sampler{tokens: tokens, n: tokens.Len(), blockSize: blockSize, seed: seed, stream: stream}, nil
}

// Tokens returns the sequence the windows are drawn from.
func (s *Sampler) Tokens() Tokens { return s.tokens }

// BlockSize returns the window length T.
func (s *Sampler) BlockSize() int { return s.blockSize }

// Offset returns where window j of the given step starts in the tokens.
func (s *Sampler) Offset(step, j int) int {
	r := rng.New(rng.Mix(s.seed, s.stream, uint64(step), uint64(j)))
	return r.Intn(s.n - s.blockSize)
}

// Batch fills x and y, each of length count*blockSize laid out row-major
// as [count][blockSize], with windows first .. first+count-1 of step: row
// i of x is tokens[o:o+T] and row i of y is tokens[o+1:o+T+1], where o is
// Offset(step, first+i). It panics if first or count is negative or x or y
// has the wrong length.
func (s *Sampler) Batch(step int, first, count int, x, y []int32) {
	T := s.blockSize
	if first < 0 || count < 0 {
		panic(fmt.Sprintf("data: Batch with first %d, count %d", first, count))
	}
	if len(x) != count*T || len(y) != count*T {
		panic(fmt.Sprintf("data: Batch of %d windows of %d tokens needs x and y of length %d, got %d and %d",
			count, T, count*T, len(x), len(y)))
	}
	for i := 0; i < count; i++ {
		o := s.Offset(step, first+i)
		xr, yr := x[i*T:(i+1)*T], y[i*T:(i+1)*T]
		s.tokens.Read(xr, o)
		copy(yr, xr[1:])
		s.tokens.Read(yr[T-1:], o+T)
	}
}

// MicroBatchFirst returns the index of the first window that process rank
// takes in micro-step micro, when each micro-batch holds batch windows and
// each process accumulates gradients over accum micro-batches: the global
// batch of batch*accum*worldSize windows is dealt out as consecutive
// blocks, rank-major. The process's windows are first .. first+batch-1.
func MicroBatchFirst(batch, accum, rank, micro int) int {
	return (rank*accum + micro) * batch
}

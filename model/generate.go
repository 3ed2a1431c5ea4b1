package model

import (
	"fmt"
	"math"
	"sort"

	"github.com/fleetml/fleet/tensor"
)

// KVCache holds each layer's keys and values for inference,
// [1, BlockSize, key/value heads × head width] (C in a GPT-2), or an
// LSTM's state of each layer.
type KVCache struct {
	K, V  []*tensor.Tensor
	State []*tensor.LSTMState
	Pos   int // positions filled
}

// NewKVCache allocates a cache for one sequence.
func (m *GPT) NewKVCache() *KVCache {
	c := &KVCache{}
	tensor.ProgramOf(m.Device()).Persist(func() {
		if m.RNN != nil {
			m.newLSTMState(c)
			return
		}
		w := m.Config.kvHeads() * m.Config.headDim()
		for range m.Blocks {
			c.K = append(c.K, tensor.Zeros(m.Device(), 1, m.Config.BlockSize, w))
			c.V = append(c.V, tensor.Zeros(m.Device(), 1, m.Config.BlockSize, w))
		}
	})
	return c
}

// Free releases the cache's memory.
func (c *KVCache) Free() {
	for i := range c.K {
		c.K[i].Free()
		c.V[i].Free()
	}
	for _, s := range c.State {
		s.H.Free()
		s.C.Free()
	}
}

// ForwardKV runs ids [1, T] at positions [cache.Pos, cache.Pos+T) and
// returns the logits of the last position, [vocab], as host floats. Each
// call costs only the new positions. It is inference: no gradients, no
// dropout. An LSTM continues from the cache's state, and starts from zero
// where cache.Pos is 0.
func (m *GPT) ForwardKV(ids []int32, cache *KVCache) []float32 {
	T := len(ids)
	p := &Pass{Cache: cache}
	prog := tensor.ProgramOf(m.Device())
	var logits []float32
	prog.NoGrad(func() {
		prog.Step(func() {
			if m.RNN != nil {
				if cache.Pos == 0 {
					cache.resetLSTMState()
				}
				logits = m.forwardLSTM(tensor.FromInt32s(m.Device(), ids, 1, T), p).Reshape(T, m.Config.VocabSize).Rows(T-1, T).Float32s()
				return
			}
			x := m.embed(tensor.FromInt32s(m.Device(), ids, 1, T), p)
			x = m.blocks(x, 0, len(m.Blocks), p)
			last := x.Reshape(T, m.Config.NEmbd).Rows(T-1, T)
			logits = m.head(last, m.Head.T).Float32s()
		})
	})
	cache.Pos += T
	return logits
}

// Sampling controls Generate.
type Sampling struct {
	Temperature float64 // > 0; 1 samples the model's distribution
	TopK        int     // 0 keeps every token
	RNG         *tensor.RNG
}

// Generate extends prompt by n tokens. A key/value cache (an LSTM's
// state) makes each new token cost one position. When the context reaches
// the block size, the cache is rebuilt from the most recent half block,
// so the model always sees at most BlockSize tokens, as it was trained.
func (m *GPT) Generate(prompt []int32, n int, s Sampling) ([]int32, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("generate: empty prompt")
	}
	if s.Temperature <= 0 {
		return nil, fmt.Errorf("generate: temperature must be positive, got %v", s.Temperature)
	}
	for _, id := range prompt {
		if id < 0 || int(id) >= m.Config.VocabSize {
			return nil, fmt.Errorf("generate: token id %d outside the vocabulary of %d", id, m.Config.VocabSize)
		}
	}
	defer m.SetTraining(m.SetTraining(false))
	cache := m.NewKVCache()
	defer cache.Free()
	out := append([]int32(nil), prompt...)
	bs := m.Config.BlockSize
	start := max(0, len(out)-bs)
	var logits []float32
	err := tensor.Catch(func() {
		logits = m.ForwardKV(out[start:], cache)
		for i := 0; i < n; i++ {
			next := sampleLogits(logits, s)
			out = append(out, next)
			if i == n-1 {
				break
			}
			if cache.Pos == bs {
				cache.Pos = 0
				logits = m.ForwardKV(out[len(out)-max(1, bs/2):], cache)
			} else {
				logits = m.ForwardKV([]int32{next}, cache)
			}
		}
	})
	return out, err
}

// sampleLogits draws a token from softmax(logits/temperature), keeping
// only the top-k logits when TopK > 0.
func sampleLogits(logits []float32, s Sampling) int32 {
	v := len(logits)
	scaled := make([]float64, v)
	for i, l := range logits {
		scaled[i] = float64(l) / s.Temperature
	}
	if s.TopK > 0 && s.TopK < v {
		sorted := append([]float64(nil), scaled...)
		sort.Sort(sort.Reverse(sort.Float64Slice(sorted)))
		cut := sorted[s.TopK-1]
		for i := range scaled {
			if scaled[i] < cut {
				scaled[i] = math.Inf(-1)
			}
		}
	}
	mx := math.Inf(-1)
	for _, x := range scaled {
		mx = math.Max(mx, x)
	}
	var sum float64
	for i, x := range scaled {
		scaled[i] = math.Exp(x - mx)
		sum += scaled[i]
	}
	u := s.RNG.Float64() * sum
	for i, p := range scaled {
		u -= p
		if u < 0 {
			return int32(i)
		}
	}
	// Rounding left u just above zero: take the last token with mass.
	for i := v - 1; i >= 0; i-- {
		if scaled[i] > 0 {
			return int32(i)
		}
	}
	return 0
}

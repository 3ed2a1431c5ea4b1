// Package rng is fleet's seeded pseudo-random generator. It is small,
// fast, has a state that can be saved and restored exactly (so runs
// resume bit for bit), and gives the same stream on every platform.
package rng

import "math"

// RNG is a SplitMix64 generator. Its whole state is one uint64, so it can
// be checkpointed by saving State.
type RNG struct {
	State uint64
}

// New returns a generator seeded with seed.
func New(seed uint64) *RNG { return &RNG{State: seed} }

// Mix hashes a sequence of words into one well-mixed seed. It is used to
// derive independent streams, for example Mix(seed, step, window).
func Mix(words ...uint64) uint64 {
	h := uint64(0x243f6a8885a308d3)
	for _, w := range words {
		h = splitmix(h ^ splitmix(w+0x9e3779b97f4a7c15))
	}
	return h
}

// Gamma is what each draw adds to State: the k-th draw after State s
// (k counting from 1) is Mix64(s + k·Gamma), so any draw can be computed
// without the ones before it (a dropout kernel draws each element's on its
// own).
const Gamma = 0x9e3779b97f4a7c15

// Mix64 is SplitMix64's output function.
func Mix64(z uint64) uint64 { return splitmix(z) }

func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Uint64 returns the next 64 random bits.
func (r *RNG) Uint64() uint64 {
	r.State += Gamma
	return splitmix(r.State)
}

// Float64 returns a uniform float64 in [0, 1).
func (r *RNG) Float64() float64 { return float64(r.Uint64()>>11) / (1 << 53) }

// Intn returns a uniform int in [0, n). It panics if n <= 0.
func (r *RNG) Intn(n int) int {
	if n <= 0 {
		panic("rng: Intn with n <= 0")
	}
	// Lemire's multiply-shift with rejection, unbiased.
	un := uint64(n)
	for {
		v := r.Uint64()
		hi, lo := mul64(v, un)
		if lo >= un || lo >= (-un)%un {
			return int(hi)
		}
	}
}

func mul64(a, b uint64) (hi, lo uint64) {
	const mask32 = 1<<32 - 1
	a0, a1 := a&mask32, a>>32
	b0, b1 := b&mask32, b>>32
	w0 := a0 * b0
	t := a1*b0 + w0>>32
	w1 := t&mask32 + a0*b1
	hi = a1*b1 + t>>32 + w1>>32
	lo = a * b
	return
}

// Norm returns a standard normal float64 (Box-Muller, one value per call
// so that the stream position is simple to reason about).
func (r *RNG) Norm() float64 {
	u1 := r.Float64()
	for u1 == 0 {
		u1 = r.Float64()
	}
	u2 := r.Float64()
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

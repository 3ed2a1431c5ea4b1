package backend

import (
	"math"

	"github.com/fleetml/fleet/internal/rng"
)

// DropoutMask says which elements a dropout keeps, so that any device can
// draw the mask where it applies it, element by element, and every device
// draws the same one. Element i (counting from 0 over the op's elements)
// gets the (i+1)-th draw of the SplitMix64 stream at State Seed, the one
// tensor.RNG would give it drawing the elements in order; it is kept when
// the draw's top 53 bits are at least Threshold, that is when the draw as
// a uniform float64 in [0, 1) is at least p, and then multiplied by Scale.
// The others become zero.
//
// Base, where not Nil, is two I32 on the device (the low and the high
// half of a uint64) added to Seed when the kernel runs: the state a step
// replayed from a graph draws from, written on the device each step
// (DropoutBases), Seed then being the op's offset into it. The CPU reads
// it when the op runs.
type DropoutMask struct {
	Seed      uint64
	Threshold uint64
	Scale     float32
	Base      Ref
}

// NewDropoutMask returns the mask of a dropout with probability p in
// [0, 1) whose first element takes the draw after state seed. Scale is
// 1/(1-p), computed in float32.
func NewDropoutMask(seed uint64, p float32) DropoutMask {
	// u/2⁵³ >= p exactly when the integer u >= p·2⁵³, which is exact in
	// float64 (p is a float32), so u >= ceil(p·2⁵³).
	return DropoutMask{Seed: seed, Threshold: uint64(math.Ceil(float64(p) * (1 << 53))), Scale: 1 / (1 - p)}
}

// Keep reports whether element i survives (Base left out: see
// Resolved).
func (m DropoutMask) Keep(i int64) bool {
	return rng.Mix64(m.Seed+uint64(i+1)*rng.Gamma)>>11 >= m.Threshold
}

// Resolved is m with its base, read from base (the host's view of
// m.Base's two I32), added into Seed.
func (m DropoutMask) Resolved(base []int32) DropoutMask {
	if m.Base.Nil() {
		return m
	}
	m.Seed += uint64(uint32(base[0])) | uint64(uint32(base[1]))<<32
	m.Base = Ref{}
	return m
}

// DropoutSeedWords are the words rng.Mix hashes into a micro-step's
// dropout state: the run's seed, a tag, the step, the micro-step (the
// trainer's and DropoutBases' alike).
func DropoutSeedWords(seed uint64, step, micro int) [4]uint64 {
	return [4]uint64{seed, 0xd0, uint64(step), uint64(micro)}
}

// Factor is what element i is multiplied by: Scale where the mask keeps
// it, else 0.
func (m DropoutMask) Factor(i int64) float32 {
	if m.Keep(i) {
		return m.Scale
	}
	return 0
}

// DropoutOut is an optional second output of a kernel: the kernel's
// result times Mask's Factor, written to Dst as well (a
// dropout's backward pass fused into the pass that forms its gradient).
// A Nil Dst writes nothing.
type DropoutOut struct {
	Dst  Ref
	Mask DropoutMask
}

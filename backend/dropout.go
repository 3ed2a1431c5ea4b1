package backend

import (
	"math"

	"github.com/fleetml/fleet/internal/rng"
)

// DropoutMask says which elements a dropout keeps, so that any device can
// draw the mask where it applies it, element by element, and every device
// draws the same one, from the counter-based generator Philox4x32-10
// (rng.Philox4x32). Element i of the op (counting from 0 over its
// elements) is the element g = Offset + i of the step's global batch: for
// activations [rows, T, C] whose first row is window Row0 of the step's
// global batch, Offset = Row0·T·C, so g names the window, the position and
// the channel, whatever the batch's split among ranks and micro-steps.
// Its number is word g mod 4 of Philox4x32 with counter (g/4 low and high
// words, Site, 0) and key Seed (low word first); it is kept when that word
// is at least Threshold (when it is, as a uniform in [0, 1), at least p)
// and then multiplied by Scale. The others become zero. Seed is the
// step's key (DropoutKey), and Site the dropout's place in the forward
// pass, so masks depend on the seed, the step, the site, the window, the
// position and the channel only.
//
// Base, where not Nil, is two I32 on the device (the low and the high
// half of a uint64) added to Seed when the kernel runs: the key a step
// replayed from a graph draws with, written on the device each step
// (StepDropoutKey), Seed then being 0. The CPU reads it when the op runs.
type DropoutMask struct {
	Seed      uint64
	Offset    int64
	Site      uint32
	Threshold uint32
	Scale     float32
	Base      Ref
}

// Identity reports whether m keeps every element as it is (a dropout with
// p 0: no mask), so that a device can skip the draws.
func (m DropoutMask) Identity() bool { return m.Threshold == 0 && m.Scale == 1 }

// DropoutGenerator names the generator and its keying, as checkpoints
// record it: a resume must draw the masks the run drew.
const DropoutGenerator = "philox4x32-10; key rng.Mix(seed, 0xd0, step); counter (g/4, site, 0), word g%4, g = window·T·C + position·C + channel"

// NewDropoutMask returns the mask of a dropout with probability p in
// [0, 1) at site of the step whose key is key, over elements starting at
// element offset of the step's global batch. Scale is 1/(1-p), computed
// in float32.
func NewDropoutMask(key uint64, site uint32, offset int64, p float32) DropoutMask {
	// A word w/2³² >= p exactly when w >= p·2³², which is exact in float64
	// (p is a float32), so w >= ceil(p·2³²); below 2³² for p < 1.
	return DropoutMask{Seed: key, Offset: offset, Site: site, Threshold: uint32(math.Ceil(float64(p) * (1 << 32))), Scale: 1 / (1 - p)}
}

// DropoutKey is the Philox key of a step's masks: rng.Mix of the run's
// seed, a tag and the step (StepDropoutKey computes the same on the device).
func DropoutKey(seed uint64, step int) uint64 { return rng.Mix(seed, 0xd0, uint64(step)) }

// Keep reports whether element i survives (Base left out: see
// Resolved).
func (m DropoutMask) Keep(i int64) bool {
	g := uint64(m.Offset + i)
	w := rng.Philox4x32([4]uint32{uint32(g >> 2), uint32(g >> 34), m.Site, 0}, [2]uint32{uint32(m.Seed), uint32(m.Seed >> 32)})
	return w[g&3] >= m.Threshold
}

// FactorsAt fills f with the factors of elements i0, i0+1, ...: Factor
// for each, with one Philox call per four elements that share a counter.
func (m DropoutMask) FactorsAt(f []float32, i0 int64) {
	key := [2]uint32{uint32(m.Seed), uint32(m.Seed >> 32)}
	g := uint64(m.Offset + i0)
	var w [4]uint32
	q := ^uint64(0)
	for k := range f {
		if g>>2 != q {
			q = g >> 2
			w = rng.Philox4x32([4]uint32{uint32(q), uint32(q >> 32), m.Site, 0}, key)
		}
		if w[g&3] >= m.Threshold {
			f[k] = m.Scale
		} else {
			f[k] = 0
		}
		g++
	}
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

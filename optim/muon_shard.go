package optim

import "math"

// Muon under ZeRO-1. A sharded group cuts the packed flat buffer into one
// contiguous shard per rank; each rank keeps the state of its shard and
// updates it, and the ranks then gather the parameters. AdamW's elements
// can be cut anywhere, but a matrix's Newton–Schulz iteration needs the
// whole matrix: so Muon's matrices are never cut, each is updated once,
// by the rank whose shard holds it, and the cuts fall where the ranks'
// costs come out about even rather than their sizes.
//
// The cost is an estimate in product FLOPs: a matrix's Newton–Schulz
// products (for a part s×l, s ≤ l, each of the five iterations is
// 4·s²·l + 2·s³), and the memory-bound passes over every element of the
// flat buffer, at a roofline's exchange rate: an H100's bf16 products
// run 989 TFLOP/s against 3.35 TB/s of memory, 295 FLOPs a byte. AdamW's
// update moves about 30 bytes an element (the parameter, its gradient
// and both moments read; the parameter, the moments and the bf16 copy
// written); Muon's elementwise passes over a matrix (the momentum and
// the look-ahead, the copy into Newton–Schulz's buffer, its
// normalisation, an addition per iteration, the rate, the update and the
// bf16 copy: see stepOn) about 166. The figures are constants so that
// every rank cuts alike without talking; on a device of another balance
// the cuts are as even as this estimate is there.
const (
	flopsPerByte = 295
	adamBytes    = 30
	muonBytes    = 166
)

// nsFLOPs is the Newton–Schulz iteration's product FLOPs on a part of
// rows×cols.
func nsFLOPs(rows, cols int) float64 {
	s, l := float64(min(rows, cols)), float64(max(rows, cols))
	return nsSteps * (4*s*s*l + 2*s*s*s)
}

// cost is matrix m's estimated update cost, in FLOPs.
func (m *muonMat) cost() float64 {
	c := flopsPerByte * muonBytes * float64(m.in*m.out)
	for _, w := range m.parts {
		c += nsFLOPs(w, m.in)
	}
	return c
}

// ShardBounds cuts the packed flat buffer among world ranks for Shard
// (see above and costCuts).
func (o *Muon) ShardBounds(world int) []int {
	k := o.packed
	if k == nil || !k.done {
		return make([]int, world+1)
	}
	offs := o.FlatOffsets()
	byOff := map[int]*muonMat{}
	for _, m := range o.mats {
		byOff[offs[m.i]] = m
	}
	var sizes []int
	var costs []float64
	for at := k.adam; at < k.params.Numel(); {
		m := byOff[at]
		if m == nil { // Pack puts Muon's matrices, and only them, after AdamW's stretch
			panic("muon: a packed matrix is not where the flat offsets put it")
		}
		sizes, costs = append(sizes, m.in*m.out), append(costs, m.cost())
		at += m.in * m.out
	}
	return costCuts(k.adam, flopsPerByte*adamBytes, sizes, costs, world)
}

// costCuts cuts a flat buffer of adam elements that cost elem each, then
// whole items of sizes and costs, among world ranks: each cut is the
// place allowed (any element of the first stretch, an item's edge after
// it) whose cost before it is nearest to its rank's even share, so a
// rank's cost differs from the share by at most about one item's. A rank
// may get nothing where the items are fewer than the ranks or one costs
// several shares.
func costCuts(adam int, elem float64, sizes []int, costs []float64, world int) []int {
	type edge struct {
		at   int
		cost float64
	}
	edges := []edge{{adam, elem * float64(adam)}}
	for i, n := range sizes {
		last := edges[len(edges)-1]
		edges = append(edges, edge{last.at + n, last.cost + costs[i]})
	}
	end := edges[len(edges)-1]
	b := make([]int, world+1)
	b[world] = end.at
	for r := 1; r < world; r++ {
		share := end.cost * float64(r) / float64(world)
		var cut int
		if share <= edges[0].cost {
			cut = int(math.Round(share / elem))
		} else {
			j := 0 // the edge nearest the share
			for i, e := range edges {
				if math.Abs(e.cost-share) < math.Abs(edges[j].cost-share) {
					j = i
				}
			}
			cut = edges[j].at
		}
		b[r] = min(max(cut, b[r-1]), end.at)
	}
	return b
}

// Shard makes this optimizer rank's shard of a ZeRO-1 group: AdamW's
// Shard for the state of flat elements [lo, hi) and AdamW's part of them,
// and Muon's rule for the matrices that lie within them. It reports
// false, doing nothing, where a matrix is cut (lo or hi falls inside it)
// or AdamW's Shard refuses. Call it before the first step.
func (o *Muon) Shard(lo, hi int) bool {
	offs := o.FlatOffsets()
	if offs == nil || o.opened {
		return false
	}
	var mine []*muonMat
	for _, m := range o.mats {
		a, z := offs[m.i], offs[m.i]+m.in*m.out
		if (lo > a && lo < z) || (hi > a && hi < z) {
			return false
		}
		if a >= lo && z <= hi {
			mine = append(mine, m)
		}
	}
	if !o.AdamW.Shard(lo, hi) {
		return false
	}
	o.mats = mine
	return true
}

// ShardMatrices is the number of matrices this optimizer updates: all of
// them, or its shard's.
func (o *Muon) ShardMatrices() int { return len(o.mats) }

package optim

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// shardModel is a small model's parameters, the same values for every
// seed: an embedding and a norm's gain (AdamW's) and, per block, a fused
// q/k/v with GQA's narrower k and v, a square projection and a fused
// gate/up (Muon's).
func shardModel() []*nn.Parameter {
	r := tensor.NewRNG(11)
	mk := func(name string, parts []int, decay bool, shape ...int) *nn.Parameter {
		p := nn.NewParameter(name, tensor.Randn(tensor.CPU, r, 0.2, shape...))
		p.Parts, p.Decay = parts, decay
		return p
	}
	ps := []*nn.Parameter{mk("emb", nil, true, 40, 16), mk("gain", nil, false, 16)}
	for b := range 3 {
		ps = append(ps,
			mk(fmt.Sprintf("b%d.qkv", b), []int{16, 8, 8}, true, 16, 32),
			mk(fmt.Sprintf("b%d.proj", b), []int{16}, true, 16, 16),
			mk(fmt.Sprintf("b%d.gate_up", b), []int{24, 24}, true, 16, 48))
	}
	return ps
}

// TestMuonShardMatchesWhole runs Muon sharded over 2, 3 and 5 ranks as a
// ZeRO-1 group does (each rank packs, cuts by ShardBounds, keeps its
// shard, steps it from gradients it holds only there, and the ranks'
// shards are gathered) against one whole optimizer, four steps with a
// clip coefficient: the gathered parameters are bit for bit the whole
// optimizer's. Every matrix lies whole in one shard, and the elements
// outside a rank's shard are NaN in its gradients, so a rank that read
// them would show it.
func TestMuonShardMatchesWhole(t *testing.T) {
	adam := AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1}
	cfg := MuonConfig{LR: 0.05, Momentum: 0.95, WeightDecay: 0.01}
	newOpt := func() *Muon {
		o, err := NewMuon(shardModel(), adam, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Pack() {
			t.Fatal("not packed")
		}
		return o
	}
	whole := newOpt()
	defer whole.Free()
	n := whole.PackedParams().Numel()
	r := tensor.NewRNG(5)
	var grads [][]float32
	for range 4 {
		grads = append(grads, tensor.Randn(tensor.CPU, r, 1, n).Float32s())
	}
	coef := tensor.Full(tensor.CPU, 0.8, 1)
	var want [][]float32
	for _, g := range grads {
		whole.PackedGrads().SetFloat32s(g)
		whole.StepSched(coef, nil)
		want = append(want, whole.PackedParams().Float32s())
	}
	offs := whole.FlatOffsets()
	for _, world := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("world=%d", world), func(t *testing.T) {
			ranks := make([]*Muon, world)
			var b []int
			for k := range ranks {
				ranks[k] = newOpt()
				defer ranks[k].Free()
				b = ranks[k].ShardBounds(world)
			}
			if len(b) != world+1 || b[0] != 0 || b[world] != n || !slices.IsSorted(b) {
				t.Fatalf("bounds %v for %d ranks of %d elements", b, world, n)
			}
			mats := 0
			for k, o := range ranks {
				if !o.Shard(b[k], b[k+1]) {
					t.Fatalf("rank %d refused its shard [%d, %d)", k, b[k], b[k+1])
				}
				mats += o.ShardMatrices()
			}
			if mats != whole.Matrices() {
				t.Errorf("the shards hold %d matrices, want %d once each", mats, whole.Matrices())
			}
			for _, p := range whole.Params {
				i := slices.Index(whole.Params, p)
				if p.Parts == nil {
					continue
				}
				for _, cut := range b {
					if cut > offs[i] && cut < offs[i]+p.T.Numel() {
						t.Errorf("bounds %v cut %s [%d, %d)", b, p.Name, offs[i], offs[i]+p.T.Numel())
					}
				}
			}
			for step, g := range grads {
				gathered := make([]float32, n)
				for k, o := range ranks {
					lo, hi := b[k], b[k+1]
					mine := slices.Clone(g)
					for i := range mine {
						if i < lo || i >= hi {
							mine[i] = float32(math.NaN())
						}
					}
					o.PackedGrads().SetFloat32s(mine)
					o.StepSched(coef, nil)
					copy(gathered[lo:hi], o.PackedParams().Float32s()[lo:hi])
				}
				for _, o := range ranks { // the all-gather
					o.PackedParams().SetFloat32s(gathered)
				}
				for i := range gathered {
					if math.Float32bits(gathered[i]) != math.Float32bits(want[step][i]) {
						t.Fatalf("step %d: flat element %d is %v sharded, %v whole (bounds %v)", step, i, gathered[i], want[step][i], b)
					}
				}
			}
		})
	}
	// A cut inside a matrix is refused, and changes nothing.
	o := newOpt()
	defer o.Free()
	qkv := slices.IndexFunc(o.Params, func(p *nn.Parameter) bool { return p.Name == "b1.qkv" })
	at := o.FlatOffsets()[qkv] + 1
	if o.Shard(0, at) || o.Shard(at, n) {
		t.Errorf("a shard cutting b1.qkv at flat element %d was accepted", at)
	}
	if !o.Shard(0, n) || o.ShardMatrices() != o.Matrices() {
		t.Errorf("after the refusals, the whole buffer as one shard: %d of %d matrices", o.ShardMatrices(), o.Matrices())
	}
}

// TestCostCuts holds the cuts to their rule on GPT-2 124M's shapes (the
// AdamW stretch: the token and position embeddings and the 25 norms'
// gains and biases and the blocks' biases; Muon's 48 matrices, 12 blocks
// of q/k/v, projection, MLP up and down) for 2 to 16 ranks: the cuts
// never fall inside a matrix, and each rank's cost is within one
// matrix's cost of an even share (the log gives the spread).
func TestCostCuts(t *testing.T) {
	const d, blocks = 768, 12
	adam := 50304*d + 1024*d + (2*blocks+1)*2*d + blocks*(3*d+d+4*d+d)
	var sizes []int
	var costs []float64
	var biggest float64
	for range blocks {
		for _, m := range []*muonMat{
			{in: d, out: 3 * d, parts: []int{d, d, d}},
			{in: d, out: d, parts: []int{d}},
			{in: d, out: 4 * d, parts: []int{4 * d}},
			{in: 4 * d, out: d, parts: []int{d}},
		} {
			sizes, costs = append(sizes, m.in*m.out), append(costs, m.cost())
			biggest = max(biggest, m.cost())
		}
	}
	elem := float64(flopsPerByte * adamBytes)
	total := elem * float64(adam)
	for _, c := range costs {
		total += c
	}
	for _, world := range []int{2, 4, 8, 16} {
		b := costCuts(adam, elem, sizes, costs, world)
		edges := map[int]float64{adam: elem * float64(adam)}
		at, c := adam, elem*float64(adam)
		for i, n := range sizes {
			at, c = at+n, c+costs[i]
			edges[at] = c
		}
		costAt := func(x int) float64 {
			if x <= adam {
				return elem * float64(x)
			}
			c, ok := edges[x]
			if !ok {
				t.Fatalf("%d ranks: bounds %v cut a matrix at %d", world, b, x)
			}
			return c
		}
		share := total / float64(world)
		spread := 0.0
		for r := range world {
			got := costAt(b[r+1]) - costAt(b[r])
			if math.Abs(got-share) > biggest {
				t.Errorf("%d ranks: rank %d costs %.3g, the share is %.3g (bounds %v)", world, r, got, share, b)
			}
			spread = max(spread, math.Abs(got-share)/share)
		}
		t.Logf("%d ranks: every rank within %.1f%% of an even share of %.3g FLOPs", world, 100*spread, share)
	}
}

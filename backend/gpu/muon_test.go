package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
)

// TestMuonOnEmulatedDevice holds Muon's steps on the emulated CUDA
// device to the CPU's (see checkMuon).
func TestMuonOnEmulatedDevice(t *testing.T) { checkMuon(t, emulatedDevice(t, 31)) }

// TestMuonOnOpenCL is the same check on opencl:0 (PoCL in CI).
func TestMuonOnOpenCL(t *testing.T) { checkMuon(t, openCLDevice(t)) }

// checkMuon runs three Muon steps on dev and on the CPU from the same
// weights and gradients, packed as the trainer packs them, with a clip
// coefficient on the device, over matrices that take every path of its
// update (a fused q/k/v whose parts fall in two Newton–Schulz batches, a
// wide matrix, a fused gate/up of two tall parts, an embedding AdamW
// updates), in F32 and with bf16 Newton–Schulz products, whole and as
// two ZeRO-1 shards on dev (each stepping its part from its own copy,
// the parts gathered after each step): the weights must agree. The two
// devices sum their products in different orders.
func checkMuon(t *testing.T, dev tensor.Device) {
	for _, tc := range []struct {
		round  tensor.DType
		shards int
	}{{0, 1}, {tensor.BF16, 1}, {0, 2}, {tensor.BF16, 2}} {
		round := tc.round
		name := "f32"
		if round == tensor.BF16 {
			name = "bf16"
		}
		if tc.shards > 1 {
			name += fmt.Sprintf("_%d_shards", tc.shards)
		}
		t.Run(name, func(t *testing.T) {
			shapes := []struct {
				name  string
				parts []int
				shape []int
			}{
				{"emb", nil, []int{10, 16}},
				{"qkv", []int{24, 8, 8}, []int{16, 40}},
				{"proj", []int{16}, []int{24, 16}},
				{"gate_up", []int{40, 40}, []int{16, 80}},
			}
			r := tensor.NewRNG(11)
			var init [][]float32
			for _, s := range shapes {
				init = append(init, tensor.Randn(tensor.CPU, r, 0.2, s.shape...).Float32s())
			}
			var grads [][][]float32
			for range 3 {
				var gs [][]float32
				for _, s := range shapes {
					gs = append(gs, tensor.Randn(tensor.CPU, r, 1, s.shape...).Float32s())
				}
				grads = append(grads, gs)
			}
			run := func(d tensor.Device, shards int) [][]float32 {
				var out [][]float32
				err := tensor.Catch(func() {
					var ranks []*optim.Muon
					var params [][]*nn.Parameter
					for range shards {
						var ps []*nn.Parameter
						for i, s := range shapes {
							p := nn.NewParameter(s.name, tensor.FromFloat32s(d, init[i], s.shape...))
							p.Parts = s.parts
							ps = append(ps, p)
						}
						o, err := optim.NewMuon(ps, optim.AdamWConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1},
							optim.MuonConfig{LR: 0.05, Momentum: 0.95, WeightDecay: 0.1, Round: round})
						if err != nil {
							t.Fatal(err)
						}
						defer o.Free()
						if !o.Pack() {
							t.Fatal("not packed")
						}
						ranks, params = append(ranks, o), append(params, ps)
					}
					b := ranks[0].ShardBounds(shards)
					if shards > 1 {
						for k, o := range ranks {
							if !o.Shard(b[k], b[k+1]) || o.ShardMatrices() == o.Matrices() {
								t.Fatalf("shard %d of %v: refused, or holds all %d matrices", k, b, o.Matrices())
							}
						}
					}
					coef := tensor.Full(d, 0.7, 1)
					for step := range grads {
						gathered := make([]float32, b[shards])
						for k, o := range ranks {
							o.SetLR(1e-2 / float32(step+1))
							for i, p := range params[k] {
								p.T.Grad.SetFloat32s(grads[step][i])
							}
							o.StepSched(coef, nil)
							copy(gathered[b[k]:b[k+1]], o.PackedParams().Float32s()[b[k]:b[k+1]])
						}
						for _, o := range ranks { // the all-gather
							o.PackedParams().SetFloat32s(gathered)
						}
					}
					for _, p := range params[0] {
						out = append(out, p.T.Float32s())
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				return out
			}
			want, got := run(tensor.CPU, 1), run(dev, tc.shards)
			tol := 1e-5
			if round == tensor.BF16 {
				tol = 1e-3 // bf16 operands: the two round different sums
			}
			for i, s := range shapes {
				worst := 0.0
				for k := range want[i] {
					worst = max(worst, math.Abs(float64(got[i][k]-want[i][k])))
				}
				if !(worst <= tol) {
					t.Errorf("%s: %v's weights differ from the CPU's by %.3g (want ≤ %g)", s.name, dev, worst, tol)
				}
				t.Logf("%s: within %.3g of the CPU", s.name, worst)
			}
		})
	}
}

package kernels_test

import (
	"testing"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// TestLlamaFLOPs: the simulated GPU prices every kernel of llama.cu by its
// arithmetic (their bytes are Extent's, which TestEveryPointerHasAnExtent
// covers), and the formulas grow with the shape.
func TestLlamaFLOPs(t *testing.T) {
	n := 0
	for _, f := range cudakernels.Files() {
		if f.Name != "llama.cu" {
			continue
		}
		for _, k := range cudakernels.Kernels(f.Source) {
			n++
			small := kernels.FLOPs(k, func(string) float64 { return 2 })
			large := kernels.FLOPs(k, func(p string) float64 {
				if p == "chunkRows" {
					return 2
				}
				return 4
			})
			if !(small > 0) || !(large > small) || kernels.MovesData(k) || kernels.TensorCoreKernel(k) {
				t.Errorf("%s: %v FLOPs at sizes 2, %v at 4", k, small, large)
			}
		}
	}
	if n == 0 {
		t.Fatal("no llama.cu")
	}
	// QK-norm's work counts where its weights are given.
	args := map[string]float64{"B": 2, "T": 3, "H": 4, "KVH": 2, "HD": 8}
	plain := kernels.FLOPs("fleet_rotary_bf16", func(p string) float64 { return args[p] })
	args["qw"] = 1
	if withNorm := kernels.FLOPs("fleet_rotary_bf16", func(p string) float64 { return args[p] }); plain != 3*2*3*6*8 || withNorm != 7*2*3*6*8 {
		t.Errorf("rotary: %v FLOPs, %v with QK-norm", plain, withNorm)
	}
	// RMSNorm over 16·1024 rows of 768: 4 FLOPs an element.
	if got := kernels.FLOPs("fleet_rmsnorm_bf16", func(p string) float64 { return map[string]float64{"rows": 16384, "cols": 768}[p] }); got != 4*16384*768 {
		t.Errorf("rmsnorm: %v FLOPs", got)
	}
}

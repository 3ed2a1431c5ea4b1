package kernels_test

import (
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// Dropout on the attention probabilities (Attention.Drop, p 0.3, a mask
// offset into the batch) on the attention kernels, CUDA-core and
// tensor-core, held to the CPU backend's with the same mask, forward and
// backward (the whole launch sequence): the kernels draw each pair's factor where
// they use it, and a pair whose draw differed from the CPU's would move
// the output by a whole probability, far past the tolerances. Multi-head
// and grouped heads, T past one block.
func attnDropShapes(ps ...backend.Attention) []backend.Attention {
	for i := range ps {
		ps[i].Drop = backend.NewDropoutMask(0xfeed, 5, 2*int64(ps[i].H*ps[i].T*ps[i].T), 0.3)
	}
	return ps
}

var attnDropVariants = []attnVariant{
	{dt: backend.F32, suffix: "f32", tol: attnTolF32, shapes: attnDropShapes(
		backend.Attention{B: 2, T: 37, C: 32, H: 4},         // hd 8
		backend.Attention{B: 1, T: 70, C: 48, H: 2, KVH: 1}, // hd 24, two query blocks, multi-query
		backend.Attention{B: 1, T: 20, C: 288, H: 4},        // hd 72
	)},
	{dt: backend.BF16, mma: true, suffix: "mma32_bf16", tol: attnTolMMA, shapes: attnDropShapes(
		backend.Attention{B: 2, T: 17, C: 128, H: 4, KVH: 2},
	)},
	{dt: backend.BF16, mma: true, suffix: "mma64_bf16", tol: attnTolMMA, shapes: attnDropShapes(
		backend.Attention{B: 1, T: 70, C: 256, H: 4},
	)},
	{dt: backend.BF16, mma: true, suffix: "mma128_bf16", tol: attnTolMMA, shapes: attnDropShapes(
		backend.Attention{B: 1, T: 20, C: 384, H: 3},
	)},
}

func TestAttentionDropoutEmu(t *testing.T) {
	mods := map[string]*emu.Module{}
	for _, f := range cudakernels.Files() {
		if strings.HasPrefix(f.Name, "attention") {
			mods[f.Name] = emu.MustBuild(t, f)
		}
	}
	for _, v := range attnDropVariants {
		m := mods["attention.cu"]
		if v.mma {
			m = mods["attention_mma.cu"]
		}
		t.Run(v.suffix, func(t *testing.T) {
			t.Run("forward", func(t *testing.T) { testAttnForward(t, m, v) })
			t.Run("backward", func(t *testing.T) { testAttnBackward(t, m, v) })
		})
	}
}

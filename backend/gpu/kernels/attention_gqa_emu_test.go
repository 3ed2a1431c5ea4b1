package kernels_test

import (
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// Grouped-query attention (Attention.KVH < H) on the attention kernels,
// CUDA-core and tensor-core, held to the CPU backend's grouped attention
// with attention_emu_test.go's cases and tolerances: the forward pass,
// the backward pass (dk and dv summed over each key/value head's group,
// twice bit for bit under the parallel schedule) and, on the CUDA cores,
// the dk/dv kernel alone. The shapes cover every thread-group width of the
// CUDA-core kernels and every head padding of the tensor-core ones,
// multi-query attention (KVH 1), groups of 2 and 3, T past one block, and
// heads that are not a multiple of 8 wide (loaded element by element).

var attnGroupedVariants = []attnVariant{
	{dt: backend.F32, suffix: "f32", tol: attnTolF32, shapes: []backend.Attention{
		{B: 2, T: 37, C: 32, H: 4, KVH: 2},  // hd 8: one thread per row
		{B: 1, T: 70, C: 48, H: 2, KVH: 1},  // hd 24: two query blocks, multi-query
		{B: 1, T: 9, C: 15, H: 3, KVH: 1},   // hd 5
		{B: 1, T: 9, C: 192, H: 3, KVH: 1},  // hd 64: four threads per row
		{B: 1, T: 20, C: 288, H: 4, KVH: 2}, // hd 72: eight threads per row
	}},
	{dt: backend.BF16, suffix: "bf16", tol: attnTolBF16, shapes: []backend.Attention{
		{B: 2, T: 37, C: 32, H: 4, KVH: 2},
		{B: 1, T: 20, C: 288, H: 4, KVH: 2},
	}},
	{dt: backend.BF16, mma: true, suffix: "mma32_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 2, T: 17, C: 128, H: 4, KVH: 2}, // hd 32
		{B: 1, T: 9, C: 15, H: 3, KVH: 1},   // hd 5: no cp.async
	}},
	{dt: backend.BF16, mma: true, suffix: "mma64_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 1, T: 70, C: 256, H: 4, KVH: 2}, // hd 64, two query blocks, groups of 2
		{B: 1, T: 33, C: 108, H: 3, KVH: 1}, // hd 36: no cp.async
	}},
	{dt: backend.BF16, mma: true, suffix: "mma128_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 1, T: 20, C: 384, H: 3, KVH: 1}, // hd 128
	}},
	{dt: backend.F32, round: backend.BF16, mma: true, suffix: "mma64_f32", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 1, T: 17, C: 256, H: 4, KVH: 2},
	}},
	{dt: backend.F32, round: backend.F16, mma: true, suffix: "mma32f16_f32", tol: attnTolMMAF16, shapes: []backend.Attention{
		{B: 2, T: 17, C: 128, H: 4, KVH: 2},
	}},
}

// attnKVGroupedShapes are testAttnKV's grouped shapes: caches of KVH heads.
var attnKVGroupedShapes = []backend.AttentionKV{
	{B: 2, T: 3, C: 32, H: 4, KVH: 2, Pos: 5, MaxT: 12}, // hd 8, groups of 2
	{B: 1, T: 2, C: 72, H: 3, KVH: 1, Pos: 3, MaxT: 6},  // hd 24, multi-query
}

func TestGroupedAttentionEmu(t *testing.T) {
	mods := map[string]*emu.Module{}
	for _, f := range cudakernels.Files() {
		if strings.HasPrefix(f.Name, "attention") {
			mods[f.Name] = emu.MustBuild(t, f)
		}
	}
	for _, v := range attnGroupedVariants {
		m := mods["attention.cu"]
		if v.mma {
			m = mods["attention_mma.cu"]
		}
		t.Run(v.suffix, func(t *testing.T) {
			emu.RunSchedules(t, m, func(t *testing.T, m *emu.Module) {
				t.Run("forward", func(t *testing.T) { testAttnForward(t, m, v) })
				t.Run("backward", func(t *testing.T) { testAttnBackward(t, m, v) })
				if !v.mma { // the tensor cores' backward is one main kernel
					t.Run("dkdv", func(t *testing.T) { testAttnDKDV(t, m, v) })
				}
			})
		})
	}
	// testAttnKV runs attnKVGroupedShapes with the plain ones.
}

package kernels

import (
	"regexp"
	"strconv"
	"testing"

	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
)

// TestEveryKernelHasAFLOPsFormula holds every kernel of the embedded
// sources to a FLOPs formula, or to the list of kernels that do none, so
// that a new kernel cannot leave the simulated GPU pricing it at zero
// work by accident.
func TestEveryKernelHasAFLOPsFormula(t *testing.T) {
	n := 0
	for _, f := range cudakernels.Files() {
		sigs, err := cudakernels.ParseSignatures(f.Source)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sigs {
			n++
			mover := MovesData(s.Name)
			fl := FLOPs(s.Name, func(string) float64 { return 8 })
			switch {
			case mover && fl != 0:
				t.Errorf("%s moves data but has %g FLOPs", s.Name, fl)
			case !mover && fl <= 0:
				t.Errorf("%s has no FLOPs formula (add one to FLOPs, beside its launcher)", s.Name)
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d kernels found", n)
	}
	// A formula reads the launch's own arguments.
	args := map[string]float64{"B": 2, "T": 4, "C": 8, "H": 2}
	if got, want := FLOPs("fleet_attention_fwd_bf16", func(p string) float64 { return args[p] }), 2*2*10*(4*4+5.0); got != want {
		t.Errorf("attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	// The tensor-core kernels count their padded head (hd 4 runs at 32)
	// and their whole tiles: at T 4, each of a block's 4 warps computes
	// one 16×64 tile (16×32 for the forward pass at 128).
	if got, want := FLOPs("fleet_attention_fwd_mma32_bf16", func(p string) float64 { return args[p] }), 2*2*(4*16*64)*(4*32+5.0); got != want {
		t.Errorf("tensor-core attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	if got, want := FLOPs("fleet_attention_fwd_mma128f16_f32", func(p string) float64 { return args[p] }), 2*2*(4*16*32)*(4*128+5.0); got != want {
		t.Errorf("f16 tensor-core attention forward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	if !TensorCoreKernel("fleet_attention_bwd_mma64_bf16") || TensorCoreKernel("fleet_attention_bwd_dq_bf16") || TensorCoreKernel("fleet_attention_bwd_pre_bf16") {
		t.Errorf("TensorCoreKernel: only the _mma kernels are")
	}
	// The tensor cores' backward: at T 4 the block's one 64-query tile
	// (hd 4 padded to 32): Sᵀ, dPᵀ, dV and dK where a warp's first key is
	// below T (warp 0: 16 keys by 64 queries), dQ over the whole 64×64.
	if got, want := FLOPs("fleet_attention_bwd_mma32_bf16", func(p string) float64 { return args[p] }), 2*2*((16*64)*(8*32+5.0)+(64*64)*2*32); got != want {
		t.Errorf("tensor-core attention backward, B 2 T 4 C 8 H 2: %g FLOPs, want %g", got, want)
	}
	// GPT-2's shape: 10·hd a pair where the tile counts agree (every one
	// at hd 64), against the CUDA-core kernels' 14·hd.
	gpt := map[string]float64{"B": 1, "T": 1024, "C": 768, "H": 12}
	fa2 := FLOPs("fleet_attention_bwd_mma64_bf16", func(p string) float64 { return gpt[p] })
	two := 12 * MMAPairs("attention_fwd", 64, 1024) * (14*64 + 10)
	if got, want := fa2/two, (10*64+5.0)/(14*64+10); got != want {
		t.Errorf("tensor-core attention backward at GPT-2's shape: %.4f of two kernels' FLOPs, want %.4f", got, want)
	}
	if got := FLOPs("fleet_axpy_f32", func(p string) float64 { return map[string]float64{"n": 100}[p] }); got != 200 {
		t.Errorf("axpy of 100: %g FLOPs, want 200", got)
	}
}

// TestMMAPairs counts the score pairs the tensor-core kernels compute,
// worked out by hand from attention_mma.cu's loops: whole 16-row by BC
// tiles, the diagonal ones included.
func TestMMAPairs(t *testing.T) {
	for _, c := range []struct {
		op     string
		pad, T int
		want   float64
		why    string
	}{
		// 16 blocks of 64 queries; block i computes i+1 key tiles of 64
		// for each of its 4 warps: 4·16·64·(1+...+16).
		{"attention_fwd", 64, 1024, 4 * 16 * 64 * 136, "GPT-2's T 1024: 6.1% over T(T+1)/2 = 524800"},
		{"attention_bwd", 64, 1024, 4 * 16 * 64 * 136, "key block i sees 16-i query tiles"},
		{"attention_bwd_dq", 64, 1024, 64 * 64 * 136, "dq over the whole block, each tile it loads"},
		// One block; every warp, even those past T, computes its tile.
		{"attention_fwd", 64, 1, 4 * 16 * 64, "T 1"},
		// Backward: only warp 0 has a key below T; dq takes the whole
		// tile.
		{"attention_bwd", 64, 1, 16 * 64, "T 1"},
		{"attention_bwd_dq", 64, 1, 64 * 64, "T 1"},
		// 128: forward tiles of 32 keys. T 64: warp w computes the
		// tiles k0 <= 16w+15: 1, 1, 2, 2.
		{"attention_fwd", 128, 64, 16 * 32 * 6, "T 64 at 32-key tiles"},
		// 128: backward tiles of 16 queries. T 64: warp w sees the query
		// tiles from its own on, 4-w; dq takes 64 keys by 16 queries for
		// each of the 4 tiles.
		{"attention_bwd", 128, 64, 16 * 16 * 10, "T 64 at 16-query tiles"},
		{"attention_bwd_dq", 128, 64, 64 * 16 * 4, "T 64, dq at 16-query tiles"},
	} {
		if got := MMAPairs(c.op, c.pad, c.T); got != c.want {
			t.Errorf("%s, pad %d, T %d (%s): %g pairs, want %g", c.op, c.pad, c.T, c.why, got, c.want)
		}
	}
	if got := MMAPairs("attention_fwd", 64, 1024) / (1024 * 1025 / 2); got < 1.06 || got > 1.07 {
		t.Errorf("T 1024: %.4f of the causal pairs, want about 1.06", got)
	}
	if MMAPairs("attention_fwd", 48, 64) != 0 || MMAPairs("softmax", 64, 64) != 0 {
		t.Error("an unknown padding or op has pairs")
	}
}

// TestMMATilesMatchTheSource holds mmaTiles to attention_mma.cu's
// instantiations: FA_FWD(HDP, BCF, P) and FA_BWD(HDP, BQ, P) inside each
// kernel.
func TestMMATilesMatchTheSource(t *testing.T) {
	var src string
	for _, f := range cudakernels.Files() {
		if f.Name == "attention_mma.cu" {
			src = f.Source
		}
	}
	re := regexp.MustCompile(`\b(FA_FWD|FA_BWD)\((\d+), (\d+), \w+\)\s*\n\}`)
	ms := re.FindAllStringSubmatch(src, -1)
	if len(ms) < 18 {
		t.Fatalf("found %d instantiations in attention_mma.cu, want at least 18", len(ms))
	}
	for _, m := range ms {
		pad, _ := strconv.Atoi(m[2])
		bc, _ := strconv.Atoi(m[3])
		i := 1
		if m[1] == "FA_FWD" {
			i = 0
		}
		if tiles, ok := mmaTiles[pad]; !ok || tiles[i] != bc {
			t.Errorf("attention_mma.cu: %s(%d, %d, ...), but mmaTiles[%d] = %v", m[1], pad, bc, pad, mmaTiles[pad])
		}
	}
}

// TestEveryPointerHasAnExtent holds every pointer parameter of every
// kernel to an Extent, so that the simulated GPU charges each for what
// its launch moves, not for the allocation it points into; and checks a
// few against the traffic their kernels' comments state.
func TestEveryPointerHasAnExtent(t *testing.T) {
	for _, f := range cudakernels.Files() {
		sigs, err := cudakernels.ParseSignatures(f.Source)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sigs {
			for _, p := range s.Params {
				if p.Elem == "" {
					continue
				}
				n, passes, ok := Extent(s.Name, p.Name, func(string) float64 { return 8 })
				if !ok || n <= 0 || (passes != 1 && passes != 2) {
					t.Errorf("%s: pointer %s has no extent (%g elements, %g passes, %v): add it to Extent", s.Name, p.Name, n, passes, ok)
				}
			}
		}
	}
	args := map[string]float64{"rows": 16384, "cols": 768, "n": 16384, "dim": 768, "V": 50304, "beta": 1, "chunkRows": 1024}
	arg := func(p string) float64 { return args[p] }
	for _, c := range []struct {
		kernel, param string
		elems, passes float64
	}{
		{"fleet_layernorm_bf16", "w", 768, 1},            // a LayerNorm weight: its 768 floats, not the flat buffer's rest
		{"fleet_embedding_f32", "table", 16384 * 768, 1}, // a row per token, not the table
		{"fleet_embedding_backward_bf16", "dtable", 16384 * 768, 2},
		{"fleet_adamw_f32", "m", 16384, 2},
		{"fleet_adamw_f32", "grad", 16384, 1},
		{"fleet_colsum_f32", "dst", 768, 2}, // beta 1: read and written
		{"fleet_crossentropy_backward_bf16", "dlogits", 16384 * 50304, 1},
		{"fleet_layernorm_backward_bf16", "part", 2 * 16 * 768, 2}, // 16 chunks of 1024 rows, as the test's args say
		{"fleet_layernorm_backward_bf16", "done", 24, 2},
		{"fleet_cast_bf16_f32", "src", 16384, 1},
		{"fleet_fill_i32", "dst", 16384, 1},
	} {
		if n, passes, ok := Extent(c.kernel, c.param, arg); !ok || n != c.elems || passes != c.passes {
			t.Errorf("%s.%s: %g elements × %g (%v), want %g × %g", c.kernel, c.param, n, passes, ok, c.elems, c.passes)
		}
	}
	if _, _, ok := Extent("fleet_layernorm_bf16", "nope", arg); ok {
		t.Error("an unknown parameter has an extent")
	}
}

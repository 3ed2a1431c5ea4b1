package kernels_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/cpu" // the reference the kernels are held to
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
	"github.com/fleetml/fleet/internal/testenv"
)

// The attention kernels run under the CPU emulation harness and are held
// to the CPU backend on random inputs (never zero). Tolerances are
// normwise, ‖emu − cpu‖/‖cpu‖: 1e-5 for F32 (both sides accumulate in
// float32 in different orders, and the kernels use exp2 of pre-scaled
// scores where the CPU uses exp; the measured error is about 1e-7), 1e-2
// for BF16 storage against the CPU on the same bf16-rounded inputs
// (outputs are rounded to bf16, a relative 2^-9 each). A NaN or infinity
// anywhere fails. Every output buffer starts as NaN poison, so an element
// a kernel skips fails too, and the harness's guard regions catch any
// write past a buffer (all buffers are allocated at their exact sizes).
//
// The emulator runs every thread as an OS thread and every warp shuffle as
// a rendezvous, so shapes are small; they still cover T = 1, T past one
// 64-row block and past one 32-row tile, B = 2, and each thread-group width
// the kernels pick from the head size (1, 2, 4 and 8 threads per row for
// hd 8, 5, 12, 16; 24; 64; 72).
//
// The tensor-core kernels (attention_mma.cu) are held to the same CPU
// answer on the same bf16 inputs, with the tolerance derived from bf16's
// unit roundoff u = 2^-8 (8 significant bits, round to nearest). Beyond
// the inputs, which both sides share, an output meets at most three
// roundings to bf16, each at most u relative and of independent sign: the
// probabilities (out, dv) or dS (dq, dk) as operands of the last product,
// the products' other operand where it is itself computed (dS from P), and
// the stored result. Independent errors add in quadrature, so normwise
// about sqrt(3)·u = 6.8e-3 at worst; the tolerance is 2u = 7.8e-3, and the
// measured errors are at most 3.1e-3 (dqkv), 1.8e-3 (out). lse stays F32
// (1e-5): its sum takes the unrounded probabilities. With f16 operands
// (fp16's autocast; F32 storage, so no rounding of the results) the same
// argument gives 2u = 2^-10 = 9.8e-4 for f16's u = 2^-11; measured at
// most 2.4e-4. FLEET_ATTN_LOG=1 logs every measured error.

const (
	attnTolF32    = 1e-5
	attnTolBF16   = 1e-2
	attnTolMMA    = 2.0 / 256
	attnTolMMAF16 = 2.0 / 2048
)

var attnShapes = []backend.Attention{
	{B: 1, T: 1, C: 16, H: 2},  // hd 8, a single position
	{B: 2, T: 70, C: 32, H: 2}, // hd 16: two query blocks, three key tiles
	{B: 2, T: 37, C: 36, H: 3}, // hd 12
	{B: 1, T: 9, C: 15, H: 3},  // hd 5: odd, not a multiple of 4
	{B: 1, T: 33, C: 48, H: 2}, // hd 24: two threads per row
	{B: 1, T: 20, C: 64, H: 1}, // hd 64: four threads per row
	{B: 1, T: 9, C: 72, H: 1},  // hd 72: eight threads per row, 32-row blocks
}

// attnShapesBF16 is a subset: the BF16 kernels share the F32 code.
var attnShapesBF16 = []backend.Attention{attnShapes[0], attnShapes[1], attnShapes[4], attnShapes[6]}

var attnKVShapes = []backend.AttentionKV{
	{B: 2, T: 3, C: 32, H: 2, Pos: 5, MaxT: 12}, // hd 16, cache partly filled, room after
	{B: 1, T: 1, C: 72, H: 1, Pos: 7, MaxT: 9},  // hd 72: three dimensions per lane
	{B: 1, T: 4, C: 36, H: 3, Pos: 0, MaxT: 4},  // hd 12: prefill of the whole cache
}

// attentionCases are the emulation cases of attention.cu, one per kernel.
func attentionCases() map[string]emu.Case {
	cases := map[string]emu.Case{
		"fleet_attention_kv_f32":  func(t *testing.T, m *emu.Module) { testAttnKV(t, m, backend.F32) },
		"fleet_attention_kv_bf16": func(t *testing.T, m *emu.Module) { testAttnKV(t, m, backend.BF16) },
	}
	for _, v := range slices.Concat(attnVariants, attnVariantsF32) {
		cases["fleet_attention_fwd_"+v.suffix] = func(t *testing.T, m *emu.Module) { testAttnForward(t, m, v) }
		if v.mma {
			// The whole sequence: pre, this kernel, post.
			cases["fleet_attention_bwd_"+v.suffix] = func(t *testing.T, m *emu.Module) { testAttnBackward(t, m, v) }
			continue
		}
		cases["fleet_attention_bwd_dq_"+v.suffix] = func(t *testing.T, m *emu.Module) { testAttnBackward(t, m, v) }
		cases["fleet_attention_bwd_dkdv_"+v.suffix] = func(t *testing.T, m *emu.Module) { testAttnDKDV(t, m, v) }
	}
	// The tensor-core backward's first and last launches, alone.
	for _, c := range []struct {
		dt    backend.DType
		round backend.DType
		name  string
	}{
		{backend.BF16, 0, "bf16"}, {backend.F32, backend.BF16, "f32"}, {backend.F32, backend.F16, "f32"},
	} {
		v := attnVariant{dt: c.dt, round: c.round, mma: true, shapes: []backend.Attention{
			{B: 2, T: 70, C: 32, H: 2}, {B: 1, T: 9, C: 15, H: 3, KVH: 1},
		}}
		pre, post := "fleet_attention_bwd_pre_"+c.name, "fleet_attention_bwd_post_"+c.name
		prev, postv := cases[pre], cases[post]
		cases[pre] = func(t *testing.T, m *emu.Module) {
			if prev != nil {
				prev(t, m)
			}
			testAttnPre(t, m, v)
		}
		cases[post] = func(t *testing.T, m *emu.Module) {
			if postv != nil {
				postv(t, m)
			}
			testAttnPost(t, m, v)
		}
	}
	return cases
}

// attnVariant is one set of attention kernels under test: a storage
// dtype, and for BF16 whether the tensor-core kernels (attention_mma.cu)
// run, with the shapes that reach the instantiation named by suffix.
type attnVariant struct {
	dt     backend.DType
	round  backend.DType // Attention.Round
	mma    bool
	suffix string // the kernels' names end in it: "f32", "bf16", "mma64_bf16"
	shapes []backend.Attention
	tol    float64
}

var attnVariants = []attnVariant{
	{dt: backend.F32, suffix: "f32", shapes: attnShapes, tol: attnTolF32},
	{dt: backend.BF16, suffix: "bf16", shapes: attnShapesBF16, tol: attnTolBF16},
	// The tensor-core kernels, by head padding: the acceptance's T in
	// {1, 17, 64, 257} at hd 64 and 128; heads narrower than their padding
	// (zero columns), one past a single 64-row block, B and H above 1,
	// and heads that are not a multiple of 8 wide (copied element by
	// element, not by cp.async).
	{dt: backend.BF16, mma: true, suffix: "mma32_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 2, T: 17, C: 64, H: 2}, // hd 32
		{B: 1, T: 70, C: 16, H: 2}, // hd 8: two query blocks
		{B: 1, T: 9, C: 15, H: 3},  // hd 5, C 15: no cp.async
		{B: 1, T: 1, C: 24, H: 1},  // hd 24, a single position
	}},
	{dt: backend.BF16, mma: true, suffix: "mma64_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 1, T: 1, C: 64, H: 1},
		{B: 2, T: 17, C: 128, H: 2},
		{B: 1, T: 64, C: 64, H: 1},
		{B: 1, T: 257, C: 64, H: 1},
		{B: 1, T: 33, C: 36, H: 1}, // hd 36: no cp.async
	}},
	{dt: backend.BF16, mma: true, suffix: "mma128_bf16", tol: attnTolMMA, shapes: []backend.Attention{
		{B: 1, T: 1, C: 128, H: 1},
		{B: 1, T: 17, C: 256, H: 2},
		{B: 1, T: 64, C: 128, H: 1},
		{B: 1, T: 257, C: 128, H: 1},
		{B: 1, T: 20, C: 72, H: 1}, // hd 72
		{B: 1, T: 9, C: 200, H: 2}, // hd 100: no cp.async
	}},
}

// The same on F32 storage, with the products rounding to bf16 or f16
// (autocast): the loads round q, k, v and dout; results are f32. Fewer
// shapes, by head padding: the kernels are the bf16 ones but for the
// loads and the operand type.
var attnVariantsF32 = func() []attnVariant {
	shapes := []struct {
		pad    int
		shapes []backend.Attention
	}{
		{32, []backend.Attention{{B: 2, T: 17, C: 64, H: 2}, {B: 1, T: 9, C: 15, H: 3}}},
		{64, []backend.Attention{{B: 1, T: 1, C: 64, H: 1}, {B: 1, T: 257, C: 64, H: 1}, {B: 1, T: 33, C: 36, H: 1}}},
		{128, []backend.Attention{{B: 1, T: 70, C: 256, H: 2}, {B: 1, T: 9, C: 200, H: 2}}},
	}
	var vs []attnVariant
	for _, r := range []struct {
		round backend.DType
		infix string
		tol   float64
	}{{backend.BF16, "", attnTolMMA}, {backend.F16, "f16", attnTolMMAF16}} {
		for _, sh := range shapes {
			vs = append(vs, attnVariant{dt: backend.F32, round: r.round, mma: true, tol: r.tol, shapes: sh.shapes,
				suffix: fmt.Sprintf("mma%d%s_f32", sh.pad, r.infix)})
		}
	}
	return vs
}()

// TestAttentionEmu checks that every kernel of the attention files has a
// case, and runs each case under every schedule.
func TestAttentionEmu(t *testing.T) {
	cases := emu.Cases{}
	cases.Add(attentionCases())
	var files []cudakernels.File
	for _, f := range cudakernels.Files() {
		if strings.HasPrefix(f.Name, "attention") {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		t.Fatal("no attention kernel files")
	}
	cases.Run(t, files)
}

// attnRef is the CPU backend's answer for one shape.
type attnRef struct {
	qkv, dout      []float32 // inputs (bf16-rounded where the products round them)
	qkvIn, doutIn  []float32 // the inputs as the kernels get them
	out, lse, dqkv []float32
	D              []float32 // dout·out per score row, [B, H, T]
}

func attnCPU(t *testing.T, p backend.Attention, v attnVariant, seed uint64) attnRef {
	t.Helper()
	dt := v.dt
	c := attnCPUBackend(t)
	rng := rand.New(rand.NewPCG(seed, uint64(p.B*1000003+p.T*1009+p.C*31+p.H)))
	r := attnRef{qkv: emu.RandF32(rng, p.B*p.T*p.Width()), dout: emu.RandF32(rng, p.B*p.T*p.C)}
	r.qkvIn, r.doutIn = r.qkv, r.dout
	if rt := v.round; dt == backend.BF16 || rt != 0 {
		// The reference takes the inputs as the kernels' products see
		// them; the kernels get them as stored (F32 ones round them).
		if rt == 0 {
			rt = backend.BF16
		}
		r.qkv, r.dout = round(rt, r.qkv), round(rt, r.dout)
	}
	qkv, dout := attnCPUUpload(c, r.qkv), attnCPUUpload(c, r.dout)
	out, lse, dqkv := attnCPUAlloc(c, p.B*p.T*p.C), attnCPUAlloc(c, p.SavedLen()), attnCPUAlloc(c, len(r.qkv))
	c.Attention(p, out, lse, qkv)
	c.AttentionBackward(p, dqkv, dout, out, lse, qkv)
	r.out, r.lse, r.dqkv = attnCPUDownload(c, out, p.B*p.T*p.C), attnCPUDownload(c, lse, p.SavedLen()), attnCPUDownload(c, dqkv, len(r.qkv))
	for _, s := range []backend.Storage{qkv.S, dout.S, out.S, lse.S, dqkv.S} {
		c.Free(s)
	}
	// The BF16 backward kernels read out as stored, in bf16.
	if dt == backend.BF16 {
		r.out = round(backend.BF16, r.out)
	}
	hd := p.C / p.H
	r.D = make([]float32, p.SavedLen())
	for b := 0; b < p.B; b++ {
		for h := 0; h < p.H; h++ {
			for i := 0; i < p.T; i++ {
				o := (b*p.T+i)*p.C + h*hd
				var s float64
				for d := 0; d < hd; d++ {
					s += float64(r.dout[o+d]) * float64(r.out[o+d])
				}
				r.D[(b*p.H+h)*p.T+i] = float32(s)
			}
		}
	}
	return r
}

func testAttnForward(t *testing.T, m *emu.Module, v attnVariant) {
	dt := v.dt
	for _, p := range v.shapes {
		t.Run(attnName(p), func(t *testing.T) {
			p.Round = v.round
			r := attnCPU(t, p, v, 1)
			out, lse := devOut(dt, len(r.out)), emu.Poison(emu.F32, len(r.lse))
			l := &attnLauncher{m: m, mma: v.mma, only: "fleet_attention_fwd_" + v.suffix}
			if err := kernels.Attention(l, dt, p, out, lse, devIn(dt, r.qkvIn)); err != nil {
				t.Fatal(err)
			}
			if l.ran != 1 {
				t.Fatalf("%d launches of %s, want 1", l.ran, l.only)
			}
			attnCheckNorm(t, "out", devGet(out), r.out, v.tol)
			attnCheckNorm(t, "lse", lse.F32(), r.lse, attnTolF32)
		})
	}
}

// attnBwdKernels are the backward pass's launches for variant v: on the
// CUDA cores dq (which also writes D), then dk and dv; on the tensor cores
// D and the zeroed dq accumulator, the main kernel, then dq.
func attnBwdKernels(v attnVariant) []string {
	if !v.mma {
		return []string{"fleet_attention_bwd_dq_" + v.suffix, "fleet_attention_bwd_dkdv_" + v.suffix}
	}
	st := "f32"
	if v.dt == backend.BF16 {
		st = "bf16"
	}
	return []string{"fleet_attention_bwd_pre_" + st, "fleet_attention_bwd_" + v.suffix, "fleet_attention_bwd_post_" + st}
}

// testAttnBackward runs the whole backward launch sequence, checking after
// each launch that it wrote what it owns and nothing else (CUDA cores: dq
// and D, then dk and dv; tensor cores: D and the zeroed accumulator, then
// dk, dv and dq·sqrt(hd) in the accumulator, then dq), and at the end all
// of dqkv; then, under the parallel schedule, runs it again and requires
// bit-identical results. The CUDA-core kernels have no atomics and fixed
// reduction orders; the tensor-core kernel's dq atomics are repeatable
// here because the emulator runs blocks one at a time, in order, and one
// thread of a block adds each element (on a GPU the blocks' order, and so
// dq's bits, may change from run to run).
func testAttnBackward(t *testing.T, m *emu.Module, v attnVariant) {
	dt := v.dt
	for _, p := range v.shapes {
		t.Run(attnName(p), func(t *testing.T) {
			p.Round = v.round
			r := attnCPU(t, p, v, 2)
			qkv, dout, out, lse := devIn(dt, r.qkvIn), devIn(dt, r.doutIn), devIn(dt, r.out), emu.NewF32(r.lse)
			bht := p.B * p.H * p.T
			wq, wk, wv := attnThirds(p, r.dqkv)
			norm := attnNorm(r.dqkv)
			var first []float32
			// The serial schedules are repeatable by construction; the
			// parallel one interleaves threads as the OS likes, so that is
			// where a second run must match the first bit for bit.
			runs := 1
			if m.Schedule() == emu.Parallel {
				runs = 2
			}
			want := attnBwdKernels(v)
			for run := 0; run < runs; run++ {
				dqkv := devOut(dt, len(r.qkv))
				scratch := emu.Poison(emu.F32, kernels.AttentionBackwardScratch(p))
				l := &attnLauncher{m: m, mma: v.mma, after: func(kernel string) {
					if run != 0 {
						return
					}
					q, k, vv := attnThirds(p, devGet(dqkv))
					switch kernel {
					case want[0]:
						if v.mma {
							attnCheckPoison(t, "dq before the last kernel", q)
							attnCheckNorm(t, "D", scratch.F32()[:bht], r.D, attnTolF32)
							for i, x := range scratch.F32()[bht:] {
								if x != 0 {
									t.Fatalf("dq accumulator %d is %g after the first kernel, want 0", i, x)
								}
							}
						} else {
							attnCheckScaled(t, "dq (after the dq kernel)", q, wq, norm, v.tol)
							attnCheckNorm(t, "D", scratch.F32()[:bht], r.D, v.tol)
						}
						attnCheckPoison(t, "dk before the dkdv kernel", k)
						attnCheckPoison(t, "dv before the dkdv kernel", vv)
					case want[1]:
						if !v.mma {
							return
						}
						attnCheckPoison(t, "dq before the last kernel", q)
						attnCheckScaled(t, "dk (after the main kernel)", k, wk, norm, v.tol)
						attnCheckScaled(t, "dv (after the main kernel)", vv, wv, norm, v.tol)
						// The accumulator holds dq·sqrt(hd), [B, T, C].
						sc := math.Sqrt(float64(p.C / p.H))
						acc := make([]float32, len(wq))
						for i, x := range scratch.F32()[bht:] {
							acc[i] = float32(float64(x) / sc)
						}
						attnCheckScaled(t, "dq accumulator / sqrt(hd)", acc, wq, norm, v.tol)
					}
				}}
				if err := kernels.AttentionBackward(l, dt, p, dqkv, dout, out, lse, qkv, scratch); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(l.kernels, want) {
					t.Fatalf("launched %v, want %v", l.kernels, want)
				}
				got := devGet(dqkv)
				if run == 0 {
					first = got
					attnCheckNorm(t, "dqkv", got, r.dqkv, v.tol)
				} else if !testenv.SameBits(got, first) {
					t.Errorf("a second run of the backward pass gave different bits")
				}
			}
		})
	}
}

// testAttnDKDV launches the CUDA cores' dkdv kernel alone, with D
// computed here, and checks it writes the k and v attnThirds of dqkv and
// leaves the q third.
func testAttnDKDV(t *testing.T, m *emu.Module, v attnVariant) {
	dt := v.dt
	for _, p := range v.shapes {
		t.Run(attnName(p), func(t *testing.T) {
			p.Round = v.round
			r := attnCPU(t, p, v, 3)
			dqkv := devOut(dt, len(r.qkv))
			l := &attnLauncher{m: m, mma: v.mma, only: "fleet_attention_bwd_dkdv_" + v.suffix}
			err := kernels.AttentionBackward(l, dt, p, dqkv, devIn(dt, r.doutIn), devIn(dt, r.out), emu.NewF32(r.lse),
				devIn(dt, r.qkvIn), emu.NewF32(r.D))
			if err != nil {
				t.Fatal(err)
			}
			if l.ran != 1 {
				t.Fatalf("%d launches of %s, want 1", l.ran, l.only)
			}
			q, k, vv := attnThirds(p, devGet(dqkv))
			_, wk, wv := attnThirds(p, r.dqkv)
			attnCheckPoison(t, "dq (the dkdv kernel must not write it)", q)
			attnCheckScaled(t, "dk", k, wk, attnNorm(r.dqkv), v.tol)
			attnCheckScaled(t, "dv", vv, wv, attnNorm(r.dqkv), v.tol)
		})
	}
}

// testAttnPre launches the tensor-core backward's first kernel alone and
// checks D (against dout·out computed here in float64, dout rounded as
// the products round it) and that it zeroes the whole dq accumulator.
func testAttnPre(t *testing.T, m *emu.Module, v attnVariant) {
	for _, p := range v.shapes {
		t.Run(attnName(p), func(t *testing.T) {
			p.Round = v.round
			r := attnCPU(t, p, v, 5)
			bht := p.B * p.H * p.T
			scratch := emu.Poison(emu.F32, kernels.AttentionBackwardScratch(p))
			l := &attnLauncher{m: m, mma: true, only: attnBwdKernels(v)[0]}
			if err := kernels.AttentionBackward(l, v.dt, p, nil, devIn(v.dt, r.doutIn), devIn(v.dt, r.out), nil, nil, scratch); err != nil {
				t.Fatal(err)
			}
			if l.ran != 1 {
				t.Fatalf("%d launches of %s, want 1", l.ran, l.only)
			}
			attnCheckNorm(t, "D", scratch.F32()[:bht], r.D, attnTolF32)
			for i, x := range scratch.F32()[bht:] {
				if x != 0 {
					t.Fatalf("dq accumulator %d is %g, want 0", i, x)
				}
			}
		})
	}
}

// testAttnPost launches the tensor-core backward's last kernel alone on a
// random accumulator and checks q's third of dqkv, bit for bit: the
// accumulator times 1/sqrt(hd) in float32, rounded to the storage type;
// the k and v thirds stay poison.
func testAttnPost(t *testing.T, m *emu.Module, v attnVariant) {
	for _, p := range v.shapes {
		t.Run(attnName(p), func(t *testing.T) {
			p.Round = v.round
			rng := rand.New(rand.NewPCG(6, uint64(p.T)))
			bht, btc := p.B*p.H*p.T, p.B*p.T*p.C
			acc := emu.RandF32(rng, btc)
			s := make([]float32, bht+btc)
			for i := range bht {
				s[i] = float32(math.NaN()) // D: not read
			}
			copy(s[bht:], acc)
			dqkv := devOut(v.dt, p.B*p.T*p.Width())
			l := &attnLauncher{m: m, mma: true, only: attnBwdKernels(v)[2]}
			if err := kernels.AttentionBackward(l, v.dt, p, dqkv, nil, nil, nil, nil, emu.NewF32(s)); err != nil {
				t.Fatal(err)
			}
			if l.ran != 1 {
				t.Fatalf("%d launches of %s, want 1", l.ran, l.only)
			}
			sc := 1 / float32(math.Sqrt(float64(p.C/p.H)))
			want := make([]float32, btc)
			for i, x := range acc {
				want[i] = x * sc
			}
			if v.dt == backend.BF16 {
				want = round(backend.BF16, want)
			}
			q, k, vv := attnThirds(p, devGet(dqkv))
			if !testenv.SameBits(q, want) {
				t.Errorf("dq differs from the accumulator times 1/sqrt(hd)")
			}
			attnCheckPoison(t, "dk (the last kernel must not write it)", k)
			attnCheckPoison(t, "dv (the last kernel must not write it)", vv)
		})
	}
}

// testAttnKV fills the first Pos cache positions with random keys and
// values, poisons the rest, and checks out, the cache rows the call writes
// (bit for bit: they are copies) and that the rows past Pos+T stay poison.
func testAttnKV(t *testing.T, m *emu.Module, dt backend.DType) {
	c := attnCPUBackend(t)
	for _, p := range slices.Concat(attnKVShapes, attnKVGroupedShapes) {
		t.Run(fmt.Sprintf("B%d_T%d_C%d_H%d_KVH%d_Pos%d_MaxT%d", p.B, p.T, p.C, p.H, p.KVH, p.Pos, p.MaxT), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(4, uint64(p.B*1009+p.T*31+p.C+p.Pos*7)))
			kvc := p.C / p.H * p.KVHeads() // a cache row
			n := p.B * p.MaxT * kvc
			qkv, kc, vc := emu.RandF32(rng, p.B*p.T*(p.C+2*kvc)), emu.RandF32(rng, n), emu.RandF32(rng, n)
			if dt == backend.BF16 {
				qkv, kc, vc = round(backend.BF16, qkv), round(backend.BF16, kc), round(backend.BF16, vc)
			}
			// Only positions [0, Pos) of the caches hold data; the
			// kernel must write [Pos, Pos+T) and never read past that.
			kdev, vdev := slices.Clone(kc), slices.Clone(vc)
			nan := float32(math.NaN())
			for b := 0; b < p.B; b++ {
				for i := (b*p.MaxT + p.Pos) * kvc; i < (b+1)*p.MaxT*kvc; i++ {
					kdev[i], vdev[i] = nan, nan
				}
			}

			cq, ck, cv := attnCPUUpload(c, qkv), attnCPUUpload(c, kc), attnCPUUpload(c, vc)
			cout := attnCPUAlloc(c, p.B*p.T*p.C)
			c.AttentionKV(p, cout, cq, ck, cv)
			want := attnCPUDownload(c, cout, p.B*p.T*p.C)
			wk, wv := attnCPUDownload(c, ck, n), attnCPUDownload(c, cv, n)
			for _, s := range []backend.Storage{cq.S, ck.S, cv.S, cout.S} {
				c.Free(s)
			}

			out, kb, vb := devOut(dt, p.B*p.T*p.C), devIn(dt, kdev), devIn(dt, vdev)
			if err := kernels.AttentionKV(launcher{m, kernels.DefaultSMCount}, dt, p, out, devIn(dt, qkv), kb, vb); err != nil {
				t.Fatal(err)
			}
			tol := attnTolF32
			if dt == backend.BF16 {
				tol = attnTolBF16
			}
			attnCheckNorm(t, "out", devGet(out), want, tol)
			gk, gv := devGet(kb), devGet(vb)
			for b := 0; b < p.B; b++ {
				lo, mid, hi := b*p.MaxT*kvc, (b*p.MaxT+p.Pos+p.T)*kvc, (b+1)*p.MaxT*kvc
				if !testenv.SameBits(gk[lo:mid], wk[lo:mid]) || !testenv.SameBits(gv[lo:mid], wv[lo:mid]) {
					t.Errorf("batch %d: cache positions [0, %d) differ from the CPU's", b, p.Pos+p.T)
				}
				attnCheckPoison(t, "cache past Pos+T", gk[mid:hi])
				attnCheckPoison(t, "cache past Pos+T", gv[mid:hi])
			}
		})
	}
}

// attnLauncher launches on m, calling after(kernel) once each launch
// returns; when only is set, other kernels are skipped. It reports tensor
// cores where mma is set (kernels.TensorCorer), and counts and names the
// launches it ran.
type attnLauncher struct {
	m       *emu.Module
	mma     bool
	only    string
	after   func(kernel string)
	ran     int
	kernels []string
}

func (l *attnLauncher) TensorCores() bool { return l.mma }

func (l *attnLauncher) Launch(kernel string, grid, block [3]int, sharedBytes int, args kernels.Args[*emu.Buffer]) error {
	if l.only != "" && kernel != l.only {
		return nil
	}
	l.ran++
	l.kernels = append(l.kernels, kernel)
	if err := l.m.Launch(kernel, grid, block, sharedBytes, args.Values()...); err != nil {
		return err
	}
	if l.after != nil {
		l.after(kernel)
	}
	return nil
}

func attnName(p backend.Attention) string {
	if p.KVH != 0 {
		return fmt.Sprintf("B%d_T%d_C%d_H%d_KVH%d", p.B, p.T, p.C, p.H, p.KVH)
	}
	return fmt.Sprintf("B%d_T%d_C%d_H%d", p.B, p.T, p.C, p.H)
}

// attnThirds splits a [B, T, 3C] tensor into its q, k and v parts, each
// [B, T, C] (with grouped heads, q [B, T, C] and k and v [B, T, KVH·C/H]).
func attnThirds(p backend.Attention, x []float32) (q, k, v []float32) {
	w, kv := p.Width(), p.C/p.H*p.KVHeads()
	for r := 0; r < p.B*p.T; r++ {
		row := x[r*w : (r+1)*w]
		q = append(q, row[:p.C]...)
		k = append(k, row[p.C:p.C+kv]...)
		v = append(v, row[p.C+kv:]...)
	}
	return q, k, v
}

// attnCheckNorm fails t unless ‖got − want‖/‖want‖ <= tol and got is finite.
func attnCheckNorm(t *testing.T, what string, got, want []float32, tol float64) {
	t.Helper()
	attnCheckScaled(t, what, got, want, attnNorm(want), tol)
}

// attnCheckScaled fails t unless ‖got − want‖/scale <= tol and got is
// finite. A part of a result that is (nearly) zero by itself, such as dq and
// dk for T = 1, is measured against the norm of the whole result.
func attnCheckScaled(t *testing.T, what string, got, want []float32, scale, tol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d elements, want %d", what, len(got), len(want))
		return
	}
	var d2 float64
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			t.Errorf("%s: element %d is %v (want %v)", what, i, g, want[i])
			return
		}
		d := float64(g) - float64(want[i])
		d2 += d * d
	}
	if scale == 0 {
		t.Errorf("%s: the reference is all zeros", what)
		return
	}
	if e := math.Sqrt(d2) / scale; !(e <= tol) {
		t.Errorf("%s: normwise error %.3g, want <= %g", what, e, tol)
	}
	if os.Getenv("FLEET_ATTN_LOG") != "" {
		t.Logf("ERR %s %.3g", what, math.Sqrt(d2)/scale)
	}
}

func attnNorm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s)
}

// attnCheckPoison fails t unless every element is still NaN (never written).
func attnCheckPoison(t *testing.T, what string, x []float32) {
	t.Helper()
	for i, v := range x {
		if !math.IsNaN(float64(v)) {
			t.Errorf("%s: element %d was written (%v)", what, i, v)
			return
		}
	}
}

func attnCPUBackend(t *testing.T) backend.Backend {
	t.Helper()
	c, err := backend.Get(backend.CPU)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func attnCPUAlloc(c backend.Backend, n int) backend.Ref {
	return backend.Ref{S: c.Alloc(backend.F32, n)}
}

func attnCPUUpload(c backend.Backend, v []float32) backend.Ref {
	r := attnCPUAlloc(c, len(v))
	c.Upload(r, backend.AsBytes(v))
	return r
}

func attnCPUDownload(c backend.Backend, r backend.Ref, n int) []float32 {
	v := make([]float32, n)
	c.Download(backend.AsBytes(v), r)
	return v
}

// launchRecorder records launches instead of running them, on a device
// with tensor cores where cores is set.
type launchRecorder struct {
	cores         bool
	names         []string
	grids, blocks [][3]int
	nargs         []int
}

func (r *launchRecorder) TensorCores() bool { return r.cores }

func (r *launchRecorder) Launch(kernel string, grid, block [3]int, sharedBytes int, args kernels.Args[*emu.Buffer]) error {
	r.names = append(r.names, kernel)
	r.grids = append(r.grids, grid)
	r.blocks = append(r.blocks, block)
	r.nargs = append(r.nargs, args.Len())
	return nil
}

// TestAttentionLaunches checks the launch sequences and shapes (no
// emulator needed) and that bad shapes are refused before any launch.
func TestAttentionLaunches(t *testing.T) {
	// Arguments: the forward pass's 3 buffers and 5 sizes, the CUDA
	// cores' dq kernel's 6 buffers and 5 sizes (dkdv one buffer fewer),
	// the tensor cores' main backward kernel's 5 buffers and 5 sizes,
	// each with dropout's 6; the first backward launch's 3 buffers and 4
	// sizes, the last one's 2 and 5.
	const fwdArgs, dqArgs, dkdvArgs, mmaArgs, preArgs, postArgs = 14, 17, 16, 16, 7, 7
	for _, c := range []struct {
		p           backend.Attention
		grid, block [3]int
		pad         int    // the tensor-core kernels' head padding
		mmaGrid     [3]int // and their grid: (b, h) by 64-query blocks
		bwdGrid     [3]int // the main backward kernel's: 64-key blocks by (b, key/value head)
	}{
		{backend.Attention{B: 2, T: 70, C: 32, H: 2}, [3]int{4, 2, 1}, [3]int{64, 1, 1}, 32, [3]int{4, 2, 1}, [3]int{2, 4, 1}},             // hd 16
		{backend.Attention{B: 1, T: 64, C: 96, H: 3}, [3]int{3, 1, 1}, [3]int{128, 1, 1}, 32, [3]int{3, 1, 1}, [3]int{1, 3, 1}},            // hd 32
		{backend.Attention{B: 4, T: 1024, C: 768, H: 12}, [3]int{48, 16, 1}, [3]int{256, 1, 1}, 64, [3]int{48, 16, 1}, [3]int{16, 48, 1}},  // hd 64
		{backend.Attention{B: 1, T: 65, C: 256, H: 2}, [3]int{2, 3, 1}, [3]int{256, 1, 1}, 128, [3]int{2, 2, 1}, [3]int{2, 2, 1}},          // hd 128
		{backend.Attention{B: 1, T: 65, C: 144, H: 2}, [3]int{2, 3, 1}, [3]int{256, 1, 1}, 128, [3]int{2, 2, 1}, [3]int{2, 2, 1}},          // hd 72
		{backend.Attention{B: 3, T: 65, C: 256, H: 4, KVH: 2}, [3]int{12, 2, 1}, [3]int{256, 1, 1}, 64, [3]int{12, 2, 1}, [3]int{2, 6, 1}}, // hd 64, groups of 2
	} {
		// BF16 on a device with tensor cores: the mma kernels.
		m := &launchRecorder{cores: true}
		if err := kernels.Attention(m, backend.BF16, c.p, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := kernels.AttentionBackward(m, backend.BF16, c.p, nil, nil, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		mma := fmt.Sprintf("mma%d_bf16", c.pad)
		if want := []string{"fleet_attention_fwd_" + mma, "fleet_attention_bwd_pre_bf16", "fleet_attention_bwd_" + mma, "fleet_attention_bwd_post_bf16"}; !slices.Equal(m.names, want) {
			t.Fatalf("%v with tensor cores: launches %v, want %v", c.p, m.names, want)
		}
		for i := range m.names {
			want := c.mmaGrid
			if i == 2 {
				want = c.bwdGrid
			}
			if m.grids[i] != want || m.blocks[i] != [3]int{128, 1, 1} {
				t.Errorf("%v: %s grid %v block %v, want %v [128 1 1]", c.p, m.names[i], m.grids[i], m.blocks[i], want)
			}
		}
		if want := []int{fwdArgs, preArgs, mmaArgs, postArgs}; !slices.Equal(m.nargs, want) {
			t.Errorf("%v with tensor cores: argument counts %v, want %v", c.p, m.nargs, want)
		}
		// F32 whose products round to f16 (fp16's autocast): the f16 ones,
		// and the first backward launch says so (one more argument).
		h := &launchRecorder{cores: true}
		q := c.p
		q.Round = backend.F16
		if err := kernels.Attention(h, backend.F32, q, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := kernels.AttentionBackward(h, backend.F32, q, nil, nil, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		want := []string{fmt.Sprintf("fleet_attention_fwd_mma%df16_f32", c.pad), "fleet_attention_bwd_pre_f32", fmt.Sprintf("fleet_attention_bwd_mma%df16_f32", c.pad), "fleet_attention_bwd_post_f32"}
		if !slices.Equal(h.names, want) || h.nargs[1] != preArgs+1 {
			t.Errorf("%v, f16 products: launched %v (%v arguments), want %v", c.p, h.names, h.nargs, want)
		}
		// Without tensor cores, and for F32: the CUDA-core kernels.
		r := &launchRecorder{}
		if err := kernels.Attention(r, backend.BF16, c.p, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		if err := kernels.AttentionBackward(r, backend.F32, c.p, nil, nil, nil, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
		want = []string{"fleet_attention_fwd_bf16", "fleet_attention_bwd_dq_f32", "fleet_attention_bwd_dkdv_f32"}
		if !slices.Equal(r.names, want) {
			t.Errorf("%v: launches %v, want %v", c.p, r.names, want)
		}
		for i := range r.names {
			g := c.grid
			if i == 2 && c.p.KVH != 0 {
				g[0] = c.p.B * c.p.KVH // the dk/dv grid runs over the key/value heads
			}
			if r.grids[i] != g || r.blocks[i] != c.block {
				t.Errorf("%v: %s grid %v block %v, want %v %v", c.p, r.names[i], r.grids[i], r.blocks[i], g, c.block)
			}
		}
		if want := []int{fwdArgs, dqArgs, dkdvArgs}; !slices.Equal(r.nargs, want) {
			t.Errorf("%v: argument counts %v, want %v", c.p, r.nargs, want)
		}
		if n := kernels.AttentionBackwardScratch(c.p); n != c.p.B*c.p.H*c.p.T+c.p.B*c.p.T*c.p.C {
			t.Errorf("%v: scratch %d", c.p, n)
		}
	}
	r := &launchRecorder{}
	kv := backend.AttentionKV{B: 3, T: 5, C: 64, H: 4, Pos: 10, MaxT: 15}
	if err := kernels.AttentionKV(r, backend.F32, kv, nil, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	if r.names[0] != "fleet_attention_kv_f32" || r.grids[0] != [3]int{8, 1, 1} || r.blocks[0] != [3]int{256, 1, 1} {
		t.Errorf("KV launch %s grid %v block %v", r.names[0], r.grids[0], r.blocks[0])
	}

	r = &launchRecorder{}
	for _, err := range []error{
		kernels.Attention(r, backend.F16, backend.Attention{B: 1, T: 4, C: 8, H: 1}, nil, nil, nil),
		kernels.Attention(r, backend.F32, backend.Attention{B: 1, T: 4, C: 258, H: 2}, nil, nil, nil),
		kernels.Attention(r, backend.F32, backend.Attention{B: 1, T: 4, C: 10, H: 3}, nil, nil, nil),
		kernels.Attention(r, backend.F32, backend.Attention{B: 0, T: 4, C: 8, H: 1}, nil, nil, nil),
		kernels.AttentionBackward(r, backend.F32, backend.Attention{B: 1, T: 0, C: 8, H: 1}, nil, nil, nil, nil, nil, nil),
		kernels.AttentionKV(r, backend.F32, backend.AttentionKV{B: 1, T: 6, C: 8, H: 1, Pos: 10, MaxT: 15}, nil, nil, nil, nil),
		kernels.AttentionKV(r, backend.F32, backend.AttentionKV{B: 1, T: 1, C: 8, H: 1, Pos: -1, MaxT: 15}, nil, nil, nil, nil),
	} {
		if err == nil {
			t.Error("a bad call was accepted")
		}
	}
	if len(r.names) != 0 {
		t.Errorf("bad calls launched %v", r.names)
	}
}

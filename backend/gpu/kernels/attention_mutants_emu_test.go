package kernels_test

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// mmaSource is attention_mma.cu's source.
func mmaSource() string {
	for _, f := range cudakernels.Files() {
		if f.Name == "attention_mma.cu" {
			return f.Source
		}
	}
	return ""
}

// cutKernel is the kernel of src whose definition starts with first, to
// its closing brace.
func cutKernel(t *testing.T, src, first string) string {
	t.Helper()
	i := strings.Index(src, first)
	if i < 0 {
		t.Fatalf("attention_mma.cu has no %s", first)
	}
	end := strings.Index(src[i:], "\n}\n")
	if end < 0 {
		t.Fatalf("%s has no end", first)
	}
	return src[i : i+end+3]
}

// mmaDeviceCode is attention_mma.cu's device code: what comes before its
// first kernel, which must be fleet_attention_fwd_mma32_bf16 (so that no
// kernel is kept by the cuts below).
func mmaDeviceCode(t *testing.T, src string) string {
	t.Helper()
	const first = `extern "C" __global__ void fleet_attention_fwd_mma32_bf16(`
	i := strings.Index(src, first)
	if i < 0 {
		t.Fatalf("attention_mma.cu has no %s", first)
	}
	head := src[:i]
	if j := strings.Index(head, `extern "C"`); j >= 0 {
		t.Fatalf("a kernel before the first mma32 one, at %d: the cut would keep it", j)
	}
	return head
}

// mmaForwardOnly is attention_mma.cu cut to its device code and the one
// kernel fleet_attention_fwd_mma32_bf16: what the mutants change, built
// faster than the whole file.
func mmaForwardOnly(t *testing.T) string {
	t.Helper()
	src := mmaSource()
	return mmaDeviceCode(t, src) + cutKernel(t, src, `extern "C" __global__ void fleet_attention_fwd_mma32_bf16(`)
}

// normwiseError is ‖got − want‖ / ‖want‖, infinite where got holds a NaN
// or an infinity.
func normwiseError(got, want []float32) float64 {
	var d2 float64
	for i, g := range got {
		if math.IsNaN(float64(g)) || math.IsInf(float64(g), 0) {
			return math.Inf(1)
		}
		d := float64(g) - float64(want[i])
		d2 += d * d
	}
	return math.Sqrt(d2) / attnNorm(want)
}

// mutant is a change to attention_mma.cu: its one occurrence of from
// becomes to.
type mutant struct{ name, from, to string }

// checkMutants requires run (a kernel's normwise error against the CPU
// on src) to pass src as written (the control) and to catch every
// mutant of it: an error above attnTolMMA, or a failure to run.
func checkMutants(t *testing.T, src string, run func(src string) (float64, error), mutants []mutant) {
	t.Helper()
	e, err := run(src)
	if err != nil || !(e <= attnTolMMA) {
		t.Fatalf("the kernel as written: error %.3g (%v), want <= %g", e, err, attnTolMMA)
	}
	t.Logf("as written: normwise error %.3g", e)
	for _, mu := range mutants {
		if strings.Count(src, mu.from) != 1 {
			t.Fatalf("%s: attention_mma.cu has %d of %q, want 1", mu.name, strings.Count(src, mu.from), mu.from)
		}
		e, err := run(strings.Replace(src, mu.from, mu.to, 1))
		if err == nil && e <= attnTolMMA {
			t.Errorf("%s: the emulated check passed it (normwise error %.3g <= %g)", mu.name, e, attnTolMMA)
			continue
		}
		t.Logf("%s: caught: error %.3g, %v", mu.name, e, err)
	}
}

// mmaForwardError runs the forward kernel of src (built as
// attention_mma.cu) on shape p and returns its normwise error in out
// against the CPU, or why it could not run.
func mmaForwardError(t *testing.T, src string, p backend.Attention) (float64, error) {
	t.Helper()
	m, err := emu.BuildSource("attention_mma.cu", src)
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		return 0, err
	}
	v := attnVariant{dt: backend.BF16, mma: true, suffix: "mma32_bf16", tol: attnTolMMA}
	r := attnCPU(t, p, v, 1)
	out, lse := devOut(v.dt, len(r.out)), emu.Poison(emu.F32, len(r.lse))
	l := &attnLauncher{m: m.WithSchedule(emu.Forward), mma: true, only: "fleet_attention_fwd_mma32_bf16"}
	if err := kernels.Attention(l, v.dt, p, out, lse, devIn(v.dt, r.qkvIn)); err != nil {
		return 0, err
	}
	if l.ran != 1 {
		return 0, fmt.Errorf("%d launches of the forward kernel, want 1", l.ran)
	}
	return normwiseError(devGet(out), r.out), nil
}

// TestAttentionMMAMutants breaks attention_mma.cu's forward kernel the
// ways a FlashAttention kernel goes wrong, and requires the emulated
// attention check (the CPU's answer, attnTolMMA) to catch each: the
// probabilities' A fragment with its registers 1 and 2 swapped, the causal
// mask taking the wrong row for a lane's second row, and the online
// softmax's rescale of the output accumulators one tile short. The kernel
// as written passes the same check (the control), so a mutant that fails
// fails for its fault. T 128 at hd 32: two query blocks, the second over
// two key tiles, so the rescale runs with maxima that move.
func TestAttentionMMAMutants(t *testing.T) {
	p := backend.Attention{B: 1, T: 128, C: 32, H: 1}
	run := func(src string) (float64, error) { return mmaForwardError(t, src, p) }
	checkMutants(t, mmaForwardOnly(t), run, []mutant{
		{"swapped fragments (A registers 1 and 2 of P·V)",
			"unsigned af[4] = {fa_pack<P>(p[2 * kk][0], p[2 * kk][1]), fa_pack<P>(p[2 * kk][2], p[2 * kk][3]),\n\t\t\tfa_pack<P>(p[2 * kk + 1][0], p[2 * kk + 1][1]),",
			"unsigned af[4] = {fa_pack<P>(p[2 * kk][0], p[2 * kk][1]), fa_pack<P>(p[2 * kk + 1][0], p[2 * kk + 1][1]),\n\t\t\tfa_pack<P>(p[2 * kk][2], p[2 * kk][3]),"},
		{"causal mask on the wrong row", "int qi = wq + g + 8 * r;\n\t\t\t\tfloat mx", "int qi = wq + g;\n\t\t\t\tfloat mx"},
		{"online softmax rescale one tile short", "for (int j = 0; j < HDP / 8; j++) {\n\t\t\t\t\to[j][2 * r] *= alpha;", "for (int j = 0; j < HDP / 8 - 1; j++) {\n\t\t\t\t\to[j][2 * r] *= alpha;"},
	})
}

// mmaBackwardOnly is attention_mma.cu cut to its device code and the
// kernels of the bf16 backward pass at head padding 32: the first and
// last launches and fleet_attention_bwd_mma32_bf16.
func mmaBackwardOnly(t *testing.T) string {
	t.Helper()
	src := mmaSource()
	return mmaDeviceCode(t, src) + cutKernel(t, src, `extern "C" __global__ void fleet_attention_bwd_pre_bf16(`) +
		cutKernel(t, src, `extern "C" __global__ void fleet_attention_bwd_mma32_bf16(`) +
		cutKernel(t, src, `extern "C" __global__ void fleet_attention_bwd_post_bf16(`)
}

// mmaBackwardError runs the backward pass of src (built as
// attention_mma.cu) on shape p and returns its normwise error in dqkv
// against the CPU, or why it could not run.
func mmaBackwardError(t *testing.T, src string, p backend.Attention) (float64, error) {
	t.Helper()
	m, err := emu.BuildSource("attention_mma.cu", src)
	if errors.Is(err, emu.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		return 0, err
	}
	v := attnVariant{dt: backend.BF16, mma: true, suffix: "mma32_bf16", tol: attnTolMMA}
	r := attnCPU(t, p, v, 2)
	dqkv := devOut(v.dt, len(r.qkv))
	l := &attnLauncher{m: m.WithSchedule(emu.Forward), mma: true}
	err = kernels.AttentionBackward(l, v.dt, p, dqkv, devIn(v.dt, r.doutIn), devIn(v.dt, r.out), emu.NewF32(r.lse), devIn(v.dt, r.qkvIn),
		emu.Poison(emu.F32, kernels.AttentionBackwardScratch(p)))
	if err != nil {
		return 0, err
	}
	return normwiseError(devGet(dqkv), r.dqkv), nil
}

// TestAttentionMMABackwardMutants breaks the tensor-core backward kernel
// where its dq differs from the two-kernel split it replaced, and
// requires the emulated check to catch each: dS written to shared memory
// untransposed, the dq product one 16-key slice short, and the warps with
// nothing to do leaving their columns of dS unwritten (the emulator's
// poison then reaches dq). The kernel as written passes (the control).
// T 100 at hd 32: two key blocks, the first over two query tiles, the
// second with its last two warps' keys all past T (idle).
func TestAttentionMMABackwardMutants(t *testing.T) {
	p := backend.Attention{B: 1, T: 100, C: 32, H: 1}
	run := func(src string) (float64, error) { return mmaBackwardError(t, src, p) }
	checkMutants(t, mmaBackwardOnly(t), run, []mutant{
		{"dS untransposed", "sdS[qc * LDS + 16 * warp + g + 8 * (e >> 1)] = P::h(ds[j][e]);", "sdS[(16 * warp + g + 8 * (e >> 1)) * LDS + qc] = P::h(ds[j][e]);"},
		{"dq product a slice short", "for (int kk = 0; kk < FA_ROWS; kk += 16) {\n\t\t\t\tunsigned af[4];\n\t\t\t\tfa_ldA<LDS>", "for (int kk = 0; kk < FA_ROWS - 16; kk += 16) {\n\t\t\t\tunsigned af[4];\n\t\t\t\tfa_ldA<LDS>"},
		{"idle warps' dS unwritten", "sdS[(8 * j + 2 * t + (e & 1)) * LDS + 16 * warp + g + 8 * (e >> 1)] = 0;", ";"},
	})
}

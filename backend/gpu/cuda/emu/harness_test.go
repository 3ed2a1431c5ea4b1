package emu_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// harness returns the module of testdata/harness.cu (built once: Build
// caches).
func harness(t *testing.T) *emu.Module {
	t.Helper()
	return testModule(t, "harness.cu")
}

func TestBuiltinIDs(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		grid, block := [3]int{2, 3, 2}, [3]int{4, 2, 3}
		nb, nt := 2*3*2, 4*2*3
		out := emu.Poison(emu.I32, 12*nb*nt)
		if err := m.Launch("fleet_test_ids", grid, block, 0, out); err != nil {
			t.Fatal(err)
		}
		got := out.I32()
		g := 0
		for bz := range 2 {
			for by := range 3 {
				for bx := range 2 {
					for tz := range 3 {
						for ty := range 2 {
							for tx := range 4 {
								want := []int32{int32(tx), int32(ty), int32(tz), int32(bx), int32(by), int32(bz), 4, 2, 3, 2, 3, 2}
								for k, w := range want {
									if got[12*g+k] != w {
										t.Fatalf("thread %d: field %d is %d, want %d (all: %v)", g, k, got[12*g+k], w, got[12*g:12*g+12])
									}
								}
								g++
							}
						}
					}
				}
			}
		}
	})
}

func TestScheduleOrder(t *testing.T) {
	m := harness(t)
	const grid, block = 2, 64
	run := func(s emu.Schedule) []int32 {
		ticket, out := emu.Zeros(emu.I32, 1), emu.Poison(emu.I32, grid*block)
		if err := m.WithSchedule(s).Launch("fleet_test_order", emu.Dim(grid), emu.Dim(block), 0, ticket, out); err != nil {
			t.Fatal(err)
		}
		return out.I32()
	}
	fwd, rev, par := run(emu.Forward), run(emu.Reverse), run(emu.Parallel)
	for b := range grid {
		for tid := range block {
			g := b*block + tid
			if fwd[g] != int32(g) {
				t.Errorf("forward: thread %d of block %d ran %d-th, want %d-th", tid, b, fwd[g], g)
			}
			if want := int32(b*block + block - 1 - tid); rev[g] != want {
				t.Errorf("reverse: thread %d of block %d ran %d-th, want %d-th", tid, b, rev[g], want)
			}
			// Blocks run one at a time, in order, in every schedule.
			if par[g]/block != int32(b) {
				t.Errorf("parallel: thread %d of block %d ran %d-th, not among its block", tid, b, par[g])
			}
		}
	}
}

// blockSums is the reference for the block-sum kernels: what each block of
// a grid-stride loop visits, summed in float64, and the sum of magnitudes
// (for the tolerance).
func blockSums(x []float32, grid, block int) (sum, mag []float64) {
	sum, mag = make([]float64, grid), make([]float64, grid)
	for i, v := range x {
		b := i % (grid * block) / block
		sum[b] += float64(v)
		mag[b] += math.Abs(float64(v))
	}
	return sum, mag
}

// checkSum launches a block-sum kernel (of harness.cu or mutants.cu) and
// compares each block's result with the reference. It returns an error
// when the launch fails or a sum is wrong: either is the harness catching a
// fault.
func checkSum(m *emu.Module, kernel string, x []float32, grid, block, shared int) error {
	out := emu.Poison(emu.F32, grid)
	if err := m.Launch(kernel, emu.Dim(grid), emu.Dim(block), shared, emu.NewF32(x), out, len(x)); err != nil {
		return err
	}
	sum, mag := blockSums(x, grid, block)
	got := out.F32()
	for b := range got {
		if d := math.Abs(float64(got[b]) - sum[b]); !(d <= 1e-5*mag[b]+1e-6) {
			return fmt.Errorf("block %d: sum %v, want %v", b, got[b], sum[b])
		}
	}
	return nil
}

var sumShapes = []struct{ n, grid, block int }{
	{1, 1, 32}, {100, 1, 64}, {1000, 3, 256}, {4099, 2, 128}, {777, 5, 32}, {256, 1, 256},
}

func TestBlockSumStaticShared(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		for _, s := range sumShapes {
			x := emu.RandF32(rand.New(rand.NewPCG(uint64(s.n), 1)), s.n)
			if err := checkSum(m, "fleet_test_block_sum", x, s.grid, s.block, 0); err != nil {
				t.Errorf("n=%d grid=%d block=%d: %v", s.n, s.grid, s.block, err)
			}
		}
	})
}

func TestBlockSumWarpShuffles(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		for _, s := range append(sumShapes, struct{ n, grid, block int }{500, 2, 96}) {
			x := emu.RandF32(rand.New(rand.NewPCG(uint64(s.n), 2)), s.n)
			if err := checkSum(m, "fleet_test_warp_block_sum", x, s.grid, s.block, 4*s.block/32); err != nil {
				t.Errorf("n=%d grid=%d block=%d: %v", s.n, s.grid, s.block, err)
			}
		}
	})
}

func TestEarlyReturnDropsOutOfBarrier(t *testing.T) {
	emu.RunSchedules(t, harness(t).WithTimeout(20*time.Second), func(t *testing.T, m *emu.Module) {
		for _, s := range []struct{ n, block int }{{1, 64}, {100, 64}, {300, 128}, {256, 256}} {
			grid := (s.n + s.block - 1) / s.block
			x := emu.RandF32(rand.New(rand.NewPCG(uint64(s.n), 3)), s.n)
			if err := checkSum(m, "fleet_test_early_exit_sum", x, grid, s.block, 0); err != nil {
				t.Errorf("n=%d block=%d: %v", s.n, s.block, err)
			}
		}
	})
}

// warpModel is the Go model of fleet_test_warp_ops over full warps.
func warpModel(in []int32, width int) []int32 {
	n := len(in)
	out := make([]int32, 9*n)
	count := int32(0)
	for _, v := range in {
		count += v & 1
	}
	for t := range n {
		lane, base := t%32, t-t%32
		seg := lane &^ (width - 1)
		own := in[t]
		src := func(l int, ok bool) int32 {
			if !ok {
				return own
			}
			return in[base+l]
		}
		o := out[9*t:]
		o[0] = src(seg+(lane*7+3)&(width-1), true)
		o[1] = src(lane-3, lane-3 >= seg)
		o[2] = src(lane+5, lane+5 <= seg+width-1)
		o[3] = src(lane^6, lane^6 <= seg+width-1)
		var ballot uint32
		anyBig, all := int32(0), int32(1)
		for l := range 32 {
			v := in[base+l]
			if v&1 != 0 {
				ballot |= 1 << l
			}
			if v > 1000 {
				anyBig = 1
			}
			if v < 0 {
				all = 0
			}
		}
		o[4], o[5], o[6], o[7], o[8] = int32(ballot), anyBig, all, count, own
	}
	return out
}

func TestWarpOps(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		rng := rand.New(rand.NewPCG(4, 4))
		in := make([]int32, 64)
		for i := range in {
			in[i] = rng.Int32N(2000) - 10
		}
		for _, width := range []int{32, 16, 8, 4, 2, 1} {
			out := emu.Poison(emu.I32, 9*len(in))
			if err := m.Launch("fleet_test_warp_ops", emu.Dim(1), emu.Dim(len(in)), 0, emu.NewI32(in), out, int32(width)); err != nil {
				t.Fatal(err)
			}
			got, want := out.I32(), warpModel(in, width)
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("width %d: thread %d result %d is %d, want %d", width, i/9, i%9, got[i], want[i])
				}
			}
		}
	})
}

func TestPartialMaskShuffle(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		in := emu.RandF32(rand.New(rand.NewPCG(5, 5)), 64)
		out := emu.Poison(emu.F32, 64)
		if err := m.Launch("fleet_test_half_warp", emu.Dim(1), emu.Dim(64), 0, emu.NewF32(in), out); err != nil {
			t.Fatal(err)
		}
		want := append([]float32(nil), in...)
		for w := 0; w < 64; w += 32 {
			var s float64
			for l := range 16 {
				s += float64(in[w+l])
			}
			for l := range 16 {
				want[w+l] = float32(s)
			}
		}
		if err := emu.AllClose(out.F32(), want, 1e-5, 1e-6); err != nil {
			t.Error(err)
		}
	})
}

func TestAtomics(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		const n = 3000
		x := emu.RandF32(rand.New(rand.NewPCG(6, 6)), n)
		sum, imax, count := emu.Zeros(emu.F32, 1), emu.NewI32([]int32{math.MinInt32}), emu.Zeros(emu.U32, 1)
		fmax, last := emu.NewF32([]float32{float32(math.Inf(-1))}), emu.NewI32([]int32{-1})
		if err := m.Launch("fleet_test_atomics", emu.Dim(4), emu.Dim(128), 0, emu.NewF32(x), sum, imax, count, fmax, last, n); err != nil {
			t.Fatal(err)
		}
		var wantSum, mag float64
		wantIMax, wantFMax := int32(math.MinInt32), float32(math.Inf(-1))
		for _, v := range x {
			wantSum += float64(v)
			mag += math.Abs(float64(v))
			wantIMax = max(wantIMax, int32(v*1000))
			wantFMax = max(wantFMax, v)
		}
		if got := float64(sum.F32()[0]); math.Abs(got-wantSum) > 1e-5*mag {
			t.Errorf("atomicAdd float: %v, want %v", got, wantSum)
		}
		if got := imax.I32()[0]; got != wantIMax {
			t.Errorf("atomicMax int: %d, want %d", got, wantIMax)
		}
		if got := count.U32()[0]; got != n {
			t.Errorf("atomicAdd unsigned: %d, want %d", got, n)
		}
		if got := fmax.F32()[0]; got != wantFMax {
			t.Errorf("atomicCAS float max: %v, want %v", got, wantFMax)
		}
		if got := last.I32()[0]; got < 0 || got >= n {
			t.Errorf("atomicExch: %d, not an index", got)
		}
	})
}

// bf16RNE is the reference float32 to bf16 conversion: round to nearest
// even, NaN kept quiet.
func bf16RNE(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

func TestBF16Helpers(t *testing.T) {
	m := harness(t)
	x := emu.RandF32(rand.New(rand.NewPCG(7, 7)), 200)
	x = append(x, 0, float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		math.Float32frombits(0x3f808000), math.Float32frombits(0x3f818000), // ties to even, down and up
		math.Float32frombits(0x00000001), math.MaxFloat32, math.Float32frombits(0x7f7fffff))
	n := len(x)
	h, back := emu.Poison(emu.U16, n), emu.Poison(emu.F32, n)
	if err := m.Launch("fleet_test_bf16", emu.Dim(2), emu.Dim(64), 0, emu.NewF32(x), h, back, n); err != nil {
		t.Fatal(err)
	}
	gotH, gotBack := h.U16(), back.F32()
	for i, v := range x {
		want := bf16RNE(v)
		if gotH[i] != want {
			t.Errorf("bf16(%v = %#08x) = %#04x, want %#04x", v, math.Float32bits(v), gotH[i], want)
		}
		if wantBack := math.Float32frombits(uint32(want) << 16); math.Float32bits(gotBack[i]) != math.Float32bits(wantBack) {
			t.Errorf("f32(bf16 %#04x) = %v, want %v", want, gotBack[i], wantBack)
		}
	}
}

func TestMathIntrinsics(t *testing.T) {
	m := harness(t)
	const n = 100
	x := emu.RandF32(rand.New(rand.NewPCG(8, 8)), n)
	for i := range x {
		x[i] = float32(math.Abs(float64(x[i])))
	}
	out := emu.Poison(emu.F32, 8*n)
	if err := m.Launch("fleet_test_math", emu.Dim(1), emu.Dim(64), 0, emu.NewF32(x), out, int32(n)); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, 8*n)
	for i, v := range x {
		f := float64(v)
		w := want[8*i:]
		w[0], w[1], w[2], w[3] = float32(math.Exp(f)), float32(math.Log(f)), float32(math.Tanh(f)), float32(1/math.Sqrt(f))
		w[4], w[5], w[6] = float32(1/f), float32(f*f+1), float32(min(i, 5)+max(i, 5))
		w[7] = v
	}
	if err := emu.AllClose(out.F32(), want, 1e-6, 1e-7); err != nil {
		t.Error(err)
	}
}

func TestLargestBlock(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		out := emu.Poison(emu.I32, 1024)
		if err := m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1024), 0, out); err != nil {
			t.Fatal(err)
		}
		for i, v := range out.I32() {
			if v != int32(i) {
				t.Fatalf("out[%d] = %d", i, v)
			}
		}
	})
}

func TestDynamicSharedMemory(t *testing.T) {
	m := harness(t)
	const block = 64
	out := emu.Poison(emu.F32, block)
	if err := m.Launch("fleet_test_smem_bytes", emu.Dim(1), emu.Dim(block), 4*block, out, int32(block)); err != nil {
		t.Fatal(err)
	}
	for i, v := range out.F32() {
		if v != float32(block-1-i) {
			t.Fatalf("out[%d] = %v, want %d", i, v, block-1-i)
		}
	}
	// One float too few: thread 63 writes past the end.
	err := m.Launch("fleet_test_smem_bytes", emu.Dim(1), emu.Dim(block), 4*block-4, out, int32(block))
	if err == nil || !strings.Contains(err.Error(), "dynamic shared memory out of bounds at byte 252") {
		t.Errorf("shared memory overrun: got %v", err)
	}
}

func TestLaunchErrors(t *testing.T) {
	m := harness(t)
	out := emu.Zeros(emu.I32, 1024)
	f32 := emu.Zeros(emu.F32, 4)
	for _, c := range []struct {
		name, want string
		launch     func() error
	}{
		{"unknown kernel", `no kernel "fleet_nope"`, func() error { return m.Launch("fleet_nope", emu.Dim(1), emu.Dim(1), 0) }},
		{"argument count", "takes 1 arguments (int* out), got 2", func() error {
			return m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1), 0, out, out)
		}},
		{"buffer type", "parameter 1 (int* out): got a F32[4] buffer (float*), want int*", func() error {
			return m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1), 0, f32)
		}},
		{"scalar type", "parameter 4 (long long n): got float32(1), want int64", func() error {
			return m.Launch("fleet_test_bf16", emu.Dim(1), emu.Dim(1), 0, f32, emu.Zeros(emu.U16, 4), f32, float32(1))
		}},
		{"scalar for pointer", "parameter 1 (float* x): got int32, want a *emu.Buffer", func() error {
			return m.Launch("fleet_test_block_sum", emu.Dim(1), emu.Dim(32), 0, int32(1), f32, 4)
		}},
		{"int out of range", "does not fit int", func() error {
			return m.Launch("fleet_test_warp_ops", emu.Dim(1), emu.Dim(32), 0, out, out, 1<<40)
		}},
		{"empty grid", "must be at least 1", func() error {
			return m.Launch("fleet_test_wide_block", emu.Dim(0), emu.Dim(32), 0, out)
		}},
		{"block too large", "has 1056 threads", func() error {
			return m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(33, 32), 0, out)
		}},
		{"block z too large", "exceeds (1024,1024,64)", func() error {
			return m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1, 1, 65), 0, out)
		}},
		{"shared memory over 48 KiB", "over the 49152 allowed", func() error {
			return m.Launch("fleet_test_smem_bytes", emu.Dim(1), emu.Dim(32), 48<<10+4, f32, int32(32))
		}},
	} {
		err := c.launch()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error containing %q", c.name, err, c.want)
		}
	}
	freed := emu.Zeros(emu.I32, 4)
	freed.Free()
	if err := m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1), 0, freed); err == nil || !strings.Contains(err.Error(), "freed") {
		t.Errorf("freed buffer: got %v", err)
	}
}

func TestOptInSharedMemory(t *testing.T) {
	// The opt-in is a property of the kernel (shared by every Module of
	// harness.cu): undo it at the end.
	m := harness(t)
	big := 64 << 10
	out := emu.Poison(emu.F32, 32)
	if err := m.SetMaxDynamicShared("fleet_test_smem_bytes", big); err != nil {
		t.Fatal(err)
	}
	defer m.SetMaxDynamicShared("fleet_test_smem_bytes", 0)
	if err := m.Launch("fleet_test_smem_bytes", emu.Dim(1), emu.Dim(32), big, out, int32(big/4)); err != nil {
		t.Fatal(err)
	}
	if err := m.SetMaxDynamicShared("fleet_test_smem_bytes", 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := m.Launch("fleet_test_smem_bytes", emu.Dim(1), emu.Dim(32), 300<<10, out, int32(32)); err == nil || !strings.Contains(err.Error(), "no GPU gives") {
		t.Errorf("300 KiB of shared memory: got %v", err)
	}
}

func TestScalarTypes(t *testing.T) {
	m := harness(t)
	out := emu.Poison(emu.I64, 7)
	if err := m.Launch("fleet_test_types", emu.Dim(1), emu.Dim(1), 0, out,
		int32(-7), uint32(4000000000), int64(-1)<<40, uint64(1)<<62, float32(2.5), float64(-0.25), nil); err != nil {
		t.Fatal(err)
	}
	want := []int64{-7, 4000000000, -1 << 40, 1 << 62, 10, -1, 1}
	for i, g := range out.I64() {
		if g != want[i] {
			t.Errorf("out[%d] = %d, want %d", i, g, want[i])
		}
	}
	// A Go int fits any integer parameter; any buffer fits void*.
	if err := m.Launch("fleet_test_types", emu.Dim(1), emu.Dim(1), 0, out, 1, 2, 3, 4, float32(0), float64(0), emu.Zeros(emu.U8, 3)); err != nil {
		t.Fatal(err)
	}
	if got := out.I64(); got[0] != 1 || got[3] != 4 || got[6] != 0 {
		t.Errorf("got %v", got)
	}
}

func TestDeadlockIsReported(t *testing.T) {
	emu.RunSchedules(t, harness(t).WithTimeout(20*time.Second), func(t *testing.T, m *emu.Module) {
		err := m.Launch("fleet_test_deadlock", emu.Dim(2), emu.Dim(64), 0, emu.Zeros(emu.I32, 64))
		if err == nil || !strings.Contains(err.Error(), "deadlock in block (0,0,0)") {
			t.Fatalf("got %v, want a deadlock", err)
		}
		t.Log(err)
		// The module works on afterwards.
		out := emu.Poison(emu.I32, 64)
		if err := m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(64), 0, out); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTrap(t *testing.T) {
	emu.RunSchedules(t, harness(t), func(t *testing.T, m *emu.Module) {
		err := m.Launch("fleet_test_trap", emu.Dim(1), emu.Dim(32), 0, emu.Zeros(emu.I32, 32))
		if err == nil || !strings.Contains(err.Error(), "thread (3,0,0) of block (0,0,0): __trap()") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestWriteBeforeStart(t *testing.T) {
	m := harness(t)
	dst := emu.NewF32([]float32{1, 2, 3})
	err := m.Launch("fleet_test_write_before", emu.Dim(1), emu.Dim(32), 0, dst)
	var be *emu.BoundsError
	if !errors.As(err, &be) {
		t.Fatalf("got %v, want a *BoundsError", err)
	}
	if be.Param != "dst" || be.Side() != "before" || be.Elem() != -1 || be.Offset != -1 {
		t.Errorf("got %+v (%v)", be, be)
	}
	t.Log(err)
	// The guard is restored: the buffer launches cleanly again.
	if err := m.Launch("fleet_test_wide_block", emu.Dim(1), emu.Dim(1), 0, emu.Zeros(emu.I32, 1)); err != nil {
		t.Fatal(err)
	}
}

// spinFlag is TestTimeout's flag, kept for the life of the process: the
// spinning thread outlives its launch and reads the flag until it sees it
// set, which on a loaded machine can be after the test has ended, and a
// buffer no one holds is unmapped (the thread then faulted, killing the
// test binary).
var spinFlag *emu.Buffer

func TestTimeout(t *testing.T) {
	// A module of its own, as a timed-out module refuses further launches.
	m := testModule(t, "spin.cu").WithTimeout(200 * time.Millisecond)
	flag := emu.Zeros(emu.I32, 1)
	spinFlag = flag
	err := m.Launch("fleet_test_spin", emu.Dim(1), emu.Dim(2), 0, flag)
	flag.SetI32([]int32{1}) // let the spinning thread go
	if err == nil || !(strings.Contains(err.Error(), "did not finish within 200 ms") || strings.Contains(err.Error(), "timed out")) {
		t.Fatalf("got %v", err)
	}
	t.Log(err)
	if err := m.Launch("fleet_test_spin", emu.Dim(1), emu.Dim(1), 0, flag); err == nil {
		t.Error("a module that timed out launched again")
	}
}

func TestViews(t *testing.T) {
	m := testModule(t, "mutants.cu") // for a grid-stride scale kernel with bounds bugs
	e := emu.MustBuild(t, kernelFile(t, "elementwise.cu"))
	src := emu.RandF32(rand.New(rand.NewPCG(9, 9)), 10)
	b := emu.NewF32(src)
	// Scale elements 2..7 in place through views.
	if err := e.Launch("fleet_scale_f32", emu.Dim(1), emu.Dim(32), 0, b.At(8), b.At(8), float32(2), 6); err != nil {
		t.Fatal(err)
	}
	want := append([]float32(nil), src...)
	for i := 2; i < 8; i++ {
		want[i] *= 2
	}
	if err := emu.AllClose(b.F32(), want, 0, 0); err != nil {
		t.Error(err)
	}
	// Raw device memory: a U8 buffer viewed as floats.
	raw := emu.Zeros(emu.U8, 64)
	if err := e.Launch("fleet_fill_f32", emu.Dim(1), emu.Dim(32), 0, raw.At(16), float32(1), 4); err != nil {
		t.Fatal(err)
	}
	if got := raw.U8(); got[15] != 0 || got[16+3] != 0x3f || got[32] != 0 {
		t.Errorf("fill through a raw view: %v", got)
	}
	if err := e.Launch("fleet_fill_f32", emu.Dim(1), emu.Dim(32), 0, raw.At(2), float32(1), 4); err == nil || !strings.Contains(err.Error(), "not aligned to 4 bytes") {
		t.Errorf("misaligned view: got %v", err)
	}
	if err := e.Launch("fleet_fill_f32", emu.Dim(1), emu.Dim(32), 0, emu.Zeros(emu.I32, 4).At(0), float32(1), 4); err == nil || !strings.Contains(err.Error(), "want float*") {
		t.Errorf("view of the wrong type: got %v", err)
	}
	// A view's overrun is the buffer's: writing one past the end of b.
	err := m.Launch("fleet_mut_scale_past_end", emu.Dim(1), emu.Dim(32), 0, b.At(36), b.At(0), float32(1), 1)
	var be *emu.BoundsError
	if !errors.As(err, &be) || be.Elem() != 10 || be.Side() != "after" {
		t.Errorf("overrun through a view: got %v", err)
	}
}

package emu_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// The harness's own test on real kernels: the F32 kernels of
// elementwise.cu against plain Go, under every schedule. (The kernel tests
// of backend/gpu/kernels hold every kernel, these included, to the CPU
// backend.)
func TestElementwiseKernels(t *testing.T) {
	runCases(t, emu.MustBuild(t, kernelFile(t, "elementwise.cu")), emu.Cases{
		"fleet_fill_f32":   testFillF32,
		"fleet_binary_f32": testBinaryF32,
		"fleet_axpy_f32":   testAxpyF32,
		"fleet_scale_f32":  testScaleF32,
	})
}

// Sizes and launch shapes for grid-stride kernels: empty, one element, odd
// sizes, sizes around and off a multiple of the block; grids smaller and
// larger than the work, blocks of one warp and of several.
var (
	gridStrideSizes    = []int{0, 1, 7, 255, 256, 257, 1000}
	gridStrideLaunches = []struct{ grid, block int }{{1, 256}, {3, 256}, {4, 64}, {7, 32}}
)

// eachGridStrideShape calls check for every size and launch shape, with a
// random source seeded by them, and reports each failure with its shape.
func eachGridStrideShape(t *testing.T, check func(rng *rand.Rand, n int, grid, block [3]int) error) {
	t.Helper()
	for _, n := range gridStrideSizes {
		for _, l := range gridStrideLaunches {
			rng := rand.New(rand.NewPCG(uint64(n), uint64(l.grid*1000+l.block)))
			if err := check(rng, n, emu.Dim(l.grid), emu.Dim(l.block)); err != nil {
				t.Errorf("n=%d grid=%d block=%d: %v", n, l.grid, l.block, err)
			}
		}
	}
}

func testFillF32(t *testing.T, m *emu.Module) {
	eachGridStrideShape(t, func(rng *rand.Rand, n int, grid, block [3]int) error {
		v := emu.RandF32(rng, 1)[0]
		dst := emu.Poison(emu.F32, n)
		if err := m.Launch("fleet_fill_f32", grid, block, 0, dst, v, n); err != nil {
			return err
		}
		want := make([]float32, n)
		for i := range want {
			want[i] = v
		}
		return emu.AllClose(dst.F32(), want, 0, 0)
	})
}

func testBinaryF32(t *testing.T, m *emu.Module) {
	ops := []struct {
		name string
		f    func(x, y float32) float32
	}{
		{"add", func(x, y float32) float32 { return x + y }},
		{"sub", func(x, y float32) float32 { return x - y }},
		{"mul", func(x, y float32) float32 { return x * y }},
		{"div", func(x, y float32) float32 { return x / y }},
	}
	for op, o := range ops {
		eachGridStrideShape(t, func(rng *rand.Rand, n int, grid, block [3]int) error {
			a, b := emu.RandF32(rng, n), emu.RandF32(rng, n)
			want := make([]float32, n)
			for i := range want {
				want[i] = o.f(a[i], b[i])
			}
			ab, bb, dst := emu.NewF32(a), emu.NewF32(b), emu.Poison(emu.F32, n)
			if err := m.Launch("fleet_binary_f32", grid, block, 0, dst, ab, bb, int32(op), int64(n)); err != nil {
				return fmt.Errorf("%s: %v", o.name, err)
			}
			if err := emu.AllClose(dst.F32(), want, 1e-6, 0); err != nil {
				return fmt.Errorf("%s: %v", o.name, err)
			}
			// dst may alias a.
			if err := m.Launch("fleet_binary_f32", grid, block, 0, ab, ab, bb, int32(op), int64(n)); err != nil {
				return fmt.Errorf("%s in place: %v", o.name, err)
			}
			if err := emu.AllClose(ab.F32(), want, 1e-6, 0); err != nil {
				return fmt.Errorf("%s in place: %v", o.name, err)
			}
			return nil
		})
	}
}

func testAxpyF32(t *testing.T, m *emu.Module) {
	eachGridStrideShape(t, func(rng *rand.Rand, n int, grid, block [3]int) error {
		d, x, alpha := emu.RandF32(rng, n), emu.RandF32(rng, n), emu.RandF32(rng, 1)[0]
		want := make([]float32, n)
		for i := range want {
			want[i] = d[i] + float32(alpha*x[i]) // two roundings, no fused multiply-add
		}
		dst := emu.NewF32(d)
		if err := m.Launch("fleet_axpy_f32", grid, block, 0, dst, emu.NewF32(x), alpha, n); err != nil {
			return err
		}
		return emu.AllClose(dst.F32(), want, 1e-6, 1e-7)
	})
}

func testScaleF32(t *testing.T, m *emu.Module) {
	eachGridStrideShape(t, func(rng *rand.Rand, n int, grid, block [3]int) error {
		src, alpha := emu.RandF32(rng, n), emu.RandF32(rng, 1)[0]
		want := make([]float32, n)
		for i := range want {
			want[i] = alpha * src[i]
		}
		dst := emu.Poison(emu.F32, n)
		if err := m.Launch("fleet_scale_f32", grid, block, 0, dst, emu.NewF32(src), alpha, n); err != nil {
			return err
		}
		if err := emu.AllClose(dst.F32(), want, 1e-6, 0); err != nil {
			return err
		}
		// dst may alias src.
		sb := emu.NewF32(src)
		if err := m.Launch("fleet_scale_f32", grid, block, 0, sb, sb, alpha, n); err != nil {
			return fmt.Errorf("in place: %v", err)
		}
		return emu.AllClose(sb.F32(), want, 1e-6, 0)
	})
}

package emu_test

import (
	"testing"

	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
)

// The benchmarks report the harness's cost per emulated thread start,
// barrier and warp sum, per schedule (ns/op is per launch).

func benchLaunch(b *testing.B, kernel string, grid, block int, args ...any) {
	src := testModuleB(b, "bench.cu")
	for _, s := range emu.Schedules() {
		b.Run(s.String(), func(b *testing.B) {
			m := src.WithSchedule(s)
			out := emu.Zeros(emu.F32, grid*block)
			for b.Loop() {
				if err := m.Launch(kernel, emu.Dim(grid), emu.Dim(block), 0, append([]any{out}, args...)...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkThreadStart(b *testing.B) { benchLaunch(b, "fleet_bench_empty", 4, 256) }

func BenchmarkBarrier(b *testing.B) { benchLaunch(b, "fleet_bench_barriers", 1, 256, int32(20)) }

func BenchmarkWarpSum(b *testing.B) { benchLaunch(b, "fleet_bench_shuffles", 1, 256, int32(4)) }

package dist

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestBenchAllReduce checks BenchAllReduce on two small sizes; with
// FLEET_DIST_BENCH_SIZES=all it prints the full table for 2 and 4 ranks.
func TestBenchAllReduce(t *testing.T) {
	if os.Getenv("FLEET_DIST_BENCH_SIZES") == "all" {
		for _, world := range []int{2, 4} {
			res, err := BenchAllReduce(context.Background(), DefaultBenchSizes(), world, BenchOptions{Iters: 5})
			if err != nil {
				t.Fatal(err)
			}
			var b strings.Builder
			WriteBenchTable(&b, res)
			t.Logf("\n%s", b.String())
		}
	}
	res, err := BenchAllReduce(context.Background(), []int64{4 << 10, 1 << 20}, 2, BenchOptions{Iters: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || res[1].Bytes != 1<<20 || res[1].AlgBW <= 0 || res[1].BusBW != res[1].AlgBW {
		t.Fatalf("results: %+v", res)
	}
	var b strings.Builder
	WriteBenchTable(&b, res)
	if !strings.Contains(b.String(), " 1048576 ") {
		t.Fatalf("table:\n%s", b.String())
	}
}

// BenchmarkAllReduce reports the ring's bus bandwidth on loopback, as
// nccl-tests computes it. FLEET_DIST_BENCH_SIZES=all runs 4 kB to 256 MB.
func BenchmarkAllReduce(b *testing.B) {
	sizes := []int64{4 << 10, 256 << 10, 4 << 20, 64 << 20}
	if os.Getenv("FLEET_DIST_BENCH_SIZES") == "all" {
		sizes = DefaultBenchSizes()
	}
	for _, world := range []int{2, 4} {
		b.Run(fmt.Sprintf("ranks%d", world), func(b *testing.B) {
			groups := job(b, world, TCPOptions{}, nil)
			for _, size := range sizes {
				b.Run(formatBytes(size), func(b *testing.B) {
					n := int(size / 4)
					bufs := make([][]float32, world)
					for r := range bufs {
						bufs[r] = make([]float32, n)
					}
					b.SetBytes(size)
					b.ResetTimer()
					errs := each(groups, func(r int, g *TCPGroup) error {
						for range b.N {
							if err := g.AllReduce(bufs[r], Sum); err != nil {
								return err
							}
						}
						return nil
					})
					b.StopTimer()
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
					alg := float64(size) * float64(b.N) / b.Elapsed().Seconds() / 1e9
					b.ReportMetric(alg, "algbw_GB/s")
					b.ReportMetric(alg*2*float64(world-1)/float64(world), "busbw_GB/s")
				})
			}
		})
	}
}

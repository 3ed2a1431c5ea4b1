package dist

import (
	"context"
	"fmt"
	"io"
	"net"
	"sort"
	"sync"
	"time"
)

// BenchResult is one message size of an all-reduce benchmark, with the
// bandwidths nccl-tests reports: algbw = bytes / time, and
// busbw = algbw × 2(n−1)/n, the rate each link carries, which is comparable
// across world sizes.
type BenchResult struct {
	Bytes int64
	World int
	Iters int
	Time  time.Duration // median time of one all-reduce
	AlgBW float64       // GB/s (1e9 bytes)
	BusBW float64       // GB/s
}

// BenchOptions tune BenchAllReduce. The zero value is fine.
type BenchOptions struct {
	// Iters is the number of timed all-reduces per size (default: as many
	// as move about 1 GB, between 3 and 200).
	Iters int
	// Warmup all-reduces run before timing (default 1).
	Warmup int
	// TCP options of the group (chunk size, ...).
	TCP TCPOptions
}

// BenchAllReduce measures the TCP ring's float32 sum all-reduce on loopback
// with world ranks in this process (one goroutine, store client and group
// each), for each message size in bytes.
func BenchAllReduce(ctx context.Context, sizes []int64, world int, opts BenchOptions) ([]BenchResult, error) {
	if world < 1 {
		return nil, fmt.Errorf("bench: world size %d", world)
	}
	if opts.Warmup <= 0 {
		opts.Warmup = 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	secret := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	groups := make([]*TCPGroup, world)
	stores := make([]*Store, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			cfg := StoreConfig{Addr: ln.Addr().String(), Rank: r, World: world, Secret: secret, Timeout: time.Minute, Log: io.Discard}
			if r == 0 {
				cfg.Listener = ln
			}
			if stores[r], errs[r] = NewStore(ctx, cfg); errs[r] == nil {
				groups[r], errs[r] = NewTCPGroup(stores[r], opts.TCP)
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, g := range groups {
			if g != nil {
				g.Close()
			}
		}
		for r := world - 1; r >= 0; r-- {
			if stores[r] != nil {
				stores[r].Close()
			}
		}
		if stores[0] == nil {
			ln.Close()
		}
	}()
	for r, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("bench: rank %d: %w", r, err)
		}
	}

	var out []BenchResult
	for _, size := range sizes {
		if err := ctx.Err(); err != nil {
			return out, err
		}
		n := int(max(size/4, 1))
		iters := opts.Iters
		if iters <= 0 {
			iters = int(min(max(1e9/(size+1), 3), 200))
		}
		times := make([]time.Duration, iters)
		for r := range world {
			errs[r] = nil
		}
		for r := range world {
			wg.Go(func() {
				g := groups[r]
				buf := make([]float32, n)
				for i := range buf {
					buf[i] = float32(i%13) * 0.25
				}
				for range opts.Warmup {
					if errs[r] = g.AllReduce(buf, Sum); errs[r] != nil {
						return
					}
				}
				for i := range iters {
					// A barrier first, so each timing starts with every
					// rank ready, as nccl-tests' does.
					if errs[r] = g.Barrier(); errs[r] != nil {
						return
					}
					t0 := time.Now()
					if errs[r] = g.AllReduce(buf, Sum); errs[r] != nil {
						return
					}
					if r == 0 {
						times[i] = time.Since(t0)
					}
				}
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				return out, fmt.Errorf("bench: rank %d: %w", r, err)
			}
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		med := times[len(times)/2]
		bytes := int64(n) * 4
		alg := float64(bytes) / med.Seconds() / 1e9
		out = append(out, BenchResult{Bytes: bytes, World: world, Iters: iters, Time: med,
			AlgBW: alg, BusBW: alg * 2 * float64(world-1) / float64(world)})
	}
	return out, nil
}

// DefaultBenchSizes are 4 kB to 256 MB by factors of 4.
func DefaultBenchSizes() []int64 {
	var s []int64
	for b := int64(4 << 10); b <= 256<<20; b *= 4 {
		s = append(s, b)
	}
	return s
}

// WriteBenchTable writes results as a table in nccl-tests' terms.
func WriteBenchTable(w io.Writer, results []BenchResult) {
	fmt.Fprintf(w, "%6s %12s %7s %12s %10s %10s\n", "ranks", "bytes", "iters", "time", "algbw GB/s", "busbw GB/s")
	for _, r := range results {
		fmt.Fprintf(w, "%6d %12d %7d %12s %10.3f %10.3f\n", r.World, r.Bytes, r.Iters, r.Time.Round(time.Microsecond), r.AlgBW, r.BusBW)
	}
}

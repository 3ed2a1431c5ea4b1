package dist

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

const testSecret = "s3cret-for-tests"

// listen reserves a loopback port for rank 0's store.
func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// job starts world ranks in this process, each with its own store client
// and TCP group.
func job(t testing.TB, world int, opts TCPOptions, log *testenv.SyncBuffer) []*TCPGroup {
	t.Helper()
	ln := listen(t)
	if log == nil {
		log = &testenv.SyncBuffer{}
	}
	groups := make([]*TCPGroup, world)
	stores := make([]*Store, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			cfg := StoreConfig{Addr: ln.Addr().String(), Rank: r, World: world, Secret: testSecret, Timeout: 10 * time.Second, Log: log}
			if r == 0 {
				cfg.Listener = ln
			}
			s, err := NewStore(context.Background(), cfg)
			if err != nil {
				errs[r] = err
				return
			}
			stores[r] = s
			groups[r], errs[r] = NewTCPGroup(s, opts)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for _, g := range groups {
			g.Close()
		}
		for r := world - 1; r >= 0; r-- {
			stores[r].Close()
		}
	})
	return groups
}

// each runs f on every rank at once and returns the errors.
func each(groups []*TCPGroup, f func(r int, g *TCPGroup) error) []error {
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { errs[r] = f(r, g) })
	}
	wg.Wait()
	return errs
}

func must(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

func randomFloats(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	return x
}

func TestAllReduce(t *testing.T) {
	for _, world := range []int{2, 3, 4} {
		for _, chunk := range []int{0, 4096} {
			t.Run(fmt.Sprintf("world%d/chunk%d", world, chunk), func(t *testing.T) {
				groups := job(t, world, TCPOptions{ChunkBytes: chunk}, nil)
				rng := rand.New(rand.NewPCG(uint64(world), uint64(chunk)))
				for _, n := range []int{1, 7, 1000003} {
					if chunk != 0 && n > 100000 && world != 3 {
						continue // small chunks on a big buffer once is enough
					}
					for _, op := range []Op{Sum, Avg} {
						in := make([][]float32, world)
						bufs := make([][]float32, world)
						for r := range in {
							in[r] = randomFloats(rng, n)
							bufs[r] = append([]float32(nil), in[r]...)
						}
						must(t, each(groups, func(r int, g *TCPGroup) error { return g.AllReduce(bufs[r], op) }))
						step := 1 + n/50000 // a sample of a big buffer is enough here
						for i := 0; i < n; i += step {
							var want, mag float64
							for r := range world {
								want += float64(in[r][i])
								mag += math.Abs(float64(in[r][i]))
							}
							if op == Avg {
								want /= float64(world)
								mag /= float64(world)
							}
							if got := float64(bufs[0][i]); math.Abs(got-want) > 1e-6*mag+1e-30 {
								t.Fatalf("n=%d %v: element %d = %v, want %v", n, op, i, got, want)
							}
						}
						for r := 1; r < world; r++ {
							if !bytes.Equal(bytesOf(bufs[r]), bytesOf(bufs[0])) {
								t.Fatalf("n=%d %v: rank %d's result differs from rank 0's", n, op, r)
							}
						}
					}
				}
			})
		}
	}
}

// The result does not depend on timing: the same inputs give the same bits.
func TestAllReduceDeterministic(t *testing.T) {
	const world, n = 3, 50001
	groups := job(t, world, TCPOptions{ChunkBytes: 1024}, nil)
	rng := rand.New(rand.NewPCG(7, 7))
	in := make([][]float32, world)
	for r := range in {
		in[r] = randomFloats(rng, n)
	}
	var first []float32
	for range 3 {
		bufs := make([][]float32, world)
		must(t, each(groups, func(r int, g *TCPGroup) error {
			bufs[r] = append([]float32(nil), in[r]...)
			return g.AllReduce(bufs[r], Sum)
		}))
		if first == nil {
			first = bufs[0]
		} else if !bytes.Equal(bytesOf(first), bytesOf(bufs[0])) {
			t.Fatal("the same all-reduce gave different bits")
		}
	}
}

func TestBroadcastAllGatherBarrier(t *testing.T) {
	for _, world := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprint(world), func(t *testing.T) {
			groups := job(t, world, TCPOptions{ChunkBytes: 1024}, nil)
			rng := rand.New(rand.NewPCG(uint64(world), 1))
			for _, n := range []int{0, 1, 7, 3001} {
				for root := range world {
					src := randomFloats(rng, n)
					bufs := make([][]float32, world)
					for r := range bufs {
						bufs[r] = randomFloats(rng, n)
					}
					copy(bufs[root], src)
					must(t, each(groups, func(r int, g *TCPGroup) error { return g.Broadcast(bufs[r], root) }))
					for r := range world {
						if !bytes.Equal(bytesOf(bufs[r]), bytesOf(src)) {
							t.Fatalf("broadcast n=%d root=%d: rank %d differs", n, root, r)
						}
					}
				}
				sends := make([][]float32, world)
				var want []float32
				for r := range sends {
					sends[r] = randomFloats(rng, n)
					want = append(want, sends[r]...)
				}
				recvs := make([][]float32, world)
				must(t, each(groups, func(r int, g *TCPGroup) error {
					recvs[r] = make([]float32, world*n)
					return g.AllGather(sends[r], recvs[r])
				}))
				for r := range world {
					if !bytes.Equal(bytesOf(recvs[r]), bytesOf(want)) {
						t.Fatalf("all-gather n=%d: rank %d differs", n, r)
					}
				}
			}
			// Barrier: no rank leaves before the last one enters.
			var mu sync.Mutex
			entered := 0
			must(t, each(groups, func(r int, g *TCPGroup) error {
				time.Sleep(time.Duration(r) * 20 * time.Millisecond)
				mu.Lock()
				entered++
				mu.Unlock()
				if err := g.Barrier(); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if entered != world {
					return fmt.Errorf("left the barrier with %d of %d ranks in", entered, world)
				}
				return nil
			}))
		})
	}
	if err := job(t, 2, TCPOptions{}, nil)[0].AllGather(make([]float32, 3), make([]float32, 5)); err == nil {
		t.Fatal("all-gather with a wrong recv size: no error")
	}
}

func TestAsyncInFlight(t *testing.T) {
	const world = 3
	groups := job(t, world, TCPOptions{ChunkBytes: 2048}, nil)
	rng := rand.New(rand.NewPCG(3, 3))
	sizes := []int{5, 40000, 1, 12345, 7, 99999, 3, 2048}
	in := make([][][]float32, world)
	for r := range in {
		for _, n := range sizes {
			in[r] = append(in[r], randomFloats(rng, n))
		}
	}
	out := make([][][]float32, world)
	must(t, each(groups, func(r int, g *TCPGroup) error {
		var works []Work
		for i := range sizes {
			out[r] = append(out[r], append([]float32(nil), in[r][i]...))
			works = append(works, g.AllReduceAsync(out[r][i], Avg))
		}
		for i, w := range works {
			if err := w.Wait(); err != nil {
				return fmt.Errorf("work %d: %w", i, err)
			}
		}
		return nil
	}))
	for i, n := range sizes {
		for j := range n {
			var want float64
			for r := range world {
				want += float64(in[r][i][j])
			}
			want /= world
			if math.Abs(float64(out[0][i][j])-want) > 1e-5 {
				t.Fatalf("bucket %d element %d = %v, want %v", i, j, out[0][i][j], want)
			}
		}
		for r := 1; r < world; r++ {
			if !bytes.Equal(bytesOf(out[r][i]), bytesOf(out[0][i])) {
				t.Fatalf("bucket %d differs between ranks 0 and %d", i, r)
			}
		}
	}
}

func TestStrangersRefused(t *testing.T) {
	log := &testenv.SyncBuffer{}
	groups := job(t, 2, TCPOptions{}, log)
	addr := groups[0].store.Addr()
	// A client with the wrong secret.
	_, err := NewStore(context.Background(), StoreConfig{Addr: addr, Rank: 1, World: 2, Secret: "wrong", Timeout: 2 * time.Second, Log: log})
	if err == nil || !strings.Contains(err.Error(), "holds another job secret") {
		t.Fatalf("wrong secret: err = %v", err)
	}
	// Someone speaking another protocol.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _ := c.Read(make([]byte, 64)); n != 0 {
		t.Fatalf("a stranger got %d bytes back", n)
	}
	c.Close()
	// Someone who connects and says nothing holds no resource for long, and
	// does not stop the job.
	idle, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	bufs := [][]float32{{1, 2}, {3, 4}}
	must(t, each(groups, func(r int, g *TCPGroup) error {
		if _, err := g.store.Add("after-strangers", 1); err != nil {
			return err
		}
		return g.AllReduce(bufs[r], Sum)
	}))
	if bufs[0][0] != 4 || bufs[1][1] != 6 {
		t.Fatalf("after strangers: %v", bufs)
	}
	for _, want := range []string{"refused a connection", "wrong secret", "bad greeting"} {
		waitLog(t, log, want)
	}
}

func TestRendezvousTimeout(t *testing.T) {
	ln := listen(t)
	addr := ln.Addr().String()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 {
		wg.Go(func() {
			cfg := StoreConfig{Addr: addr, Rank: r, World: 4, Secret: testSecret, Timeout: time.Second, Log: &testenv.SyncBuffer{}}
			if r == 0 {
				cfg.Listener = ln
			}
			s, err := NewStore(context.Background(), cfg)
			if err == nil {
				s.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "ranks 2, 3 of 4 never arrived") || !strings.Contains(err.Error(), "timed out after 1s") {
			t.Errorf("rank %d: err = %v", r, err)
		}
	}
	// Nobody at the master's address.
	ln2 := listen(t)
	addr2 := ln2.Addr().String()
	ln2.Close()
	_, err := NewStore(context.Background(), StoreConfig{Addr: addr2, Rank: 1, World: 2, Secret: testSecret, Timeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "rank 0 never arrived") {
		t.Errorf("no master: err = %v", err)
	}
	// Rank 0 needs a host to listen on.
	_, err = NewStore(context.Background(), StoreConfig{Addr: ":0", Rank: 0, World: 1, Secret: testSecret})
	if err == nil || !strings.Contains(err.Error(), "names no host") {
		t.Errorf("no host: err = %v", err)
	}
}

func TestStoreOps(t *testing.T) {
	groups := job(t, 2, TCPOptions{}, nil)
	s0, s1 := groups[0].store, groups[1].store
	got := make(chan []byte, 1)
	go func() {
		v, err := s1.Get("late")
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(50 * time.Millisecond)
	if err := s0.Set("late", []byte("value")); err != nil {
		t.Fatal(err)
	}
	if v := <-got; string(v) != "value" {
		t.Fatalf("Get = %q", v)
	}
	if _, err := s1.GetTimeout("never", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), `"never"`) {
		t.Fatalf("Get of a missing key: %v", err)
	}
	for i := range 5 {
		if n, err := s0.Add("ctr", 2); err != nil || n != int64(2*i+2) {
			t.Fatalf("Add = %d, %v", n, err)
		}
	}
	err := s1.WaitTimeout([]string{"late", "x/10", "x/9"}, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "missing: x/9, x/10") {
		t.Fatalf("Wait: %v", err)
	}
}

// A rank that goes away mid-all-reduce makes the others fail promptly,
// naming it and the operation.
func TestPeerClosedMidAllReduce(t *testing.T) {
	const world = 4
	groups := job(t, world, TCPOptions{Timeout: 20 * time.Second, RootCauseWait: time.Second, ChunkBytes: 4096}, nil)
	bufs := make([][]float32, world)
	for r := range bufs {
		bufs[r] = make([]float32, 1<<20)
	}
	start := time.Now()
	errs := each(groups, func(r int, g *TCPGroup) error {
		if r == 2 {
			g.AllReduce(bufs[r], Sum) // the first goes through
			time.Sleep(20 * time.Millisecond)
			return g.Close()
		}
		for range 1000 {
			if err := g.AllReduce(bufs[r], Sum); err != nil {
				return err
			}
		}
		return nil
	})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("failing took %v", d)
	}
	for r, err := range errs {
		if r == 2 {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "all-reduce #") || !strings.Contains(err.Error(), "rank 2 closed its connection") {
			t.Errorf("rank %d: err = %v", r, err)
		}
		t.Logf("rank %d: %v", r, err)
		// Poisoned: the next call fails at once with the same error.
		if err2 := groups[r].Barrier(); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("rank %d after the failure: %v", r, err2)
		}
	}
}

// A rank that stalls makes the others fail after the timeout, naming it.
func TestStalledPeer(t *testing.T) {
	const world = 3
	groups := job(t, world, TCPOptions{Timeout: 300 * time.Millisecond, RootCauseWait: 500 * time.Millisecond}, nil)
	bufs := make([][]float32, world)
	for r := range bufs {
		bufs[r] = make([]float32, 1000)
	}
	start := time.Now()
	errs := each(groups, func(r int, g *TCPGroup) error {
		if r == 1 {
			time.Sleep(2500 * time.Millisecond)
			return nil
		}
		return g.AllReduce(bufs[r], Avg)
	})
	for r, err := range errs {
		if r == 1 {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "all-reduce #1 (3.9 KiB)") || !strings.Contains(err.Error(), "no data from rank 1 for 300ms") {
			t.Errorf("rank %d: err = %v", r, err)
		}
		t.Logf("rank %d: %v", r, err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestMismatchedCollectives(t *testing.T) {
	groups := job(t, 2, TCPOptions{Timeout: 5 * time.Second, RootCauseWait: 100 * time.Millisecond}, nil)
	errs := each(groups, func(r int, g *TCPGroup) error {
		if r == 0 {
			return g.AllReduce(make([]float32, 10), Sum)
		}
		return g.Broadcast(make([]float32, 10), 1)
	})
	if errs[0] == nil || !strings.Contains(errs[0].Error(), "rank 1 is running broadcast #1 (40 B)") {
		t.Errorf("rank 0: %v", errs[0])
	}
}

// Strangers knocking at a rank's ring port while the ring forms are
// refused and logged; the ring still forms.
func TestRingStrangersRefused(t *testing.T) {
	ln := listen(t)
	log := &testenv.SyncBuffer{}
	stores := make([]*Store, 2)
	must(t, each(make([]*TCPGroup, 2), func(r int, _ *TCPGroup) error {
		cfg := StoreConfig{Addr: ln.Addr().String(), Rank: r, World: 2, Secret: testSecret, Timeout: 10 * time.Second, Log: log}
		if r == 0 {
			cfg.Listener = ln
		}
		var err error
		stores[r], err = NewStore(context.Background(), cfg)
		return err
	}))
	defer stores[0].Close()
	defer stores[1].Close()
	groups := make([]*TCPGroup, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { groups[1], errs[1] = NewTCPGroup(stores[1], TCPOptions{Name: "g"}) })
	addr, err := stores[0].Get("tcp/g/addr/1")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		secret string
		rank   int
	}{{"wrong", 0}, {testSecret, 5}} {
		c, err := net.Dial("tcp", string(addr))
		if err != nil {
			t.Fatal(err)
		}
		if err := clientHandshake(c, []byte(k.secret), roleRing, k.rank, time.Now().Add(5*time.Second)); err == nil && k.rank != 5 {
			t.Errorf("a stranger with secret %q was let in", k.secret)
		}
		c.Close()
	}
	wg.Go(func() { groups[0], errs[0] = NewTCPGroup(stores[0], TCPOptions{Name: "g"}) })
	wg.Wait()
	must(t, errs)
	defer groups[0].Close()
	defer groups[1].Close()
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	must(t, each(groups, func(r int, g *TCPGroup) error { return g.AllReduce(bufs[r], Sum) }))
	if fmt.Sprint(bufs[0], bufs[1]) != "[11 22 33] [11 22 33]" {
		t.Fatalf("after strangers: %v", bufs)
	}
	for _, want := range []string{"rank 1: refused a connection", "wrong secret", "it says it is rank 5"} {
		waitLog(t, log, want)
	}
}

// waitLog waits a little for a line that another goroutine logs.
func waitLog(t *testing.T, log *testenv.SyncBuffer, want string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if strings.Contains(log.String(), want) {
			return
		}
	}
	t.Errorf("log lacks %q:\n%s", want, log.String())
}

// unevenBounds cuts n elements among world ranks at random places, some
// shards empty where n is small.
func unevenBounds(n, world int, seed uint64) Bounds {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make(Bounds, world+1)
	for k := 1; k < world; k++ {
		b[k] = rng.IntN(n + 1)
	}
	b[world] = n
	slices.Sort(b)
	return b
}

// TestReduceScatterAllGatherShards: a reduce-scatter leaves each rank its
// shard of the sum (or mean) over ranks, the all-gather of shards gives
// every rank all of them, bit for bit the same on every rank, for sizes
// that do not split evenly (and smaller than the world), shards cut
// evenly and unevenly (some empty), worlds 1 to 4, and chunks smaller
// than a shard.
func TestReduceScatterAllGatherShards(t *testing.T) {
	for _, world := range []int{1, 2, 3, 4} {
		groups := job(t, world, TCPOptions{ChunkBytes: 64}, nil)
		for _, n := range []int{1, 3, 50, 1001} {
			for _, cut := range []string{"even", "uneven"} {
				for _, op := range []Op{Sum, Avg} {
					b := EvenBounds(n, world)
					if cut == "uneven" {
						b = unevenBounds(n, world, 3)
					}
					bufs := make([][]float32, world)
					want := make([]float64, n)
					for r := range world {
						rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
						bufs[r] = make([]float32, n)
						for i := range bufs[r] {
							bufs[r][i] = float32(rng.NormFloat64())
							want[i] += float64(bufs[r][i])
						}
					}
					var wg sync.WaitGroup
					errs := make([]error, world)
					for r, g := range groups {
						wg.Go(func() {
							if cut == "even" {
								errs[r] = g.ReduceScatter(bufs[r], op)
							} else {
								errs[r] = g.ReduceScatterAsync(bufs[r], 0, b, op, "").Wait()
							}
						})
					}
					wg.Wait()
					for r := range world {
						if errs[r] != nil {
							t.Fatalf("world %d n %d %v rank %d: %v", world, n, b, r, errs[r])
						}
						lo, hi := b.Shard(r)
						for i := lo; i < hi; i++ {
							w := want[i]
							if op == Avg {
								w /= float64(world)
							}
							if math.Abs(float64(bufs[r][i])-w) > 1e-5*(1+math.Abs(w)) {
								t.Fatalf("world %d n %d %v %v rank %d [%d]: %v, want %v", world, n, b, op, r, i, bufs[r][i], w)
							}
						}
					}
					for r, g := range groups {
						wg.Go(func() { errs[r] = g.AllGatherShards(bufs[r], b) })
					}
					wg.Wait()
					for r := range world {
						if errs[r] != nil {
							t.Fatalf("all-gather: %v", errs[r])
						}
						for i := range n {
							if math.Float32bits(bufs[r][i]) != math.Float32bits(bufs[0][i]) {
								t.Fatalf("world %d n %d %v: rank %d [%d] = %v, rank 0 has %v", world, n, b, r, i, bufs[r][i], bufs[0][i])
							}
						}
					}
				}
			}
		}
	}
}

// TestReduceScatterPieces: reduce-scattering a flat buffer piece by piece
// (ReduceScatterAsync, several in flight, pieces inside one shard and
// across shards' edges, some of one element) leaves every rank its shard
// bit for bit as one reduce-scatter of the whole does, with the shards
// cut evenly or not: each element is summed along the same path of the
// ring. A piece placed differently on two ranks fails, naming the
// mismatch, and so do shards cut differently.
func TestReduceScatterPieces(t *testing.T) {
	const n = 1001
	for _, world := range []int{1, 2, 3, 4} {
		groups := job(t, world, TCPOptions{ChunkBytes: 64}, nil)
		for _, b := range []Bounds{EvenBounds(n, world), unevenBounds(n, world, 5)} {
			cuts := []int{0, 1, 2, 40, 250, 251, 600, 999, n} // shards' edges fall inside pieces and on them
			whole := make([][]float32, world)
			pieces := make([][]float32, world)
			want := make([]float64, n)
			for r := range world {
				rng := rand.New(rand.NewPCG(uint64(r), 7))
				whole[r] = make([]float32, n)
				for i := range whole[r] {
					whole[r][i] = float32(rng.NormFloat64())
					want[i] += float64(whole[r][i]) / float64(world)
				}
				pieces[r] = append([]float32(nil), whole[r]...)
			}
			var wg sync.WaitGroup
			errs := make([]error, world)
			for r, g := range groups {
				wg.Go(func() {
					if errs[r] = g.ReduceScatterAsync(whole[r], 0, b, Avg, "").Wait(); errs[r] != nil {
						return
					}
					var works []Work
					for k := len(cuts) - 2; k >= 0; k-- { // backward's order: the last piece first
						lo, hi := cuts[k], cuts[k+1]
						works = append(works, g.ReduceScatterAsync(pieces[r][lo:hi], lo, b, Avg, fmt.Sprintf("bucket %d", k)))
					}
					for _, w := range works {
						errs[r] = errors.Join(errs[r], w.Wait())
					}
				})
			}
			wg.Wait()
			for r := range world {
				if errs[r] != nil {
					t.Fatalf("world %d rank %d: %v", world, r, errs[r])
				}
				lo, hi := b.Shard(r)
				for i := lo; i < hi; i++ {
					if math.Float32bits(pieces[r][i]) != math.Float32bits(whole[r][i]) {
						t.Fatalf("world %d %v rank %d [%d]: pieces gave %v, the whole buffer %v", world, b, r, i, pieces[r][i], whole[r][i])
					}
					if math.Abs(float64(pieces[r][i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
						t.Fatalf("world %d %v rank %d [%d]: %v, want %v", world, b, r, i, pieces[r][i], want[i])
					}
				}
			}
		}
		b := EvenBounds(n, world)
		if w := groups[0].ReduceScatterAsync(make([]float32, 3), n-2, b, Sum, ""); w.Wait() == nil {
			t.Errorf("world %d: a piece past the flat buffer's end was accepted", world)
		}
		if w := groups[0].ReduceScatterAsync(make([]float32, 3), 0, b[:world], Sum, ""); w.Wait() == nil {
			t.Errorf("world %d: bounds for %d ranks were accepted", world, world-1)
		}
		if world < 2 {
			continue
		}
		var wg sync.WaitGroup
		errs := make([]error, world)
		for r, g := range groups {
			wg.Go(func() { errs[r] = g.ReduceScatterAsync(make([]float32, 10), 10*(1+r%2), b, Sum, "").Wait() })
		}
		wg.Wait()
		for r := range world {
			if errs[r] == nil || !strings.Contains(errs[r].Error(), "different collectives") {
				t.Errorf("world %d rank %d: pieces at different offsets gave %v", world, r, errs[r])
			}
		}
		apart := unevenBounds(n, world, 11) // rank 1 cuts the same buffer elsewhere
		for r, g := range groups {
			cut := b
			if r == 1 {
				cut = apart
			}
			wg.Go(func() { errs[r] = g.ReduceScatterAsync(make([]float32, 10), 0, cut, Sum, "").Wait() })
		}
		wg.Wait()
		for r := range world {
			if errs[r] == nil || !strings.Contains(errs[r].Error(), "different collectives") {
				t.Errorf("world %d rank %d: shards cut %v and %v gave %v", world, r, b, apart, errs[r])
			}
		}
	}
}

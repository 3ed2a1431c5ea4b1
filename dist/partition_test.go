package dist

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

// cutProxy forwards TCP connections to a target until it is cut; from then
// on it forwards nothing in either direction and closes nothing, as a link
// that went down: the two ends see silence, no FIN and no reset, and what
// they write fills the socket buffers. Close ends it.
type cutProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	cut   chan struct{}
	done  chan struct{}
	wg    sync.WaitGroup
	once  sync.Once
	bytes int64 // forwarded before the cut
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{ln: listen(t), target: target, cut: make(chan struct{}), done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.forward(c, u)
		go p.forward(u, c)
	}
}

// forward copies src to dst until the cut, then reads no more.
func (p *cutProxy) forward(src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		select {
		case <-p.cut:
			<-p.done
			return
		default:
		}
		n, err := src.Read(buf)
		select {
		case <-p.cut: // what arrived after the cut is lost
			<-p.done
			return
		default:
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			p.mu.Lock()
			p.bytes += int64(n)
			p.mu.Unlock()
		}
		if err != nil {
			dst.Close() // a close before the cut goes through
			return
		}
	}
}

// Cut stops forwarding.
func (p *cutProxy) Cut() { close(p.cut) }

// Close ends the proxy and its connections.
func (p *cutProxy) Close() {
	p.once.Do(func() {
		close(p.done)
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}

// TestPartitionedRankClosesInTime cuts the network between a job's two
// ranks and rank 0's store, and keeps it cut: rank 1 reaches the store only
// through a proxy that stops forwarding, and rank 0 (partitioned: alive,
// silent) never joins the all-reduce rank 1 starts. Rank 1's collective
// fails after its timeout; it then reports the failure to the store (a Set
// that can never be answered), and closing its group and its store, as a
// failed run does, must take no longer than the timeout plus 5 s from the
// start of the collective: closing must not wait for the unreachable
// store. Rank 0 closes promptly too.
func TestPartitionedRankClosesInTime(t *testing.T) {
	const timeout = 2 * time.Second
	ln := listen(t)
	proxy := newCutProxy(t, ln.Addr().String())
	log := &testenv.SyncBuffer{}
	stores := make([]*Store, 2)
	groups := make([]*TCPGroup, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			cfg := StoreConfig{Addr: proxy.Addr(), Rank: r, World: 2, Secret: testSecret, Timeout: 10 * time.Second, Log: log}
			if r == 0 {
				cfg.Addr, cfg.Listener = ln.Addr().String(), ln
			}
			if stores[r], errs[r] = NewStore(context.Background(), cfg); errs[r] != nil {
				return
			}
			// The default wait for the root cause (3 s), as a run has it.
			groups[r], errs[r] = NewTCPGroup(stores[r], TCPOptions{Name: "partition", Timeout: timeout})
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	closed := make([]bool, 2)
	closeRank := func(r int) {
		if !closed[r] {
			closed[r] = true
			groups[r].Close()
			stores[r].Close()
		}
	}
	defer func() {
		closeRank(1)
		closeRank(0)
	}()
	must(t, each(groups, func(r int, g *TCPGroup) error { return g.AllReduce(make([]float32, 100), Sum) }))
	proxy.mu.Lock()
	through := proxy.bytes
	proxy.mu.Unlock()
	if through == 0 {
		t.Fatal("nothing went through the proxy: rank 1 does not reach the store through it")
	}

	proxy.Cut()
	start := time.Now()
	err := groups[1].AllReduce(make([]float32, 100), Sum)
	failed := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "no data from rank 0") || !errors.Is(err, ErrTimeout) {
		t.Errorf("rank 1's all-reduce across the cut: %v, want a timeout waiting for rank 0", err)
	}
	closeRank(1)
	took := time.Since(start)
	t.Logf("rank 1: the all-reduce failed after %v, and rank 1 had closed %v after it started (timeout %v): %v",
		failed.Round(time.Millisecond), took.Round(time.Millisecond), timeout, err)
	if took > timeout+5*time.Second {
		t.Errorf("rank 1 closed %v after its all-reduce started, more than the timeout %v plus 5 s", took, timeout)
	}
	// Requests after Close fail at once.
	if err := stores[1].Set("late", nil); err == nil || !strings.Contains(err.Error(), "store closed") {
		t.Errorf("a Set after Close: %v", err)
	}

	// Rank 0, still cut off from rank 1's store connection, closes
	// promptly too.
	t0 := time.Now()
	closeRank(0)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("rank 0 took %v to close", d)
	}
}

// TestStoreCloseDuringRequest: Close cuts a request in flight on another
// goroutine (a Get waiting for a key) instead of waiting for it, and the
// request fails saying the store was closed.
func TestStoreCloseDuringRequest(t *testing.T) {
	groups := job(t, 2, TCPOptions{}, nil)
	s1 := groups[1].store
	got := make(chan error, 1)
	go func() {
		_, err := s1.GetTimeout("never", time.Minute)
		got <- err
	}()
	time.Sleep(100 * time.Millisecond) // the Get is in flight
	start := time.Now()
	s1.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v with a Get in flight", d)
	}
	select {
	case err := <-got:
		if err == nil || !strings.Contains(err.Error(), "store closed") {
			t.Errorf("the Get in flight: %v, want the store closed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Get in flight did not end within 5 s of Close")
	}
}

// TestStoreRequestAcrossACut: a request to a store that stopped answering
// (the network between them cut) fails once its wait plus the store's
// timeout (here the 5 s floor) has passed, not 30 s later, so that a rank
// cut off in a request of its own gives up within the timeout too.
func TestStoreRequestAcrossACut(t *testing.T) {
	ln := listen(t)
	proxy := newCutProxy(t, ln.Addr().String())
	stores := make([]*Store, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() {
			cfg := StoreConfig{Addr: proxy.Addr(), Rank: r, World: 2, Secret: testSecret, Timeout: 2 * time.Second, Log: &testenv.SyncBuffer{}}
			if r == 0 {
				cfg.Addr, cfg.Listener = ln.Addr().String(), ln
			}
			stores[r], errs[r] = NewStore(context.Background(), cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	defer stores[0].Close()
	defer stores[1].Close()
	proxy.Cut()
	start := time.Now()
	err := stores[1].Set("across", []byte("the cut"))
	took := time.Since(start)
	t.Logf("the Set failed after %v: %v", took.Round(time.Millisecond), err)
	if err == nil || !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "no reply within 5s") {
		t.Errorf("a Set across the cut: %v, want a timeout", err)
	}
	if took < 4*time.Second || took > 8*time.Second {
		t.Errorf("the Set across the cut failed after %v, want about 5 s", took)
	}
}

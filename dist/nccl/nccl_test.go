package nccl

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/dist"
)

// Where NCCL is absent, opening it says so, naming the library and where it
// was looked for.
func TestMissingLibrary(t *testing.T) {
	t.Setenv("FLEET_CUDA_PATH", t.TempDir())
	if _, err := libs.Search(libs.NCCL); err == nil {
		t.Skip("libnccl.so.2 is installed here")
	}
	_, err := Open()
	if err == nil {
		t.Fatal("Open without NCCL: no error")
	}
	if !errors.Is(err, libs.ErrNotFound) || !strings.Contains(err.Error(), "libnccl.so.2") || !strings.Contains(err.Error(), "need NCCL") {
		t.Fatalf("err = %v", err)
	}
	if _, err := NewGroup(nil, ""); err == nil || !strings.Contains(err.Error(), "libnccl.so.2") {
		t.Fatalf("NewGroup: %v", err)
	}
}

func TestVersionString(t *testing.T) {
	for code, want := range map[int]string{21905: "2.19.5", 22805: "2.28.5", 2708: "2.7.8"} {
		if got := VersionString(code); got != want {
			t.Errorf("VersionString(%d) = %s, want %s", code, got, want)
		}
	}
}

func stores(t *testing.T, world int, timeout time.Duration) []*dist.Store {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*dist.Store, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			cfg := dist.StoreConfig{Addr: ln.Addr().String(), Rank: r, World: world, Secret: "nccl-test", Timeout: timeout, Log: io.Discard}
			if r == 0 {
				cfg.Listener = ln
			}
			out[r], errs[r] = dist.NewStore(context.Background(), cfg)
		})
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Cleanup(func() {
		for r := world - 1; r >= 0; r-- {
			out[r].Close()
		}
	})
	return out
}

// The unique id made on rank 0 reaches every rank through the store, and
// every rank then joins with it. (A fake id and a fake ncclCommInitRank:
// NCCL itself is not exercised here.)
func TestIDExchange(t *testing.T) {
	const world = 3
	ss := stores(t, world, 5*time.Second)
	var made UniqueID
	rand.Read(made[:])
	gens := 0
	var mu sync.Mutex
	got := make([]UniqueID, world)
	groups := make([]*Group, world)
	errs := make([]error, world)
	var wg sync.WaitGroup
	for r := range world {
		wg.Go(func() {
			gen := func() (UniqueID, error) {
				mu.Lock()
				gens++
				mu.Unlock()
				return made, nil
			}
			initRank := func(w, rank int, id UniqueID) (*Comm, error) {
				got[rank] = id
				return &Comm{rank: rank, size: w}, nil
			}
			for range 2 { // two communicators: their ids do not mix
				groups[r], errs[r] = newGroup(ss[r], "", gen, initRank)
			}
		})
	}
	wg.Wait()
	for r := range world {
		if errs[r] != nil {
			t.Fatalf("rank %d: %v", r, errs[r])
		}
		if got[r] != made {
			t.Errorf("rank %d got another id", r)
		}
		if groups[r].Rank() != r || groups[r].Size() != world {
			t.Errorf("rank %d: group says rank %d of %d", r, groups[r].Rank(), groups[r].Size())
		}
	}
	if gens != 2 {
		t.Errorf("the id was made %d times, want once per communicator", gens)
	}
}

// A rank that never comes is named before ncclCommInitRank could block.
func TestBarrierBeforeInit(t *testing.T) {
	ss := stores(t, 2, 300*time.Millisecond)
	gen := func() (UniqueID, error) { return UniqueID{1}, nil }
	initRank := func(w, rank int, id UniqueID) (*Comm, error) {
		t.Error("ncclCommInitRank called without rank 1")
		return nil, nil
	}
	_, err := newGroup(ss[0], "x", gen, initRank)
	if err == nil || !strings.Contains(err.Error(), "nccl/x/ready/1") {
		t.Fatalf("err = %v", err)
	}
}

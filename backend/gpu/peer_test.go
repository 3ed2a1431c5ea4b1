package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/cpu" // registers cpu
	"github.com/fleetml/fleet/tensor"
)

// TestCopyFromPeer copies between two devices device to device: random
// elements of each dtype land at their offsets, neither device copies
// through the host, and a backend of another kind is declined.
func TestCopyFromPeer(t *testing.T) {
	fa, fb := newFakeGPU(1<<20), newFakeGPU(1<<20)
	a := New(backend.Device{Kind: "cuda", Index: 0}, fa)
	b := New(backend.Device{Kind: "cuda", Index: 1}, fb)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dt := range []backend.DType{backend.F32, backend.BF16, backend.I32} {
		src := a.Alloc(dt, 100)
		want := make([]byte, 100*dt.Size())
		for i := range want {
			want[i] = byte(rng.Uint32())
		}
		a.Upload(backend.Ref{S: src}, want)
		dst := b.Alloc(dt, 64)
		hostA, hostB := fa.hostCopies, fb.hostCopies
		if !b.CopyFrom(backend.Ref{S: dst, Off: 5}, a, backend.Ref{S: src, Off: 30}, 50) {
			t.Fatalf("%v: CopyFrom between two CUDA devices declined", dt)
		}
		if fa.hostCopies != hostA || fb.hostCopies != hostB || fb.peerCopies == 0 {
			t.Errorf("%v: the copy went through the host (%d, %d host copies; %d peer copies)",
				dt, fa.hostCopies-hostA, fb.hostCopies-hostB, fb.peerCopies)
		}
		got := make([]byte, 50*dt.Size())
		b.Download(got, backend.Ref{S: dst, Off: 5})
		if string(got) != string(want[30*dt.Size():80*dt.Size()]) {
			t.Errorf("%v: the copy's elements differ from the source's", dt)
		}
		if err := deviceError(func() { b.CopyFrom(backend.Ref{S: dst, Off: 20}, a, backend.Ref{S: src}, 50) }); err == nil {
			t.Errorf("%v: a copy past the end of its destination was accepted", dt)
		}
	}
	if err := deviceError(func() {
		b.CopyFrom(backend.Ref{S: b.Alloc(backend.F32, 4)}, a, backend.Ref{S: a.Alloc(backend.BF16, 4)}, 4)
	}); err == nil {
		t.Error("a copy between dtypes was accepted")
	}
	host, _ := backend.Get(backend.Device{Kind: "cpu"})
	if b.CopyFrom(backend.Ref{S: b.Alloc(backend.F32, 4)}, host, backend.Ref{S: host.Alloc(backend.F32, 4)}, 4) {
		t.Error("CopyFrom accepted the CPU's storage")
	}
	var _ backend.PeerCopier = b
}

// TestToBetweenDevices moves tensors between two CUDA devices with
// tensor.To, as pipeline stages hand activations and gradients on: the
// values arrive, device to device, with no host<->device bytes counted.
func TestToBetweenDevices(t *testing.T) {
	fa, fb := newFakeGPU(1<<20), newFakeGPU(1<<20)
	da, db := fakeDevice(t, 7, fa), fakeDevice(t, 8, fb)
	rng := rand.New(rand.NewPCG(3, 4))
	vals := make([]float32, 3*5)
	for i := range vals {
		vals[i] = rng.Float32()*2 - 1
	}
	var got []float32
	err := tensor.Catch(func() {
		x := tensor.FromFloat32s(da, vals, 3, 5)
		beB, _ := backend.Get(db)
		copiedB := beB.MemStats().Copied
		y := x.To(db)
		if y.Device() != db || fb.peerCopies != 1 || beB.MemStats().Copied != copiedB {
			t.Errorf("To: device %v, %d peer copies, %d host<->device bytes; want %v, 1, 0",
				y.Device(), fb.peerCopies, beB.MemStats().Copied-copiedB, db)
		}
		got = y.Float32s()
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range vals {
		if got[i] != vals[i] {
			t.Fatalf("element %d: %v after the copy, %v before", i, got[i], vals[i])
		}
	}
}

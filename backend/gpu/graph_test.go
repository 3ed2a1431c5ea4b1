package gpu

import (
	"math/rand/v2"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// TestGraphReplaysABackwardPass captures a GPT's forward and backward pass
// on the emulated device, reading its batch from tensors made before the
// capture, and replays it on new batches copied into them: the gradients
// are bit for bit those of running the pass itself.
func TestGraphReplaysABackwardPass(t *testing.T) {
	dev := fakeDevice(t, 22, newFakeGPU(256<<20).withEmulator(t))
	cfg := model.Config{VocabSize: 11, BlockSize: 8, NLayer: 2, NHead: 2, NEmbd: 16}
	m, err := model.New(cfg, dev, 5)
	if err != nil {
		t.Fatal(err)
	}
	be, _ := backend.Get(dev)
	gr := be.(backend.Grapher)
	B, T := 2, 7
	r := rand.New(rand.NewPCG(3, 4))
	batch := func() ([]int32, []int32) {
		x, y := make([]int32, B*T), make([]int32, B*T)
		for i := range x {
			x[i], y[i] = int32(r.IntN(cfg.VocabSize)), int32(r.IntN(cfg.VocabSize))
		}
		return x, y
	}
	params := m.Parameters()
	grads := func() [][]float32 {
		var out [][]float32
		for _, p := range params {
			out = append(out, p.T.Grad.Float32s())
		}
		return out
	}
	var xs, ys *tensor.Tensor
	pass := func() {
		tensor.Step(func() { m.Loss(xs, ys).Backward() })
	}
	err = tensor.Catch(func() {
		x0, y0 := batch()
		xs, ys = tensor.FromInt32s(dev, x0, B, T), tensor.FromInt32s(dev, y0, B, T)
		pass() // the first pass makes the gradients and fills the pool
		for _, p := range params {
			tensor.ZeroGradInPlace(p.T)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := gr.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	err = tensor.Catch(func() {
		for _, p := range params {
			tensor.ZeroGradInPlace(p.T)
		}
		pass()
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gr.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Free()
	for round := 0; round < 2; round++ {
		xv, yv := batch()
		var want, got [][]float32
		err := tensor.Catch(func() {
			xn, yn := tensor.FromInt32s(dev, xv, B, T), tensor.FromInt32s(dev, yv, B, T)
			xs.CopyFrom(xn)
			ys.CopyFrom(yn)
			xn.Free()
			yn.Free()
			for _, p := range params { // the pass itself
				tensor.ZeroGradInPlace(p.T)
			}
			pass()
			want = grads()
			for _, p := range params {
				tensor.Fill(p.T.Grad, 7) // the graph zeroes them itself
			}
			if err := g.Launch(); err != nil {
				panic(err)
			}
			got = grads()
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			for j := range want[i] {
				if got[i][j] != want[i][j] {
					t.Fatalf("round %d: gradient of %s[%d] is %v from the graph, %v from the pass", round, params[i].Name, j, got[i][j], want[i][j])
				}
			}
		}
	}
}

// TestGraphKeepsItsMemory: blocks a capture was handed belong to the
// graph: freed, they go to later captures only, never to other tensors
// (which the graph's launches would overwrite), until the graph is freed.
func TestGraphKeepsItsMemory(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	c := be.(*Backend)
	const n = 3<<20 + 7 // a size class of its own in this test
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	inGraph := c.Alloc(backend.F32, n)
	addr := c.buf(inGraph).ptr
	c.Free(inGraph)
	g, err := c.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	other := c.Alloc(backend.F32, n)
	if c.buf(other).ptr == addr {
		t.Fatal("a tensor made after the capture got the graph's block")
	}
	c.Free(other)
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	again := c.Alloc(backend.F32, n)
	if c.buf(again).ptr != addr {
		t.Error("a later capture did not reuse the graphs' block")
	}
	c.Free(again)
	g2, err := c.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	g2.Free()
	g.Free()
	// With no graph left, the block is everyone's again.
	back := []backend.Storage{c.Alloc(backend.F32, n), c.Alloc(backend.F32, n)}
	found := false
	for _, s := range back {
		found = found || c.buf(s).ptr == addr
		c.Free(s)
	}
	if !found {
		t.Error("the graphs' block did not return to the pool")
	}
}

// TestFailedCaptureReturnsItsMemory: a capture that makes no graph (the
// driver refused it) leaves none of its blocks to the graphs.
func TestFailedCaptureReturnsItsMemory(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	c := be.(*Backend)
	const n = 5<<20 + 3
	if err := c.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	s := c.Alloc(backend.F32, n)
	addr := c.buf(s).ptr
	c.Free(s)
	if g, err := c.g.EndCapture(); err == nil { // the capture ends behind the backend's back
		g.Free()
	}
	if _, err := c.EndCapture(); err == nil {
		t.Fatal("ending a capture the driver no longer has succeeded")
	}
	again := c.Alloc(backend.F32, n)
	defer c.Free(again)
	if c.buf(again).ptr != addr {
		t.Error("the failed capture's block did not return to the pool")
	}
}

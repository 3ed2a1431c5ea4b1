package cuda_test

import (
	"strings"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu"
	"github.com/fleetml/fleet/backend/gpu/cuda"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/tensor"
)

// TestGraphOnSimulatedGPU captures some work on the simulated H200: the
// capture runs nothing and counts nothing, a wait for the device during it
// is refused, and each launch of the graph counts each of its nodes.
func TestGraphOnSimulatedGPU(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	c, dev := be.(*gpu.Backend), backend.Device{Kind: "sim"}
	sd := sim.Of(c)
	x := tensor.Ones(dev, 64, 64)
	defer x.Free()
	before := sd.Counters()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.BeginCapture())
	err = tensor.Catch(func() {
		tensor.Step(func() { tensor.Softmax(tensor.GELU(tensor.Add(x, x))) })
	})
	must(err)
	g, err := c.EndCapture()
	must(err)
	defer g.Free()
	if w := sd.Counters().Sub(before); w.Launches != 0 {
		t.Fatalf("the capture counted %d launches (%v)", w.Launches, w.ByKernel)
	}
	for range 3 {
		must(g.Launch())
	}
	w := sd.Counters().Sub(before)
	for _, k := range []string{"fleet_binary_f32", "fleet_gelu_f32", "fleet_softmax_f32"} {
		if w.ByKernel[k] != 3 {
			t.Errorf("%s ran %d times in 3 launches of the graph (%v)", k, w.ByKernel[k], w.ByKernel)
		}
	}
	if w.Launches != 9 {
		t.Errorf("%d launches counted, want 9", w.Launches)
	}
	// The host cannot wait for work that is only being recorded.
	must(c.BeginCapture())
	err = tensor.Catch(func() { tensor.Step(func() { x.Float32s() }) })
	if err == nil || !strings.Contains(err.Error(), "CAPTURE") {
		t.Errorf("a read during a capture: %v", err)
	}
	if g, err := c.EndCapture(); err == nil {
		g.Free()
	}
}

// TestDeviceErrorNamesTheWork: a kernel's failure reaches the host at its
// next wait, where the driver does not say which launch failed; the
// backend's error names the work queued since the last clean wait.
func TestDeviceErrorNamesTheWork(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	dev, sd := backend.Device{Kind: "sim"}, sim.Of(be)
	err = tensor.Catch(func() {
		tensor.Step(func() {
			x := tensor.Ones(dev, 4, 8)
			tensor.GELU(tensor.Add(x, x)).Float32s() // a clean wait
			y := tensor.Softmax(tensor.Add(x, x))
			sd.FailNextWait(700)
			y.Float32s()
		})
	})
	if err == nil {
		t.Fatal("the injected failure was not reported")
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.Contains(msg, "fleet_softmax_f32") || !strings.Contains(msg, "fleet_binary_f32") || strings.Contains(msg, "fleet_gelu_f32") {
		t.Fatalf("the error does not name the work queued since the last wait (softmax, binary; not gelu): %v", err)
	}
	// The device goes on: the next wait is clean.
	if err := tensor.Catch(func() { tensor.Step(func() { tensor.Ones(dev, 1).Item() }) }); err != nil {
		t.Fatal(err)
	}
}

// TestLtWorkspace: cuBLASLt's products get the device's 32 MiB workspace,
// a live block of device memory (the simulated cuBLASLt fails a call whose
// workspace is not).
func TestLtWorkspace(t *testing.T) {
	be, err := backend.Get(backend.Device{Kind: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	sd := sim.Of(be)
	gp, ok := be.(backend.GELUProducts)
	if !ok {
		t.Fatal("the simulated GPU has no GELU products")
	}
	const n = 16
	a, out, pre := be.Alloc(backend.F32, n*n), be.Alloc(backend.F32, n*n), be.Alloc(backend.F32, n*n)
	defer be.Free(a)
	defer be.Free(out)
	defer be.Free(pre)
	before := sd.Counters()
	if err := tensor.Catch(func() {
		gp.MatMulGELU(backend.MatMul{Batch: 1, M: n, N: n, K: n, Alpha: 1}, backend.Ref{S: a}, backend.Ref{S: a}, backend.Ref{S: out}, backend.Ref{S: pre}, backend.Ref{})
	}); err != nil {
		t.Fatal(err)
	}
	if w := sd.Counters().Sub(before); w.ByKernel["cublasLtMatmul"] != 1 {
		t.Fatalf("the GELU product did not go to cuBLASLt: %v", w.ByKernel)
	}
	if got := sd.LtWorkspaceBytes(); got != cuda.LtWorkspaceBytes || cuda.LtWorkspaceBytes != 32<<20 {
		t.Errorf("cuBLASLt was given %d bytes of workspace, want 32 MiB", got)
	}
}

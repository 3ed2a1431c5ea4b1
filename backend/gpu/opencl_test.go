package gpu

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/tensor"
)

// openCLDevice is opencl:0, or skips the test, saying why, where no
// OpenCL device is found.
func openCLDevice(t testing.TB) tensor.Device {
	t.Helper()
	if err := OpenCLProbe(); err != nil {
		testenv.NoOpenCL(t, err)
	}
	d := backend.Device{Kind: "opencl"}
	if _, err := backend.Get(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpsOnOpenCL holds every backend op to the CPU backend on opencl:0
// (PoCL in CI), running the OpenCL kernels for real.
func TestOpsOnOpenCL(t *testing.T) {
	be, _ := backend.Get(openCLDevice(t))
	checkBackendOps(t, be)
}

// TestGPTOnOpenCL is TestGPTOnEmulatedDevice's check on opencl:0: a small
// GPT's loss, gradients and weights after optimizer steps agree with the
// CPU's, in F32 and with bf16 activations.
func TestGPTOnOpenCL(t *testing.T) { checkGPTTraining(t, openCLDevice(t)) }

// openCLBackend is opencl:0's backend (see openCLDevice).
func openCLBackend(t *testing.T) *Backend {
	be, _ := backend.Get(openCLDevice(t))
	return be.(*Backend)
}

// TestOpenCLMemory: copies at offsets inside blocks, the pool's reuse,
// and out-of-memory as backend.ErrOutOfMemory, on opencl:0.
func TestOpenCLMemory(t *testing.T) {
	c := openCLBackend(t)
	s := c.Alloc(backend.F32, 16)
	defer c.Free(s)
	v := []float32{1, 2, 3, 4, 5}
	c.Upload(backend.Ref{S: s, Off: 3}, backend.AsBytes(v))
	d := c.Alloc(backend.F32, 8)
	defer c.Free(d)
	c.Copy(backend.Ref{S: d, Off: 1}, backend.Ref{S: s, Off: 4}, 3)
	got := make([]float32, 3)
	c.Download(backend.AsBytes(got), backend.Ref{S: d, Off: 1})
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Errorf("round trip gave %v", got)
	}
	a := c.Alloc(backend.F32, 1000)
	c.Free(a)
	if b := c.Alloc(backend.F32, 1010); b.(*Buffer).ptr != a.(*Buffer).ptr {
		t.Error("a block of the same class was not reused")
	} else {
		c.Free(b)
	}
	_, total, err := c.g.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	huge := int(total/4) + 1 // past the device's memory, and so past its largest buffer
	err = deviceError(func() { c.Alloc(backend.F32, huge) })
	if err == nil || !errors.Is(err, backend.ErrOutOfMemory) {
		t.Fatalf("want an out-of-memory device error for %d floats, got %v", huge, err)
	}
	t.Log(err)
}

// TestOpenCLUploadAsyncAndTimer: an upload from mapped host memory on the
// upload queue, ordered before the compute queue's reads, and the
// queues' timing marks.
func TestOpenCLUploadAsyncAndTimer(t *testing.T) {
	c := openCLBackend(t)
	pinned, err := c.PinnedAlloc(12)
	if err != nil {
		t.Fatal(err)
	}
	copy(pinned, backend.AsBytes([]float32{1, 2, 3}))
	s := c.Alloc(backend.F32, 5)
	defer c.Free(s)
	c.Fill(backend.Ref{S: s}, 9, 5)
	u := c.UploadAsync(backend.Ref{S: s, Off: 2}, pinned)
	if err := u.Ready(); err != nil {
		t.Fatal(err)
	}
	c.Scale(backend.Ref{S: s}, backend.Ref{S: s}, 2, 5) // queued after the copy
	if err := u.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 5)
	c.Download(backend.AsBytes(got), backend.Ref{S: s})
	if fmt.Sprint(got) != "[18 18 2 4 6]" {
		t.Errorf("async upload then scale gave %v", got)
	}
	if err := deviceError(func() { c.UploadAsync(backend.Ref{S: s, Off: 4}, pinned) }); err == nil {
		t.Error("an async upload past the end was accepted")
	}
	if err := c.PinnedFree(pinned); err != nil {
		t.Error(err)
	}

	var tm backend.Timer = c
	a, err := tm.Mark()
	if err != nil {
		t.Fatal(err)
	}
	big := c.Alloc(backend.F32, 1<<20)
	defer c.Free(big)
	for range 20 {
		c.Fill(backend.Ref{S: big}, 1, 1<<20)
	}
	b, err := tm.Mark()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := tm.Elapsed(a, b)
	if err != nil || !(ms > 0) || ms > 60000 {
		t.Errorf("elapsed %v ms (err %v) across 20 fills of 4 MiB", ms, err)
	}
	t.Logf("20 fills of 4 MiB: %.3f ms on the device's clock", ms)
	tm.ReleaseMark(a)
	tm.ReleaseMark(b)
}

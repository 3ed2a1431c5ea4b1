package opencl

import (
	"bytes"
	"testing"

	"github.com/fleetml/fleet/backend/gpu"
)

// TestDriverPointers: the driver's gpu.Ptr is its buffer's cl_mem and a
// byte offset in it, read as such: bytes written at an offset come back
// from there, and a block that is not one of its buffers, an offset past a
// buffer's end, a free inside a buffer and a request for a device address
// are refused.
func TestDriverPointers(t *testing.T) {
	devices(t)
	g, err := openCLGPU(0)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	p, err := g.MemAlloc(256)
	if err != nil {
		t.Fatal(err)
	}
	if b := g.blocks[p.Block]; b == nil || uint64(b.mem) != p.Block || p.Off != 0 {
		t.Fatalf("MemAlloc gave %+v, not a buffer's cl_mem at offset 0", p)
	}
	want := []byte("sixteen bytes!!!")
	if err := g.HtoD(p.Add(64), want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	if err := g.DtoH(got, p.Add(64)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back %q (%v), want %q", got, err, want)
	}
	if err := g.DtoH(got, gpu.Ptr{Block: p.Block + 1}); err == nil {
		t.Error("a block that is no buffer of the device was read")
	}
	if err := g.HtoD(p.Add(257), want[:0]); err == nil {
		t.Error("an offset past the buffer's end was accepted")
	}
	if err := g.MemFree(p.Add(4)); err == nil {
		t.Error("a free inside a buffer was accepted")
	}
	if _, err := g.Address(p); err == nil {
		t.Error("an OpenCL buffer has a device address")
	}
	if err := g.MemFree(p); err != nil {
		t.Fatal(err)
	}
	if len(g.blocks) != 0 || g.allocated != 0 {
		t.Errorf("after the free: %d buffers, %d bytes", len(g.blocks), g.allocated)
	}
}

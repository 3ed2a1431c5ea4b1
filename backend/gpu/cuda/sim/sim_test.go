package sim

import (
	"errors"
	"math"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func open(t *testing.T, spec Spec) (*Device, *driver.Driver) {
	d := New(spec)
	drv := driver.Load(d.Driver())
	must(t, drv.Init())
	return d, drv
}

// TestMemoryAccounts allocates against a small device's capacity: what is
// in use and free is reported as the driver would, a request past the
// capacity fails as out of memory, and frees wait for the device.
func TestMemoryAccounts(t *testing.T) {
	spec := Specs[0]
	spec.Memory = 1 << 20
	d, drv := open(t, spec)
	a, err := drv.MemAlloc(600 << 10)
	must(t, err)
	if _, err := drv.MemAlloc(500 << 10); !errors.Is(err, driver.ErrOutOfMemory) {
		t.Fatalf("an allocation past the capacity: %v, want out of memory", err)
	}
	b, err := drv.MemAlloc(400 << 10)
	must(t, err)
	if free, total, err := drv.MemGetInfo(); err != nil || total != 1<<20 || free != 24<<10 {
		t.Errorf("MemGetInfo: free %d, total %d, %v; want %d of %d", free, total, err, 24<<10, 1<<20)
	}
	must(t, drv.MemFree(a))
	if err := drv.MemFree(a); err == nil {
		t.Error("a double free was accepted")
	}
	must(t, drv.MemFree(b))
	c := d.Counters()
	if c.DriverAllocs != 2 || c.Peak != 1000<<10 || c.HostSyncs != 2 || d.Used() != 0 {
		t.Errorf("counters %+v, used %d; want 2 allocations, peak %d, 2 host waits (the frees), 0 used", c, d.Used(), 1000<<10)
	}
}

// TestCopiesAndSyncs counts bytes both ways and the copies that make the
// host wait, and reads back zeros: the device holds no data.
func TestCopiesAndSyncs(t *testing.T) {
	d, drv := open(t, Specs[0])
	p, err := drv.MemAlloc(4096)
	must(t, err)
	s, err := drv.StreamCreate(driver.StreamNonBlocking)
	must(t, err)
	host := make([]byte, 1024)
	for i := range host {
		host[i] = byte(i) | 1
	}
	pinned, err := drv.MemHostAlloc(256, 0)
	must(t, err)
	base := d.Counters()
	must(t, drv.MemcpyHtoD(p, unsafe.Pointer(&host[0]), 1024))        // waits
	must(t, drv.MemcpyHtoDAsync(p, unsafe.Pointer(&host[0]), 512, s)) // staged: no wait
	must(t, drv.MemcpyDtoHAsync(pinned, p, 256, s))                   // pinned: no wait
	must(t, drv.MemcpyDtoH(unsafe.Pointer(&host[0]), p, 1024))        // waits
	must(t, drv.StreamSynchronize(s))                                 // waits
	w := d.Counters().Sub(base)
	if w.H2DBytes != 1536 || w.D2HBytes != 1280 || w.HostSyncs != 3 || w.Launches != 4 || w.ByKernel["memcpyHtoD"] != 2 {
		t.Errorf("window %+v; want 1536 B in, 1280 B out, 3 host waits, 4 copies", w)
	}
	for i, v := range host {
		if v != 0 {
			t.Fatalf("byte %d read back as %d, want 0", i, v)
		}
	}
}

// TestKernelLaunch compiles a kernel through the NVRTC stand-in, loads it
// and launches it: the launch is counted under its name, its bytes are
// the extents its pointer arguments reach into, its FLOPs the kernel's
// formula over its scalar arguments, and its time the cost model's.
func TestKernelLaunch(t *testing.T) {
	d, drv := open(t, Specs[0])
	nv, err := nvrtc.Load(d.NVRTC())
	must(t, err)
	f, mod := load(t, nv, drv, `extern "C" __global__ void fleet_axpy_f32(float *__restrict__ dst, const float *__restrict__ x, float alpha, long long n) {}`, "fleet_axpy_f32")
	if _, err := drv.ModuleGetFunction(mod, "fleet_nope"); err == nil {
		t.Error("a kernel the module lacks was found")
	}
	dst, _ := drv.MemAlloc(4000)
	x, _ := drv.MemAlloc(8000)
	base := d.Counters()
	args := driver.NewArgs().Ptr(dst).Ptr(x + 4000).Float32(2).Int64(1000)
	must(t, drv.LaunchKernel(f, driver.Dim3{X: 4, Y: 1, Z: 1}, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, 0, args))
	w := d.Counters().Sub(base)
	wantBytes := 2*4000.0 + 4000 // dst read and written, x from its middle
	wantSec := max(wantBytes/(BandwidthEfficiency*Specs[0].HBM), 2000/(CUDACoreEfficiency*Specs[0].FP32*1e12)) + LaunchSeconds
	if w.Launches != 1 || w.ByKernel["fleet_axpy_f32"] != 1 || w.BytesTouched != wantBytes || w.FLOPs != 2000 ||
		math.Abs(w.DeviceSeconds-wantSec) > 1e-15 {
		t.Errorf("window %+v; want 1 launch, %g bytes, 2000 FLOPs, %g s", w, wantBytes, wantSec)
	}
	if fl := kernels.FLOPs("fleet_axpy_f32", func(string) float64 { return 1000 }); fl != w.FLOPs {
		t.Errorf("the recorded FLOPs %g are not the formula's %g", w.FLOPs, fl)
	}
	// A view into a larger block counts its own elements, not the block's.
	base = d.Counters()
	must(t, drv.LaunchKernel(f, driver.Dim3{X: 1, Y: 1, Z: 1}, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, 0,
		driver.NewArgs().Ptr(x).Ptr(x+400).Float32(1).Int64(100)))
	if w := d.Counters().Sub(base); w.BytesTouched != 1200 {
		t.Errorf("100 elements of an 8000-byte block: %g bytes, want 1200 (dst twice, x once)", w.BytesTouched)
	}
	// Each pointer is charged for its own extent: a LayerNorm's weight
	// and bias, views of 8 floats into a large parameter buffer, cost 32
	// bytes each, not the buffer's rest; x, out [rows, cols] and mean,
	// rstd [rows] theirs.
	fl, _ := load(t, nv, drv, `extern "C" __global__ void fleet_layernorm_f32(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {}`, "fleet_layernorm_f32")
	params, _ := drv.MemAlloc(1 << 20)
	act, _ := drv.MemAlloc(1 << 20)
	base = d.Counters()
	must(t, drv.LaunchKernel(fl, driver.Dim3{X: 1, Y: 1, Z: 1}, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, 0,
		driver.NewArgs().Ptr(act).Ptr(act+4096).Ptr(act+8192).Ptr(act+16384).Ptr(params+64).Ptr(params+96).Int(4).Int(8).Float32(1e-5)))
	if w, want := d.Counters().Sub(base), 4.0*(4*8+4+4+4*8+8+8); w.BytesTouched != want {
		t.Errorf("a LayerNorm of 4 rows of 8 with its parameters in a 1 MiB buffer: %g bytes, want %g", w.BytesTouched, want)
	}
	// An opcode is no extent: an add (op 0) of 100 elements reads and
	// writes its 3 × 400 bytes.
	fb, _ := load(t, nv, drv, `extern "C" __global__ void fleet_binary_f32(float *dst, const float *a, const float *b, int op, long long n) {}`, "fleet_binary_f32")
	base = d.Counters()
	must(t, drv.LaunchKernel(fb, driver.Dim3{X: 1, Y: 1, Z: 1}, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, 0,
		driver.NewArgs().Ptr(x).Ptr(x+400).Ptr(x+800).Int(0).Int64(100)))
	if w := d.Counters().Sub(base); w.BytesTouched != 1200 {
		t.Errorf("an add of 100 elements: %g bytes, want 1200", w.BytesTouched)
	}
}

// load compiles src through the NVRTC stand-in, loads it and returns its
// kernel name and its module.
func load(t *testing.T, nv *nvrtc.NVRTC, drv *driver.Driver, src, name string) (driver.Function, driver.Module) {
	t.Helper()
	img, _, err := nv.Compile(src, name+".cu", "sm_90")
	must(t, err)
	mod, err := drv.ModuleLoadData(img)
	must(t, err)
	f, err := drv.ModuleGetFunction(mod, name)
	must(t, err)
	return f, mod
}

// TestGEMMAndEvents records a cuBLAS product on the unit its types run on,
// and times it between two events by the cost model.
func TestGEMMAndEvents(t *testing.T) {
	d, drv := open(t, Specs[0])
	b := cublas.Load(d.CUBLAS())
	h, err := b.Create()
	must(t, err)
	e0, _ := drv.EventCreate(0)
	e1, _ := drv.EventCreate(0)
	a, _ := drv.MemAlloc(1 << 20)
	must(t, drv.EventRecord(e0, 0))
	g := &cublas.Gemm{M: 256, N: 512, K: 1024, Alpha: 1, A: uint64(a), B: uint64(a), C: uint64(a),
		AType: cublas.R16BF, BType: cublas.R16BF, CType: cublas.R32F, LDA: 256, LDB: 1024, LDC: 256,
		Batch: 3, Compute: cublas.Compute32F}
	must(t, h.GemmStridedBatchedEx(g))
	must(t, drv.EventRecord(e1, 0))
	ms, err := drv.EventElapsedTime(e0, e1)
	must(t, err)
	c := d.Counters()
	flops := 2.0 * 256 * 512 * 1024 * 3
	bytes := 3 * (256*1024*2 + 1024*512*2 + 256*512*4.0)
	want := max(bytes/(BandwidthEfficiency*Specs[0].HBM), flops/(TensorCoreEfficiency*Specs[0].BF16*1e12)) + LaunchSeconds
	if c.FLOPs != flops || c.BytesTouched != bytes || c.ByKernel["cublasGemmStridedBatchedEx"] != 1 {
		t.Errorf("counters %+v; want %g FLOPs, %g bytes", c, flops, bytes)
	}
	if math.Abs(float64(ms)-want*1e3) > 1e-6 {
		t.Errorf("elapsed %g ms, want the model's %g", ms, want*1e3)
	}
	// The same product in F32 runs on CUDA cores: slower in the model.
	g.AType, g.BType, g.Beta = cublas.R32F, cublas.R32F, 1
	before := d.Counters().DeviceSeconds
	must(t, h.GemmStridedBatchedEx(g))
	if f32 := d.Counters().DeviceSeconds - before; f32 <= want {
		t.Errorf("an F32 product took %g s in the model, no more than BF16's %g", f32, want)
	}
}

func TestLookup(t *testing.T) {
	if s, err := Lookup("H200"); err != nil || s.BF16 != 989 || s.HBM != 4.8e12 || s.Memory != 143771<<20 {
		t.Errorf("Lookup(H200) = %+v, %v", s, err)
	}
	if _, err := Lookup("v100"); err == nil {
		t.Error("an unknown model was found")
	}
}

// TestContextHoldsMemory: while the primary context is held it takes
// ContextBytes of the device, which cuMemGetInfo reports as used and
// allocations cannot have; the driver's allocation peak leaves it out.
func TestContextHoldsMemory(t *testing.T) {
	spec := Specs[0]
	spec.Memory = ContextBytes + 1<<20
	d, drv := open(t, spec)
	dev, err := drv.Device(0)
	must(t, err)
	ctx, err := drv.PrimaryCtxRetain(dev)
	must(t, err)
	must(t, drv.CtxSetCurrent(ctx))
	if free, total, err := drv.MemGetInfo(); err != nil || free != 1<<20 || total != uint64(spec.Memory) {
		t.Errorf("with the context held: free %d of %d, %v; want %d free", free, total, err, 1<<20)
	}
	if _, err := drv.MemAlloc(2 << 20); !errors.Is(err, driver.ErrOutOfMemory) {
		t.Errorf("an allocation into the context's memory: %v, want out of memory", err)
	}
	p, err := drv.MemAlloc(1 << 20)
	must(t, err)
	must(t, drv.MemFree(p))
	if c := d.Counters(); c.Peak != 1<<20 {
		t.Errorf("allocation peak %d, want %d (the context left out)", c.Peak, 1<<20)
	}
	must(t, drv.PrimaryCtxRelease(dev))
	if free, _, _ := drv.MemGetInfo(); free != uint64(spec.Memory) {
		t.Errorf("after the release: free %d, want all %d", free, spec.Memory)
	}
}

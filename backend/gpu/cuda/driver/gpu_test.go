package driver_test

import (
	"errors"
	"math"
	"os"
	"runtime"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	"github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
)

const axpySrc = `
extern "C" __global__ void fleet_test_axpy(float *y, const float *x, float a, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		y[i] += a * x[i];
	}
}
`

// TestGPU exercises the bindings on a real device: NVRTC to cubin, module
// load, launch, copies both ways (pinned and not), events, out-of-memory,
// and a cuBLAS GEMM. It skips, saying why, where there is no GPU.
func TestGPU(t *testing.T) {
	d, info := gpu(t)
	t.Logf("driver %s (%s): %+v", d.Lib.Version(), d.Lib.Path, info)
	if m := d.Missing(); len(m) > 0 {
		t.Errorf("driver lacks %v", m)
	}
	free, total, err := d.MemGetInfo()
	t.Logf("memory: %d MiB free of %d MiB (%v)", free>>20, total>>20, err)

	if _, err := d.MemAlloc(1 << 50); !errors.Is(err, driver.ErrOutOfMemory) {
		t.Errorf("1 PiB allocation: %v, want ErrOutOfMemory", err)
	}

	fn := kernel(t, d, info, axpySrc, "axpy.cu", "fleet_test_axpy")

	const n = 1 << 20
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%100), 1
	}
	dx, err := d.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(dx)
	dy, err := d.MemAlloc(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFree(dy)
	if err := d.MemcpyHtoD(dx, unsafe.Pointer(&x[0]), 4*n); err != nil {
		t.Fatal(err)
	}
	if err := d.MemsetD32(dy, math.Float32bits(1), n); err != nil {
		t.Fatal(err)
	}
	// The stream below does not wait for the legacy stream's memset and
	// copy: finish them first.
	if err := d.CtxSynchronize(); err != nil {
		t.Fatal(err)
	}

	s, err := d.StreamCreate(driver.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(s)
	e0, _ := d.EventCreate(driver.EventDefault)
	e1, _ := d.EventCreate(driver.EventDefault)
	defer d.EventDestroy(e0)
	defer d.EventDestroy(e1)
	args := driver.NewArgs()
	if err := d.EventRecord(e0, s); err != nil {
		t.Fatal(err)
	}
	grid := driver.Dim3{X: uint32(info.SMs * 4), Y: 1, Z: 1}
	if err := d.LaunchKernel(fn, grid, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, s, args.Reset().Ptr(dy).Ptr(dx).Float32(0.5).Int64(n)); err != nil {
		t.Fatal(err)
	}
	if err := d.EventRecord(e1, s); err != nil {
		t.Fatal(err)
	}
	pinned, err := d.MemHostAlloc(4*n, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.MemFreeHost(pinned)
	if err := d.MemcpyDtoHAsync(pinned, dy, 4*n, s); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	ms, err := d.EventElapsedTime(e0, e1)
	if err != nil {
		t.Error(err)
	}
	got := unsafe.Slice((*float32)(pinned), n)
	for i := 0; i < n; i += 4999 {
		if want := 1 + 0.5*float32(i%100); got[i] != want {
			t.Fatalf("y[%d] = %v, want %v", i, got[i], want)
		}
	}
	t.Logf("axpy over %d floats: %.3f ms", n, ms)
	if a := testing.AllocsPerRun(100, func() {
		d.LaunchKernel(fn, grid, driver.Dim3{X: 256, Y: 1, Z: 1}, 0, s, args.Reset().Ptr(dy).Ptr(dx).Float32(0).Int64(n))
		d.EventRecord(e1, s)
	}); a != 0 {
		t.Errorf("launch and record allocate %v times", a)
	}
	d.StreamSynchronize(s)

	// cuBLAS: y[2,3] = x[2,4]·W[3,4]ᵀ in F32.
	b, err := cublas.Open()
	if err != nil {
		t.Skipf("no cuBLAS: %v", err)
	}
	v, _ := b.Version()
	t.Logf("cuBLAS %s (%s)", v, b.Lib.Path)
	h, err := b.Create()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Destroy()
	if err := h.SetStream(uintptr(s)); err != nil {
		t.Fatal(err)
	}
	if err := h.SetMathMode(cublas.MathDefault); err != nil {
		t.Error(err)
	}
	xs := []float32{1, 2, 3, 4, 5, 6, 7, 8}
	ws := []float32{1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1}
	if err := d.MemcpyHtoD(dx, unsafe.Pointer(&xs[0]), 4*8); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyHtoD(dy, unsafe.Pointer(&ws[0]), 4*12); err != nil {
		t.Fatal(err)
	}
	if err := d.CtxSynchronize(); err != nil { // before cuBLAS reads them on its stream
		t.Fatal(err)
	}
	dc := dx + 256
	err = h.GemmEx(&cublas.Gemm{TransA: cublas.OpT, TransB: cublas.OpN, M: 3, N: 2, K: 4, Alpha: 1,
		A: uint64(dy), AType: cublas.R32F, LDA: 4, B: uint64(dx), BType: cublas.R32F, LDB: 4,
		C: uint64(dc), CType: cublas.R32F, LDC: 3, Compute: cublas.Compute32F, Algo: cublas.AlgoDefault})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 6)
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoH(unsafe.Pointer(&out[0]), dc, 4*6); err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 2, 10, 5, 6, 26}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("GEMM y = %v, want %v", out, want)
		}
	}
}

// TestGPUWarpMatrixProbe runs the warp-level matrix primitives' probe
// (kernels/testdata/mma_probe.cu: cp.async, ldmatrix plain and .trans,
// mma.sync m16n8k16 bf16) on cuda:0 and holds D to float64: the fragment
// layouts the emulator assumes, confirmed on hardware. It skips where
// there is no GPU.
func TestGPUWarpMatrixProbe(t *testing.T) {
	d, info := gpu(t)
	if info.Major < 8 {
		t.Skipf("%s: mma.sync on bf16 needs sm_80 or later", info.Arch())
	}
	src, err := os.ReadFile("../kernels/testdata/mma_probe.cu")
	if err != nil {
		t.Fatal(err)
	}
	unit := kernels.NVRTCSource(kernels.File{Name: "mma_probe.cu", Source: string(src)})
	fn := kernel(t, d, info, unit, "mma_probe.cu", "fleet_probe_mma_bf16")
	a, b, c := make([]uint16, 16*16), make([]uint16, 16*8), make([]float32, 16*8)
	for i := range a {
		a[i] = backend.F32ToBF16(float32(math.Sin(float64(3*i + 1))))
	}
	for i := range b {
		b[i] = backend.F32ToBF16(float32(math.Cos(float64(5*i + 2))))
		c[i] = float32(i%7) - 3
	}
	up := func(p unsafe.Pointer, n uint64) driver.DevicePtr {
		dp, err := d.MemAlloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if p != nil {
			if err := d.MemcpyHtoD(dp, p, n); err != nil {
				t.Fatal(err)
			}
		}
		return dp
	}
	da, db, dc, dd := up(unsafe.Pointer(&a[0]), 2*16*16), up(unsafe.Pointer(&b[0]), 2*16*8), up(unsafe.Pointer(&c[0]), 4*16*8), up(nil, 4*16*8)
	for _, p := range []driver.DevicePtr{da, db, dc, dd} {
		defer d.MemFree(p)
	}
	s, err := d.StreamCreate(driver.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer d.StreamDestroy(s)
	args := driver.NewArgs()
	if err := d.LaunchKernel(fn, driver.Dim3{X: 1, Y: 1, Z: 1}, driver.Dim3{X: 32, Y: 1, Z: 1}, 0, s, args.Reset().Ptr(dd).Ptr(da).Ptr(db).Ptr(dc)); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, 16*8)
	if err := d.MemcpyDtoH(unsafe.Pointer(&got[0]), dd, 4*16*8); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 16; i++ {
		for j := 0; j < 8; j++ {
			want := float64(c[i*8+j])
			for k := 0; k < 16; k++ {
				want += float64(backend.BF16ToF32(a[i*16+k])) * float64(backend.BF16ToF32(b[k*8+j]))
			}
			if diff := math.Abs(float64(got[i*8+j]) - want); diff > 1e-4*(1+math.Abs(want)) {
				t.Fatalf("D[%d][%d] = %v on the GPU, want %v: the fragment layouts differ from the emulator's", i, j, got[i*8+j], want)
			}
		}
	}
}

// gpu opens the driver with device 0's primary context current on the
// test's OS thread (locked to it until the test ends), or skips, saying
// why, where there is no GPU.
func gpu(t *testing.T) (*driver.Driver, driver.Info) {
	t.Helper()
	d, err := driver.Open()
	if err != nil {
		t.Skipf("no CUDA driver: %v", err)
	}
	if err := d.Init(); err != nil {
		t.Skipf("cuInit: %v", err)
	}
	if n, err := d.DeviceCount(); err != nil || n == 0 {
		t.Skipf("no CUDA device (%d, %v)", n, err)
	}
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	info, err := d.DeviceInfo(0)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := d.Device(0)
	ctx, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.PrimaryCtxRelease(dev) })
	if err := d.CtxSetCurrent(ctx); err != nil {
		t.Fatal(err)
	}
	return d, info
}

// kernel compiles unit (named file) with NVRTC for the device and loads
// it, unloading it when the test ends, and returns its kernel name. It
// skips, saying why, where NVRTC is absent or cannot compile for the
// device.
func kernel(t *testing.T, d *driver.Driver, info driver.Info, unit, file, name string) driver.Function {
	t.Helper()
	nv, err := nvrtc.Open()
	if err != nil {
		t.Skipf("no NVRTC: %v", err)
	}
	cubin, log, err := nv.Compile(unit, file, info.Arch(), nvrtc.KernelOptions...)
	if err != nil {
		t.Skipf("NVRTC %s cannot compile for %s: %v\n%s", nv.Version(), info.Arch(), err, log)
	}
	mod, err := d.ModuleLoadData(cubin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.ModuleUnload(mod) })
	fn, err := d.ModuleGetFunction(mod, name)
	if err != nil {
		t.Fatal(err)
	}
	return fn
}

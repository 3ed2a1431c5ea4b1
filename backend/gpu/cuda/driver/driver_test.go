package driver

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/internal/testenv"
)

// TestOpenWithoutLibcuda checks that a machine with no driver gets an error
// saying where libcuda was looked for, not a panic.
func TestOpenWithoutLibcuda(t *testing.T) {
	d, err := Open()
	if err == nil {
		t.Skipf("libcuda is here (%s): nothing to test about its absence", d.Lib.Path)
	}
	msg := err.Error()
	t.Log(msg)
	if !strings.HasPrefix(msg, "cuda: libcuda.so.1 not found (looked in: ") {
		t.Errorf("error %q does not say libcuda.so.1 was not found and where it looked", msg)
	}
	if !errors.Is(err, libs.ErrNotFound) {
		t.Error("errors.Is(err, libs.ErrNotFound) is false")
	}
	if d2, err2 := Open(); d2 != nil || err2 == nil || err2.Error() != msg {
		t.Errorf("second Open gave %v, %v", d2, err2)
	}
	if !strings.Contains(libs.Report()[0].Err.Error(), "libcuda.so.1 not found") {
		t.Errorf("report: %+v", libs.Report()[0])
	}
}

func TestErrorIs(t *testing.T) {
	err := error(&Error{Code: ErrorOutOfMemory, Func: "cuMemAlloc_v2", Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory"})
	if !errors.Is(err, ErrOutOfMemory) || errors.Is(err, ErrNoDevice) {
		t.Error("out-of-memory error does not match ErrOutOfMemory alone")
	}
	if got, want := err.Error(), "cuda: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	var nilDriver *Driver
	if got := nilDriver.result("cuX", 719, nil).Error(); got != "cuda: cuX: CUDA_ERROR_LAUNCH_FAILED" {
		t.Errorf("named without a driver: %q", got)
	}
	if Result(12345).String() != "CUresult(12345)" {
		t.Error(Result(12345).String())
	}
	if VersionString(12080) != "12.8" || VersionString(13000) != "13.0" || VersionString(11020) != "11.2" {
		t.Error("VersionString")
	}
}

// fake builds testdata/fakecuda.c into a libcuda.so.1 and binds it.
func fake(t *testing.T) *Driver {
	t.Helper()
	testenv.FakeLibrary(t, "testdata/fakecuda.c", "libcuda.so.1")
	lib, err := libs.Search(libs.CUDA)
	if err != nil || lib.Where != "$FLEET_CUDA_PATH" {
		t.Skipf("cannot load the fake libcuda (%v); found %+v", err, lib)
	}
	return Load(lib)
}

func fakeGet(t *testing.T, d *Driver, i int) int64 {
	t.Helper()
	r, err := d.Lib.Func("fake_get").Call(uintptr(i))
	if err != nil {
		t.Fatal(err)
	}
	return int64(r)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFakeDriver runs every binding against a C stand-in that checks what
// it receives, so argument order and out-parameters are tested without a GPU.
func TestFakeDriver(t *testing.T) {
	d := fake(t)
	if m := d.Missing(); len(m) != 1 || m[0] != "cuMemsetD8Async" {
		t.Errorf("missing %v, want [cuMemsetD8Async]", m)
	}
	must(t, d.Init())
	if v, err := d.DriverVersion(); err != nil || v != 12080 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	if n, err := d.DeviceCount(); n != 1 || err != nil {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	_, err := d.Device(3)
	var ce *Error
	if !errors.As(err, &ce) || ce.Code != ErrorInvalidDevice || ce.Name != "CUDA_ERROR_INVALID_DEVICE" || ce.Func != "cuDeviceGet" {
		t.Errorf("Device(3): %v", err)
	}
	info, err := d.DeviceInfo(0)
	must(t, err)
	if info.Name != "Fake GPU" || info.Arch() != "sm_90" || info.SMs != 132 || info.SharedPerBlockOptin != 232448 ||
		info.TotalMem != 141<<30 || info.L2Cache != 1038 || !info.UnifiedAddressing || info.DriverVersion != 12080 {
		t.Errorf("DeviceInfo: %+v", info)
	}
	ctx, err := d.PrimaryCtxRetain(0)
	must(t, err)
	must(t, d.CtxSetCurrent(ctx))
	must(t, d.CtxSynchronize())
	must(t, d.PrimaryCtxRelease(7))
	if fakeGet(t, d, 0) != 107 {
		t.Error("PrimaryCtxRelease passed the wrong device")
	}

	// Out of memory is recognisable.
	_, err = d.MemAlloc(1 << 50)
	if !errors.Is(err, ErrOutOfMemory) || !strings.Contains(err.Error(), "cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (out of memory)") {
		t.Errorf("huge MemAlloc: %v", err)
	}
	if free, total, err := d.MemGetInfo(); free != 100 || total != 200 || err != nil {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}

	// Copies round-trip through "device" memory.
	const n = 1000
	dev, err := d.MemAlloc(4 * n)
	must(t, err)
	dev2, err := d.MemAlloc(4 * n)
	must(t, err)
	host := make([]float32, n)
	for i := range host {
		host[i] = float32(i)
	}
	must(t, d.MemcpyHtoD(dev, unsafe.Pointer(&host[0]), 4*n))
	must(t, d.MemcpyDtoD(dev2, dev, 4*n))
	back := make([]float32, n)
	must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev2, 4*n))
	if back[999] != 999 || back[1] != 1 {
		t.Errorf("copies: %v", back[:4])
	}
	must(t, d.MemsetD32(dev, 0x3f800000, n))
	must(t, d.MemsetD8(dev2, 0, 4*n))
	must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev, 4*n))
	if back[0] != 1 || back[999] != 1 {
		t.Errorf("MemsetD32: %v", back[:4])
	}

	// Pinned memory and the async path, on a stream.
	s, err := d.StreamCreate(StreamNonBlocking)
	must(t, err)
	pinned, err := d.MemHostAlloc(4*n, HostAllocPortable)
	must(t, err)
	if fakeGet(t, d, 1) != HostAllocPortable {
		t.Error("MemHostAlloc flags")
	}
	ph := unsafe.Slice((*float32)(pinned), n)
	for i := range ph {
		ph[i] = -float32(i)
	}
	must(t, d.MemcpyHtoDAsync(dev, pinned, 4*n, s))
	must(t, d.MemcpyDtoDAsync(dev2, dev, 4*n, s))
	clear(ph)
	must(t, d.MemcpyDtoHAsync(pinned, dev2, 4*n, s))
	must(t, d.StreamSynchronize(s))
	if ph[5] != -5 || fakeGet(t, d, 2) != int64(s) {
		t.Errorf("async copies: %v, stream %#x", ph[:6], fakeGet(t, d, 2))
	}
	// A copy between contexts names both, and the stream.
	must(t, d.MemcpyHtoD(dev, unsafe.Pointer(&host[0]), 4*n))
	must(t, d.MemcpyPeerAsync(dev2, Context(0x1234), dev, Context(0x5678), 4*n, s))
	must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev2, 4*n))
	if back[7] != 7 || back[999] != 999 || fakeGet(t, d, 2) != int64(s) || fakeGet(t, d, 3) != 0x1234 || fakeGet(t, d, 4) != 0x5678 {
		t.Errorf("MemcpyPeerAsync: %v, stream %#x, contexts %#x %#x", back[:4], fakeGet(t, d, 2), fakeGet(t, d, 3), fakeGet(t, d, 4))
	}
	must(t, d.MemsetD32Async(dev, 0, n, s))
	if err := d.MemsetD8Async(dev, 0, n, s); err == nil || !strings.Contains(err.Error(), "cuMemsetD8Async") {
		t.Errorf("missing cuMemsetD8Async: %v", err)
	}

	// Events: record, wait, query, time (through cuEventElapsedTime_v2).
	e1, err := d.EventCreate(EventDefault)
	must(t, err)
	e2, err := d.EventCreate(EventDisableTiming)
	must(t, err)
	must(t, d.EventRecord(e2, s))
	if fakeGet(t, d, 3) != int64(e2) || fakeGet(t, d, 2) != int64(s) {
		t.Error("EventRecord arguments")
	}
	must(t, d.StreamWaitEvent(s, e1))
	if fakeGet(t, d, 3) != int64(e1) || fakeGet(t, d, 4) != 0 {
		t.Error("StreamWaitEvent arguments")
	}
	if done, err := d.EventQuery(e1); done || err != nil {
		t.Errorf("first EventQuery = %v, %v; want not ready", done, err)
	}
	if done, err := d.EventQuery(e1); !done || err != nil {
		t.Errorf("second EventQuery = %v, %v", done, err)
	}
	must(t, d.EventSynchronize(e1))
	if ms, err := d.EventElapsedTime(e1, e2); ms != 1.5 || err != nil || fakeGet(t, d, 3) != int64(e2-e1) {
		t.Errorf("EventElapsedTime = %v, %v", ms, err)
	}
	if d.cuEventElapsedTime.Name != "cuEventElapsedTime_v2" {
		t.Errorf("elapsed time bound to %s", d.cuEventElapsedTime.Name)
	}

	// Modules and a launch: the fake runs fleet_fill_f32 on the CPU.
	mod, err := d.ModuleLoadData([]byte("\x7fELF fake cubin"))
	must(t, err)
	if _, err := d.ModuleLoadData([]byte("// ptx without NUL")); err != nil {
		t.Errorf("PTX without NUL: %v", err)
	}
	if _, err := d.ModuleGetFunction(mod, "fleet_nope"); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NOT_FOUND: kernel fleet_nope") {
		t.Errorf("unknown kernel: %v", err)
	}
	f, err := d.ModuleGetFunction(mod, "fleet_fill_f32")
	must(t, err)
	must(t, d.FuncSetAttribute(f, FuncAttrMaxDynamicSharedSizeBytes, 100<<10))
	if fakeGet(t, d, 5) != 8 || fakeGet(t, d, 6) != 100<<10 {
		t.Error("FuncSetAttribute arguments")
	}
	args := NewArgs()
	args.Reset().Ptr(dev).Float32(2.5).Int64(n)
	must(t, d.LaunchKernel(f, Dim3{4, 5, 6}, Dim3{256, 2, 1}, 4096, s, args))
	var got [8]int64
	for i := 7; i <= 13; i++ {
		got[i-7] = fakeGet(t, d, i)
	}
	got[7] = fakeGet(t, d, 2)
	if got != [8]int64{4, 5, 6, 256, 2, 1, 4096, int64(s)} || fakeGet(t, d, 14) != 0 {
		t.Errorf("launch saw grid/block/shared/stream %v, extra %#x", got, fakeGet(t, d, 14))
	}
	must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev, 4*n))
	if back[0] != 2.5 || back[n-1] != 2.5 {
		t.Errorf("fill kernel wrote %v", back[:4])
	}

	// A captured fill runs only when its graph is launched, each time.
	must(t, d.StreamBeginCapture(s, CaptureRelaxed))
	if fakeGet(t, d, 15) != CaptureRelaxed {
		t.Errorf("capture mode %d", fakeGet(t, d, 15))
	}
	must(t, d.LaunchKernel(f, Dim3{1, 1, 1}, Dim3{256, 1, 1}, 0, s, args.Reset().Ptr(dev).Float32(7).Int64(n)))
	g, err := d.StreamEndCapture(s)
	must(t, err)
	must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev, 4*n))
	if back[0] != 2.5 {
		t.Fatalf("a captured fill ran at once: %v", back[:2])
	}
	ge, err := d.GraphInstantiate(g)
	must(t, err)
	for range 2 {
		must(t, d.MemsetD32(dev, 0, n))
		must(t, d.GraphLaunch(ge, s))
		must(t, d.MemcpyDtoH(unsafe.Pointer(&back[0]), dev, 4*n))
		if back[0] != 7 || back[n-1] != 7 || fakeGet(t, d, 2) != int64(s) {
			t.Fatalf("the graph's launch wrote %v on stream %#x", back[:2], fakeGet(t, d, 2))
		}
	}
	must(t, d.GraphExecDestroy(ge))
	must(t, d.GraphDestroy(g))

	// The hot calls do not allocate.
	for name, fn := range map[string]func(){
		"LaunchKernel": func() {
			d.LaunchKernel(f, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, s, args.Reset().Ptr(dev).Float32(1).Int64(1))
		},
		"EventRecord":     func() { d.EventRecord(e1, s) },
		"StreamWaitEvent": func() { d.StreamWaitEvent(s, e1) },
		"MemcpyHtoDAsync": func() { d.MemcpyHtoDAsync(dev, pinned, 16, s) },
		"MemcpyDtoHAsync": func() { d.MemcpyDtoHAsync(pinned, dev, 16, s) },
		"MemcpyDtoDAsync": func() { d.MemcpyDtoDAsync(dev2, dev, 16, s) },
		"MemcpyPeerAsync": func() { d.MemcpyPeerAsync(dev2, 0, dev, 0, 16, s) },
		"GraphLaunch":     func() { d.GraphLaunch(0xb000, s) },
	} {
		if a := testing.AllocsPerRun(100, fn); a != 0 {
			t.Errorf("%s allocates %v times a call", name, a)
		}
	}

	must(t, d.MemFreeHost(pinned))
	must(t, d.MemFree(dev))
	must(t, d.MemFree(dev2))
	must(t, d.EventDestroy(e1))
	must(t, d.EventDestroy(e2))
	must(t, d.StreamDestroy(s))
	must(t, d.ModuleUnload(mod))
}

package nvml

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// The Go structs are read and written by NVML, so their layout must be
// nvml.h's on the 64-bit platforms fleet runs on.
func TestStructLayout(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("NVML's layouts are checked on 64-bit platforms")
	}
	type field struct {
		name      string
		got, want uintptr
	}
	var u Utilization
	var m Memory
	var p ProcessInfo
	checks := []field{
		// nvmlUtilization_t { unsigned int gpu, memory; }
		{"sizeof nvmlUtilization_t", unsafe.Sizeof(u), 8},
		{"Utilization.GPU", unsafe.Offsetof(u.GPU), 0},
		{"Utilization.Memory", unsafe.Offsetof(u.Memory), 4},
		// nvmlMemory_t { unsigned long long total, free, used; }
		{"sizeof nvmlMemory_t", unsafe.Sizeof(m), 24},
		{"Memory.Total", unsafe.Offsetof(m.Total), 0},
		{"Memory.Free", unsafe.Offsetof(m.Free), 8},
		{"Memory.Used", unsafe.Offsetof(m.Used), 16},
		// nvmlProcessInfo_v2_t { unsigned int pid; unsigned long long
		// usedGpuMemory; unsigned int gpuInstanceId, computeInstanceId; }:
		// 4 bytes of padding after pid.
		{"sizeof nvmlProcessInfo_t", unsafe.Sizeof(p), 24},
		{"ProcessInfo.PID", unsafe.Offsetof(p.PID), 0},
		{"ProcessInfo.UsedGPUMemory", unsafe.Offsetof(p.UsedGPUMemory), 8},
		{"ProcessInfo.GPUInstanceID", unsafe.Offsetof(p.GPUInstanceID), 16},
		{"ProcessInfo.ComputeInstanceID", unsafe.Offsetof(p.ComputeInstanceID), 20},
		// nvmlDevice_t is a pointer.
		{"sizeof nvmlDevice_t", unsafe.Sizeof(Device{}.handle), 8},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
}

// A process record written as C lays it out reads back field by field.
func TestProcessInfoFromBytes(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var raw [24]byte
	pid, used, gi, ci := r.Uint32(), r.Uint64(), r.Uint32(), r.Uint32()
	put32 := func(off int, v uint32) { *(*uint32)(unsafe.Pointer(&raw[off])) = v }
	put32(0, pid)
	put32(4, 0xdeadbeef) // padding: must not leak into a field
	*(*uint64)(unsafe.Pointer(&raw[8])) = used
	put32(16, gi)
	put32(20, ci)
	p := *(*ProcessInfo)(unsafe.Pointer(&raw[0]))
	if p.PID != pid || p.UsedGPUMemory != used || p.GPUInstanceID != gi || p.ComputeInstanceID != ci {
		t.Errorf("read %+v, want pid %d used %d gi %d ci %d", p, pid, used, gi, ci)
	}
}

func TestErrors(t *testing.T) {
	e := &Error{Func: "nvmlInit_v2", Code: ErrorLibRMVersionMismatch, Msg: "Driver/library version mismatch"}
	wrapped := fmt.Errorf("smi: %w", e)
	if !IsCode(wrapped, ErrorLibRMVersionMismatch) || IsCode(wrapped, ErrorDriverNotLoaded) {
		t.Errorf("IsCode got the code of %v wrong", wrapped)
	}
	if s := e.Error(); !strings.Contains(s, "nvmlInit_v2") || !strings.Contains(s, "version mismatch") || !strings.Contains(s, "18") {
		t.Errorf("message %q: want the function, NVML's text and the code", s)
	}
	nf := &libs.NotFoundError{Library: "nvml", Sonames: []string{"libnvidia-ml.so.1"}}
	le := error(&LoadError{Err: nf})
	if !errors.Is(le, ErrLibraryNotFound) || !errors.Is(le, libs.ErrNotFound) {
		t.Errorf("LoadError does not match ErrLibraryNotFound and libs.ErrNotFound")
	}
	var got *libs.NotFoundError
	if !errors.As(le, &got) || got != nf {
		t.Errorf("LoadError does not unwrap to the search's error")
	}
	if !strings.Contains(le.Error(), "libnvidia-ml.so.1 not found") {
		t.Errorf("message %q does not say the library was not found", le.Error())
	}
}

func TestCString(t *testing.T) {
	b := make([]byte, 16)
	copy(b, "580.65.06\x00junk")
	if s := cstring(b); s != "580.65.06" {
		t.Errorf("cstring = %q", s)
	}
	if s := cstring([]byte("full")); s != "full" {
		t.Errorf("cstring without NUL = %q", s)
	}
}

// initOrSkip initialises NVML, or skips the test with the reason it can't.
func initOrSkip(t testing.TB) {
	t.Helper()
	err := Init()
	switch {
	case err == nil:
		t.Cleanup(func() {
			if err := Shutdown(); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
		})
	case errors.Is(err, ErrLibraryNotFound):
		// Missing library: a clear error, no panic; that is all to check here.
		if !strings.Contains(err.Error(), "libnvidia-ml.so.1") {
			t.Errorf("Init's error %q does not name libnvidia-ml.so.1", err)
		}
		t.Skipf("no NVML: %v", err)
	case IsCode(err, ErrorDriverNotLoaded):
		t.Skipf("NVML present but no driver: %v", err)
	default:
		t.Fatalf("Init: %v", err)
	}
}

// Calls made without NVML fail with an error, not a panic.
func TestWithoutLibrary(t *testing.T) {
	if err := Init(); err == nil {
		Shutdown()
		t.Skip("NVML is present")
	} else if !errors.Is(err, ErrLibraryNotFound) {
		t.Skipf("NVML loads but does not initialise: %v", err)
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("DeviceCount: %v, want ErrLibraryNotFound", err)
	}
	if _, err := (Device{}).Memory(); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("Memory: %v, want ErrLibraryNotFound", err)
	}
	if _, err := (Device{}).ComputeProcesses(); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("ComputeProcesses: %v, want ErrLibraryNotFound", err)
	}
	if err := Shutdown(); !errors.Is(err, ErrLibraryNotFound) {
		t.Errorf("Shutdown: %v, want ErrLibraryNotFound", err)
	}
}

func TestDriverAndDevices(t *testing.T) {
	initOrSkip(t)
	v, err := DriverVersion()
	if err != nil {
		t.Fatalf("DriverVersion: %v", err)
	}
	if !regexp.MustCompile(`^\d+\.\d+`).MatchString(v) {
		t.Errorf("driver version %q does not look like one", v)
	}
	n, err := DeviceCount()
	if err != nil {
		t.Fatalf("DeviceCount: %v", err)
	}
	if n < 1 {
		t.Fatalf("DeviceCount = %d with NVML initialised", n)
	}
	t.Logf("driver %s, %d GPU(s), NVML at %s", v, n, LibraryPath())
	for i := 0; i < n; i++ {
		checkDevice(t, i)
	}
	if _, err := DeviceByIndex(n); !IsCode(err, ErrorInvalidArgument) {
		t.Errorf("DeviceByIndex(%d) of %d devices: %v, want NVML's invalid-argument error", n, n, err)
	}
	if _, err := DeviceByIndex(-1); err == nil {
		t.Errorf("DeviceByIndex(-1) succeeded")
	}
}

func checkDevice(t *testing.T, i int) {
	d, err := DeviceByIndex(i)
	if err != nil {
		t.Fatalf("DeviceByIndex(%d): %v", i, err)
	}
	name, err := d.Name()
	if err != nil || name == "" || strings.ContainsRune(name, 0) {
		t.Errorf("GPU %d: Name = %q, %v", i, name, err)
	}
	uuid, err := d.UUID()
	if err != nil || !strings.HasPrefix(uuid, "GPU-") {
		t.Errorf("GPU %d: UUID = %q, %v; want GPU-...", i, uuid, err)
	}
	m, err := d.Memory()
	if err != nil {
		t.Fatalf("GPU %d: Memory: %v", i, err)
	}
	if !(m.Total > m.Used && m.Used > 0) || m.Free > m.Total || m.Total < 1<<30 {
		t.Errorf("GPU %d: memory %+v: want total > used > 0, free <= total, total >= 1 GiB", i, m)
	}
	u, err := d.Utilization()
	if err != nil {
		t.Errorf("GPU %d: Utilization: %v", i, err)
	} else if u.GPU > 100 || u.Memory > 100 {
		t.Errorf("GPU %d: utilisation %+v outside [0, 100]", i, u)
	}
	temp, err := d.Temperature()
	if err != nil || temp == 0 || temp > 120 {
		t.Errorf("GPU %d: Temperature = %d°C, %v", i, temp, err)
	}
	power, err := d.PowerUsage()
	limit, err2 := d.PowerLimit()
	if err != nil || err2 != nil {
		t.Errorf("GPU %d: PowerUsage = %d, %v; PowerLimit = %d, %v", i, power, err, limit, err2)
	} else if power == 0 || limit < 10_000 || power > 2*limit {
		t.Errorf("GPU %d: power %d mW of limit %d mW is implausible", i, power, limit)
	}
	sm, err := d.Clock(ClockSM)
	mem, err2 := d.Clock(ClockMem)
	if err != nil || err2 != nil || sm == 0 || mem == 0 || sm > 10_000 || mem > 20_000 {
		t.Errorf("GPU %d: clocks SM %d MHz (%v), memory %d MHz (%v)", i, sm, err, mem, err2)
	}
	procs, err := d.ComputeProcesses()
	if err != nil {
		t.Errorf("GPU %d: ComputeProcesses: %v", i, err)
	}
	for _, p := range procs {
		if p.PID == 0 {
			t.Errorf("GPU %d: process with pid 0: %+v", i, p)
		}
	}
	t.Logf("GPU %d: %s %s; util %d%%/%d%%; memory %d/%d MiB; %d°C; %.0f/%.0f W; SM %d MHz, mem %d MHz; %d processes %+v",
		i, name, uuid, u.GPU, u.Memory, m.Used>>20, m.Total>>20, temp, float64(power)/1000, float64(limit)/1000, sm, mem, len(procs), procs)
}

// BenchmarkSample is the cost of what the Sampler reads from a GPU each
// interval: utilisation and memory.
func BenchmarkSample(b *testing.B) {
	initOrSkip(b)
	d, err := DeviceByIndex(0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Utilization(); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Memory(); err != nil {
			b.Fatal(err)
		}
	}
}

package nvml

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/fleetml/fleet/monitor/nvml/nvmltest"
)

// The binding against a stand-in libnvidia-ml.so.1 compiled by the C
// compiler from nvml.h's declarations: each call's arguments reach C, and
// each struct C fills in reads back in Go.
func TestStandIn(t *testing.T) {
	if nvmltest.InChild() {
		return // run by the tests below
	}
	dir := nvmltest.Build(t)
	r := rand.New(rand.NewPCG(21, 22))
	procs, grow := r.IntN(40)+2, r.IntN(30)+1
	nvmltest.Run(t, dir, "TestStandInChild", fmt.Sprintf("FAKE_NVML_PROCS=%d", procs), fmt.Sprintf("FAKE_NVML_GROW=%d", grow))
	nvmltest.Run(t, dir, "TestStandInChild", "FAKE_NVML_PROCS=0")
	out := nvmltest.Run(t, dir, "TestStandInInitError", "FAKE_NVML_INIT=18")
	if !strings.Contains(out, "Driver/library version mismatch") {
		t.Errorf("the child's log does not show NVML's message:\n%s", out)
	}
}

func TestStandInChild(t *testing.T) {
	if !nvmltest.InChild() {
		t.Skip("runs in a child process with the stand-in library")
	}
	var procs int
	fmt.Sscan(getenv("FAKE_NVML_PROCS"), &procs)
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(LibraryPath(), "/libnvidia-ml.so.1") {
		t.Errorf("LibraryPath = %q", LibraryPath())
	}
	if v, err := DriverVersion(); v != "999.12.34" || err != nil {
		t.Errorf("DriverVersion = %q, %v", v, err)
	}
	n, err := DeviceCount()
	if n != 2 || err != nil {
		t.Fatalf("DeviceCount = %d, %v", n, err)
	}
	for i := range n {
		d, err := DeviceByIndex(i)
		if err != nil {
			t.Fatal(err)
		}
		if s, err := d.Name(); s != fmt.Sprintf("Fake GPU %d", i) || err != nil {
			t.Errorf("GPU %d: Name = %q, %v", i, s, err)
		}
		if s, err := d.UUID(); s != fmt.Sprintf("GPU-00000000-0000-0000-0000-%012d", i) || err != nil {
			t.Errorf("GPU %d: UUID = %q, %v", i, s, err)
		}
		if u, err := d.Utilization(); u != (Utilization{GPU: uint32(37 + i), Memory: uint32(12 + i)}) || err != nil {
			t.Errorf("GPU %d: Utilization = %+v, %v", i, u, err)
		}
		used := uint64(i+1)<<30 | 4321
		if m, err := d.Memory(); m != (Memory{Total: 80 << 30, Free: 80<<30 - used, Used: used}) || err != nil {
			t.Errorf("GPU %d: Memory = %+v, %v", i, m, err)
		}
		if c, err := d.Temperature(); c != uint32(41+i) || err != nil {
			t.Errorf("GPU %d: Temperature = %d, %v", i, c, err)
		}
		if p, err := d.PowerUsage(); p != uint32(123456+i) || err != nil {
			t.Errorf("GPU %d: PowerUsage = %d, %v", i, p, err)
		}
		l, err := d.PowerLimit()
		if i == 0 && (l != 700000 || err != nil) {
			t.Errorf("GPU 0: PowerLimit = %d, %v", l, err)
		}
		if i == 1 && !IsCode(err, ErrorNotSupported) {
			t.Errorf("GPU 1: PowerLimit = %d, %v; want NVML's not-supported error", l, err)
		}
		if c, err := d.Clock(ClockSM); c != uint32(1980-i) || err != nil {
			t.Errorf("GPU %d: SM clock = %d, %v", i, c, err)
		}
		if c, err := d.Clock(ClockMem); c != uint32(2619+i) || err != nil {
			t.Errorf("GPU %d: memory clock = %d, %v", i, c, err)
		}
		if _, err := d.Clock(ClockGraphics); !IsCode(err, ErrorInvalidArgument) {
			t.Errorf("GPU %d: graphics clock: %v, want the stand-in's invalid-argument error", i, err)
		}
		ps, err := d.ComputeProcesses()
		if err != nil || len(ps) != procs {
			t.Fatalf("GPU %d: %d processes, %v; want %d", i, len(ps), err, procs)
		}
		for k, p := range ps {
			want := ProcessInfo{PID: uint32(1000*(i+1) + k), UsedGPUMemory: uint64(k+1)<<28 + 17, GPUInstanceID: 0xFFFFFFFF, ComputeInstanceID: 0xFFFFFFF0 + uint32(k)}
			if k == 1 {
				want.UsedGPUMemory = ValueNotAvailable
			}
			if p != want {
				t.Errorf("GPU %d process %d = %+v, want %+v", i, k, p, want)
			}
		}
	}
	if _, err := DeviceByIndex(2); !IsCode(err, ErrorInvalidArgument) || !strings.Contains(err.Error(), "Invalid Argument") {
		t.Errorf("DeviceByIndex(2): %v", err)
	}
	if err := Shutdown(); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	// After the last Shutdown, calls fail with NVML's own error.
	if _, err := DeviceCount(); !IsCode(err, ErrorUninitialized) {
		t.Errorf("DeviceCount after Shutdown: %v", err)
	}
}

func getenv(k string) string { return os.Getenv(k) }

func TestStandInInitError(t *testing.T) {
	if !nvmltest.InChild() {
		t.Skip("runs in a child process with the stand-in library")
	}
	err := Init()
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrorLibRMVersionMismatch || e.Func != "nvmlInit_v2" {
		t.Fatalf("Init: %v, want NVML's version-mismatch error", err)
	}
	t.Log(err)
}

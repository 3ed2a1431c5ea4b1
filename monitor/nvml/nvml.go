// Package nvml reads GPU state (utilisation, memory, temperature, power,
// clocks and the processes using a GPU) from NVIDIA's management library,
// libnvidia-ml.so.1, which comes with the driver. It binds the few calls
// fleet needs through purego, with no cgo, and opens the library through
// backend/gpu/libs, so `fleet doctor` reports where it was found.
//
// Call [Init] first and [Shutdown] when done (NVML counts them, so each
// Init needs its Shutdown). Every call is safe from several goroutines.
//
// A missing library is an error that matches [ErrLibraryNotFound]; an NVML
// call that fails gives an [*Error] carrying NVML's code and message.
package nvml

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Return is an nvmlReturn_t.
type Return int32

// The nvmlReturn_t codes fleet tells apart (nvml.h).
const (
	Success                   Return = 0
	ErrorUninitialized        Return = 1
	ErrorInvalidArgument      Return = 2
	ErrorNotSupported         Return = 3
	ErrorNoPermission         Return = 4
	ErrorNotFound             Return = 6
	ErrorInsufficientSize     Return = 7
	ErrorDriverNotLoaded      Return = 9
	ErrorLibraryNotFound      Return = 12
	ErrorFunctionNotFound     Return = 13
	ErrorGPUIsLost            Return = 15
	ErrorLibRMVersionMismatch Return = 18
	ErrorUnknown              Return = 999
)

// Buffer sizes from nvml.h that are large enough for each string query.
const (
	driverVersionBufferSize = 80 // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE
	nameBufferSize          = 96 // NVML_DEVICE_NAME_V2_BUFFER_SIZE
	uuidBufferSize          = 96 // NVML_DEVICE_UUID_V2_BUFFER_SIZE
)

// ClockType is an nvmlClockType_t.
type ClockType uint32

// Clock domains.
const (
	ClockGraphics ClockType = 0 // NVML_CLOCK_GRAPHICS
	ClockSM       ClockType = 1 // NVML_CLOCK_SM
	ClockMem      ClockType = 2 // NVML_CLOCK_MEM
)

const temperatureGPU = 0 // NVML_TEMPERATURE_GPU

// ValueNotAvailable is what NVML puts in a 64-bit field it cannot read,
// such as a process's GPU memory where the driver does not track it.
const ValueNotAvailable = ^uint64(0)

// ErrLibraryNotFound is matched (errors.Is) by the error Init returns when
// libnvidia-ml.so.1 cannot be opened.
var ErrLibraryNotFound = errors.New("libnvidia-ml.so.1 not found")

// ErrNoDevices is what DeviceCount's callers may return when NVML works but
// sees no GPU; fleet smi prints it as the reason no GPU is shown.
var ErrNoDevices = errors.New("nvml: no NVIDIA GPU found (NVML loaded but reports 0 devices)")

// LoadError says libnvidia-ml.so.1 could not be opened. It matches
// ErrLibraryNotFound, and unwraps to the search's *libs.NotFoundError, whose
// message lists each place looked in.
type LoadError struct{ Err error }

func (e *LoadError) Error() string {
	return "nvml: libnvidia-ml.so.1 not found: the NVIDIA driver is not installed here, or its library folder is not on the loader path (set FLEET_CUDA_PATH to it)"
}

func (e *LoadError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrLibraryNotFound) true.
func (e *LoadError) Is(target error) bool { return target == ErrLibraryNotFound }

// Error is a failed NVML call.
type Error struct {
	Func string // the C function, e.g. "nvmlInit_v2"
	Code Return
	Msg  string // nvmlErrorString's text
}

func (e *Error) Error() string {
	return fmt.Sprintf("nvml: %s: %s (NVML error %d)", e.Func, e.Msg, int(e.Code))
}

// IsCode reports whether err is an *Error with the given code.
func IsCode(err error, code Return) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// api holds the library's functions, looked up once.
type api struct {
	lib *libs.Lib

	init, shutdown, errorString, driverVersion, count, handleByIndex libs.Func
	name, uuid, utilization, memory, temperature, power, powerLimit  libs.Func
	clock, processes                                                 libs.Func
}

var (
	loadOnce sync.Once
	loaded   *api
	loadErr  error
)

// load opens the library and looks its functions up, once per process.
func load() (*api, error) {
	loadOnce.Do(func() {
		lib, err := libs.Open(libs.NVML)
		if err != nil {
			if errors.Is(err, libs.ErrNotFound) {
				loadErr = &LoadError{Err: err}
			} else {
				loadErr = fmt.Errorf("nvml: %w", err)
			}
			return
		}
		loaded = &api{
			lib:           lib,
			init:          lib.Func("nvmlInit_v2"),
			shutdown:      lib.Func("nvmlShutdown"),
			errorString:   lib.Func("nvmlErrorString"),
			driverVersion: lib.Func("nvmlSystemGetDriverVersion"),
			count:         lib.Func("nvmlDeviceGetCount_v2"),
			handleByIndex: lib.Func("nvmlDeviceGetHandleByIndex_v2"),
			name:          lib.Func("nvmlDeviceGetName"),
			uuid:          lib.Func("nvmlDeviceGetUUID"),
			utilization:   lib.Func("nvmlDeviceGetUtilizationRates"),
			memory:        lib.Func("nvmlDeviceGetMemoryInfo"),
			temperature:   lib.Func("nvmlDeviceGetTemperature"),
			power:         lib.Func("nvmlDeviceGetPowerUsage"),
			powerLimit:    lib.Func("nvmlDeviceGetEnforcedPowerLimit"),
			clock:         lib.Func("nvmlDeviceGetClockInfo"),
			// _v2, on older drivers, fills the same 24-byte records.
			processes: lib.FuncAny("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"),
		}
	})
	return loaded, loadErr
}

// errorText is nvmlErrorString(code), which works before nvmlInit too.
func (a *api) errorText(code Return) string {
	if a.errorString.Err() == nil {
		p, _ := a.errorString.Call(uintptr(uint32(code)))
		if s := libs.GoString(p); s != "" {
			return s
		}
	}
	return "unknown error"
}

// check turns a call's result into an error.
func (a *api) check(f libs.Func, r uintptr, callErr error) error {
	if callErr != nil {
		return fmt.Errorf("nvml: %w", callErr)
	}
	code := Return(int32(uint32(r)))
	if code == Success {
		return nil
	}
	return &Error{Func: f.Name, Code: code, Msg: a.errorText(code)}
}

// call calls f and checks its result. Like libs.Func.Call, its pointer
// arguments must be converted to uintptr in the call expression itself, so
// that what they point to moves to the heap and stays alive until it returns.
//
//go:uintptrescapes
func (a *api) call(f libs.Func, args ...uintptr) error {
	r, err := f.Call(args...)
	return a.check(f, r, err)
}

// Init opens libnvidia-ml.so.1 (once) and initialises NVML (nvmlInit_v2).
// The errors worth telling a user apart: ErrLibraryNotFound (no driver
// library), and *Error with ErrorDriverNotLoaded (no kernel driver, no
// GPU) or ErrorLibRMVersionMismatch (driver and library from different
// versions, usually after an upgrade without a reboot).
func Init() error {
	a, err := load()
	if err != nil {
		return err
	}
	return a.call(a.init)
}

// Shutdown undoes one Init (nvmlShutdown).
func Shutdown() error {
	a, err := load()
	if err != nil {
		return err
	}
	return a.call(a.shutdown)
}

// LibraryPath is where libnvidia-ml.so.1 was found, or "" before a
// successful Init.
func LibraryPath() string {
	if a, err := load(); err == nil {
		return a.lib.Path
	}
	return ""
}

// initialised returns the API for a call made after Init. (Before Init,
// NVML itself answers NVML_ERROR_UNINITIALIZED.)
func initialised() (*api, error) { return load() }

// cstring reads a NUL-terminated string out of buf.
func cstring(buf []byte) string {
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}

// DriverVersion is the driver's version, e.g. "580.65.06".
func DriverVersion() (string, error) {
	a, err := initialised()
	if err != nil {
		return "", err
	}
	var buf [driverVersionBufferSize]byte
	if err := a.call(a.driverVersion, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf))); err != nil {
		return "", err
	}
	return cstring(buf[:]), nil
}

// DeviceCount is the number of GPUs NVML sees (nvmlDeviceGetCount_v2).
func DeviceCount() (int, error) {
	a, err := initialised()
	if err != nil {
		return 0, err
	}
	var n uint32
	if err := a.call(a.count, uintptr(unsafe.Pointer(&n))); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Device is a GPU's NVML handle.
type Device struct {
	Index  int
	handle uintptr
}

// DeviceByIndex returns GPU i (nvmlDeviceGetHandleByIndex_v2). NVML's index
// order is PCI bus order, which is CUDA's order unless CUDA_DEVICE_ORDER or
// CUDA_VISIBLE_DEVICES change it.
func DeviceByIndex(i int) (Device, error) {
	a, err := initialised()
	if err != nil {
		return Device{}, err
	}
	if i < 0 {
		return Device{}, fmt.Errorf("nvml: device index %d is negative", i)
	}
	var h uintptr
	if err := a.call(a.handleByIndex, uintptr(uint32(i)), uintptr(unsafe.Pointer(&h))); err != nil {
		return Device{}, err
	}
	return Device{Index: i, handle: h}, nil
}

func (d Device) str(f func(a *api) libs.Func, size int) (string, error) {
	a, err := initialised()
	if err != nil {
		return "", err
	}
	buf := make([]byte, size)
	if err := a.call(f(a), d.handle, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf))); err != nil {
		return "", err
	}
	return cstring(buf), nil
}

// Name is the product name, e.g. "NVIDIA H200".
func (d Device) Name() (string, error) {
	return d.str(func(a *api) libs.Func { return a.name }, nameBufferSize)
}

// UUID is the GPU's unique id, e.g. "GPU-8f6c...".
func (d Device) UUID() (string, error) {
	return d.str(func(a *api) libs.Func { return a.uuid }, uuidBufferSize)
}

// Utilization is nvmlUtilization_t: percentages over NVML's last sample
// period (between 1/6 s and 1 s, depending on the product).
type Utilization struct {
	GPU    uint32 // % of the time one or more kernels was running
	Memory uint32 // % of the time device memory was being read or written
}

// Utilization is nvmlDeviceGetUtilizationRates.
func (d Device) Utilization() (Utilization, error) {
	var u Utilization
	a, err := initialised()
	if err == nil {
		err = a.call(a.utilization, d.handle, uintptr(unsafe.Pointer(&u)))
	}
	return u, err
}

// Memory is nvmlMemory_t, in bytes. Used counts memory the driver reserves
// for itself as well as what processes allocated; Total = Free + Used.
type Memory struct {
	Total uint64
	Free  uint64
	Used  uint64
}

// Memory is nvmlDeviceGetMemoryInfo.
func (d Device) Memory() (Memory, error) {
	var m Memory
	a, err := initialised()
	if err == nil {
		err = a.call(a.memory, d.handle, uintptr(unsafe.Pointer(&m)))
	}
	return m, err
}

// Temperature is the GPU core's temperature in °C (nvmlDeviceGetTemperature
// with NVML_TEMPERATURE_GPU).
func (d Device) Temperature() (uint32, error) {
	a, err := initialised()
	if err != nil {
		return 0, err
	}
	var t uint32
	err = a.call(a.temperature, d.handle, temperatureGPU, uintptr(unsafe.Pointer(&t)))
	return t, err
}

// PowerUsage is the board's power draw in milliwatts (nvmlDeviceGetPowerUsage).
func (d Device) PowerUsage() (uint32, error) {
	a, err := initialised()
	if err != nil {
		return 0, err
	}
	var mw uint32
	err = a.call(a.power, d.handle, uintptr(unsafe.Pointer(&mw)))
	return mw, err
}

// PowerLimit is the power limit the driver enforces, in milliwatts
// (nvmlDeviceGetEnforcedPowerLimit).
func (d Device) PowerLimit() (uint32, error) {
	a, err := initialised()
	if err != nil {
		return 0, err
	}
	var mw uint32
	err = a.call(a.powerLimit, d.handle, uintptr(unsafe.Pointer(&mw)))
	return mw, err
}

// Clock is a clock's current frequency in MHz (nvmlDeviceGetClockInfo).
func (d Device) Clock(c ClockType) (uint32, error) {
	a, err := initialised()
	if err != nil {
		return 0, err
	}
	var mhz uint32
	err = a.call(a.clock, d.handle, uintptr(c), uintptr(unsafe.Pointer(&mhz)))
	return mhz, err
}

// ProcessInfo is nvmlProcessInfo_t (nvmlProcessInfo_v2_t in nvml.h), the
// 24-byte record nvmlDeviceGetComputeRunningProcesses_v3 fills in.
type ProcessInfo struct {
	PID uint32
	_   uint32 // C's padding before the 8-byte field
	// UsedGPUMemory is in bytes; ValueNotAvailable where it cannot be read.
	UsedGPUMemory uint64
	// GPUInstanceID and ComputeInstanceID are MIG's; 0xFFFFFFFF without MIG.
	GPUInstanceID     uint32
	ComputeInstanceID uint32
}

// ComputeProcesses lists the processes with a compute context on the GPU
// (nvmlDeviceGetComputeRunningProcesses_v3, or _v2 where the driver is too
// old for v3: both fill nvmlProcessInfo_v2_t records). Their PIDs are the host's:
// inside a container they may not be visible in /proc.
func (d Device) ComputeProcesses() ([]ProcessInfo, error) {
	a, err := initialised()
	if err != nil {
		return nil, err
	}
	// Ask with room for a few; on NVML_ERROR_INSUFFICIENT_SIZE NVML sets n
	// to the count it needs. Processes may start between the two calls, so
	// try a few times with some headroom.
	n := uint32(8)
	for try := 0; try < 4; try++ {
		buf := make([]ProcessInfo, n)
		got := n
		err := a.call(a.processes, d.handle, uintptr(unsafe.Pointer(&got)), uintptr(unsafe.Pointer(&buf[0])))
		if err == nil {
			if got > n {
				got = n
			}
			return buf[:got], nil
		}
		if !IsCode(err, ErrorInsufficientSize) {
			return nil, err
		}
		if got <= n {
			got = n
		}
		n = got + got/2 + 4
	}
	return nil, &Error{Func: a.processes.Name, Code: ErrorInsufficientSize, Msg: "the process list kept growing"}
}

package driver

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Handles. They are the driver's opaque pointers (CUdevice is an int,
// CUdeviceptr a 64-bit address).
type (
	Device    int32
	Context   uintptr
	Module    uintptr
	Function  uintptr
	Stream    uintptr
	Event     uintptr
	DevicePtr uint64
	Graph     uintptr // a CUgraph: work captured from a stream
	GraphExec uintptr // a CUgraphExec: a graph made launchable
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Attribute is a CUdevice_attribute.
type Attribute int32

// Device attributes (cuda.h's CU_DEVICE_ATTRIBUTE_*).
const (
	AttrMaxThreadsPerBlock               Attribute = 1
	AttrMaxSharedMemoryPerBlock          Attribute = 8
	AttrWarpSize                         Attribute = 10
	AttrClockRate                        Attribute = 13 // kHz
	AttrMultiprocessorCount              Attribute = 16
	AttrIntegrated                       Attribute = 18
	AttrCanMapHostMemory                 Attribute = 19
	AttrConcurrentKernels                Attribute = 31
	AttrPCIBusID                         Attribute = 33
	AttrPCIDeviceID                      Attribute = 34
	AttrMemoryClockRate                  Attribute = 36 // kHz
	AttrGlobalMemoryBusWidth             Attribute = 37 // bits
	AttrL2CacheSize                      Attribute = 38 // bytes
	AttrMaxThreadsPerMultiprocessor      Attribute = 39
	AttrAsyncEngineCount                 Attribute = 40
	AttrUnifiedAddressing                Attribute = 41
	AttrPCIDomainID                      Attribute = 50
	AttrComputeCapabilityMajor           Attribute = 75
	AttrComputeCapabilityMinor           Attribute = 76
	AttrMaxSharedMemoryPerMultiprocessor Attribute = 81
	AttrMaxRegistersPerMultiprocessor    Attribute = 82
	AttrMaxSharedMemoryPerBlockOptin     Attribute = 97
)

// FuncAttribute is a CUfunction_attribute.
type FuncAttribute int32

// Function attributes.
const (
	FuncAttrMaxThreadsPerBlock         FuncAttribute = 0
	FuncAttrSharedSizeBytes            FuncAttribute = 1
	FuncAttrNumRegs                    FuncAttribute = 4
	FuncAttrMaxDynamicSharedSizeBytes  FuncAttribute = 8
	FuncAttrPreferredSharedMemoryCarve FuncAttribute = 9
)

// Flags.
const (
	StreamDefault     = 0 // CU_STREAM_DEFAULT: synchronises with the legacy default stream
	StreamNonBlocking = 1 // CU_STREAM_NON_BLOCKING

	EventDefault       = 0
	EventBlockingSync  = 1 // CU_EVENT_BLOCKING_SYNC: EventSynchronize sleeps instead of spinning
	EventDisableTiming = 2 // CU_EVENT_DISABLE_TIMING: cheaper, for ordering only

	HostAllocPortable      = 1 // CU_MEMHOSTALLOC_PORTABLE
	HostAllocDeviceMap     = 2 // CU_MEMHOSTALLOC_DEVICEMAP
	HostAllocWriteCombined = 4 // CU_MEMHOSTALLOC_WRITECOMBINED
)

// Driver is the CUDA driver API of one loaded libcuda. Its methods may be
// called from any goroutine, but a context is current on an OS thread:
// issue a device's work from one goroutine under runtime.LockOSThread, after
// CtxSetCurrent on that thread.
type Driver struct {
	Lib *libs.Lib

	cuInit, cuDriverGetVersion, cuGetErrorName, cuGetErrorString              libs.Func
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute      libs.Func
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease     libs.Func
	cuCtxSetCurrent, cuCtxSynchronize                                         libs.Func
	cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemHostAlloc, cuMemFreeHost        libs.Func
	cuMemcpyHtoD, cuMemcpyDtoH, cuMemcpyDtoD                                  libs.Func
	cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync                   libs.Func
	cuMemcpyPeerAsync                                                         libs.Func
	cuMemsetD32, cuMemsetD8, cuMemsetD32Async, cuMemsetD8Async                libs.Func
	cuStreamCreate, cuStreamDestroy, cuStreamSynchronize, cuStreamWaitEvent   libs.Func
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventQuery            libs.Func
	cuEventElapsedTime, cuEventDestroy                                        libs.Func
	cuModuleLoadData, cuModuleGetFunction, cuModuleUnload, cuFuncSetAttribute libs.Func
	cuLaunchKernel                                                            libs.Func
	cuStreamBeginCapture, cuStreamEndCapture, cuGraphInstantiate              libs.Func
	cuGraphLaunch, cuGraphExecDestroy, cuGraphDestroy                         libs.Func
	all                                                                       []*libs.Func
}

var (
	openOnce  sync.Once
	shared    *Driver
	sharedErr error
)

// Open loads libcuda.so.1 (see package libs for where it looks) once per
// process and binds its functions. It does not initialise the driver; call
// Init. Without the library it returns the search's *libs.NotFoundError,
// "cuda: libcuda.so.1 not found (looked in: ...)".
func Open() (*Driver, error) {
	openOnce.Do(func() {
		lib, err := libs.Open(libs.CUDA)
		if err != nil {
			sharedErr = err
			return
		}
		shared = Load(lib)
		if v, err := shared.DriverVersion(); err == nil {
			lib.SetVersion(VersionString(v))
			// NVRTC and cuBLAS of a newer CUDA than the driver runs
			// would fail to start: searches skip them from now on.
			libs.SetDriverCUDA(v)
		}
	})
	return shared, sharedErr
}

// VersionString turns a CUDA version number (12080) into "12.8".
func VersionString(v int) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

// Load binds the driver functions of an opened library. Functions it lacks
// return a *libs.MissingSymbolError when called.
func Load(lib *libs.Lib) *Driver {
	d := &Driver{Lib: lib}
	bind := func(f *libs.Func, names ...string) {
		*f = lib.FuncAny(names...)
		d.all = append(d.all, f)
	}
	bind(&d.cuInit, "cuInit")
	bind(&d.cuDriverGetVersion, "cuDriverGetVersion")
	bind(&d.cuGetErrorName, "cuGetErrorName")
	bind(&d.cuGetErrorString, "cuGetErrorString")
	bind(&d.cuDeviceGetCount, "cuDeviceGetCount")
	bind(&d.cuDeviceGet, "cuDeviceGet")
	bind(&d.cuDeviceGetName, "cuDeviceGetName")
	bind(&d.cuDeviceGetAttribute, "cuDeviceGetAttribute")
	bind(&d.cuDeviceTotalMem, "cuDeviceTotalMem_v2")
	bind(&d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain")
	bind(&d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2")
	bind(&d.cuCtxSetCurrent, "cuCtxSetCurrent")
	bind(&d.cuCtxSynchronize, "cuCtxSynchronize")
	bind(&d.cuMemAlloc, "cuMemAlloc_v2")
	bind(&d.cuMemFree, "cuMemFree_v2")
	bind(&d.cuMemGetInfo, "cuMemGetInfo_v2")
	bind(&d.cuMemHostAlloc, "cuMemHostAlloc")
	bind(&d.cuMemFreeHost, "cuMemFreeHost")
	bind(&d.cuMemcpyHtoD, "cuMemcpyHtoD_v2")
	bind(&d.cuMemcpyDtoH, "cuMemcpyDtoH_v2")
	bind(&d.cuMemcpyDtoD, "cuMemcpyDtoD_v2")
	bind(&d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2")
	bind(&d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2")
	bind(&d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2")
	bind(&d.cuMemcpyPeerAsync, "cuMemcpyPeerAsync")
	bind(&d.cuMemsetD32, "cuMemsetD32_v2")
	bind(&d.cuMemsetD8, "cuMemsetD8_v2")
	bind(&d.cuMemsetD32Async, "cuMemsetD32Async")
	bind(&d.cuMemsetD8Async, "cuMemsetD8Async")
	bind(&d.cuStreamCreate, "cuStreamCreate")
	bind(&d.cuStreamDestroy, "cuStreamDestroy_v2")
	bind(&d.cuStreamSynchronize, "cuStreamSynchronize")
	bind(&d.cuStreamWaitEvent, "cuStreamWaitEvent")
	bind(&d.cuEventCreate, "cuEventCreate")
	bind(&d.cuEventRecord, "cuEventRecord")
	bind(&d.cuEventSynchronize, "cuEventSynchronize")
	bind(&d.cuEventQuery, "cuEventQuery")
	// v1 first: _v2 exists only from 12.8, and some drivers export only v1.
	bind(&d.cuEventElapsedTime, "cuEventElapsedTime", "cuEventElapsedTime_v2")
	bind(&d.cuEventDestroy, "cuEventDestroy_v2")
	bind(&d.cuModuleLoadData, "cuModuleLoadData")
	bind(&d.cuModuleGetFunction, "cuModuleGetFunction")
	bind(&d.cuModuleUnload, "cuModuleUnload")
	bind(&d.cuFuncSetAttribute, "cuFuncSetAttribute")
	bind(&d.cuLaunchKernel, "cuLaunchKernel")
	bind(&d.cuStreamBeginCapture, "cuStreamBeginCapture_v2")
	bind(&d.cuStreamEndCapture, "cuStreamEndCapture")
	bind(&d.cuGraphInstantiate, "cuGraphInstantiateWithFlags")
	bind(&d.cuGraphLaunch, "cuGraphLaunch")
	bind(&d.cuGraphExecDestroy, "cuGraphExecDestroy")
	bind(&d.cuGraphDestroy, "cuGraphDestroy")
	return d
}

// Missing lists the bound functions the library lacks.
func (d *Driver) Missing() []string {
	var out []string
	for _, f := range d.all {
		if f.Addr == 0 {
			out = append(out, f.Name)
		}
	}
	return out
}

// Init initialises the driver (cuInit(0)). It may be called more than once.
func (d *Driver) Init() error {
	r, err := d.cuInit.Fast(0)
	return d.result("cuInit", r, err)
}

// DriverVersion is the CUDA version the driver supports, e.g. 12080 for
// 12.8. It works before Init.
func (d *Driver) DriverVersion() (int, error) {
	var v int32
	r, err := d.cuDriverGetVersion.Call(uintptr(unsafe.Pointer(&v)))
	return int(v), d.result("cuDriverGetVersion", r, err)
}

// DeviceCount is the number of devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	r, err := d.cuDeviceGetCount.Call(uintptr(unsafe.Pointer(&n)))
	return int(n), d.result("cuDeviceGetCount", r, err)
}

// Device returns the device with the given ordinal.
func (d *Driver) Device(ordinal int) (Device, error) {
	var dev int32
	r, err := d.cuDeviceGet.Call(uintptr(unsafe.Pointer(&dev)), uintptr(ordinal))
	return Device(dev), d.result("cuDeviceGet", r, err)
}

// DeviceName is the device's product name.
func (d *Driver) DeviceName(dev Device) (string, error) {
	buf := make([]byte, 256)
	r, err := d.cuDeviceGetName.Call(uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev))
	if err := d.result("cuDeviceGetName", r, err); err != nil {
		return "", err
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i]), nil
		}
	}
	return string(buf), nil
}

// DeviceAttribute reads one attribute of dev.
func (d *Driver) DeviceAttribute(dev Device, a Attribute) (int, error) {
	var v int32
	r, err := d.cuDeviceGetAttribute.Call(uintptr(unsafe.Pointer(&v)), uintptr(a), uintptr(dev))
	if err := d.result("cuDeviceGetAttribute", r, err); err != nil {
		return 0, fmt.Errorf("%w (attribute %d)", err, a)
	}
	return int(v), nil
}

// ComputeCapability is dev's (major, minor), e.g. (9, 0) for sm_90.
func (d *Driver) ComputeCapability(dev Device) (major, minor int, err error) {
	if major, err = d.DeviceAttribute(dev, AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	minor, err = d.DeviceAttribute(dev, AttrComputeCapabilityMinor)
	return major, minor, err
}

// DeviceTotalMem is dev's memory in bytes.
func (d *Driver) DeviceTotalMem(dev Device) (uint64, error) {
	var n uint64
	r, err := d.cuDeviceTotalMem.Call(uintptr(unsafe.Pointer(&n)), uintptr(dev))
	return n, d.result("cuDeviceTotalMem_v2", r, err)
}

// Info describes a device.
type Info struct {
	Ordinal             int
	Name                string
	Major, Minor        int // compute capability
	SMs                 int
	TotalMem            uint64
	SharedPerBlock      int // bytes, without opting in
	SharedPerBlockOptin int // bytes, with FuncAttrMaxDynamicSharedSizeBytes
	SharedPerMultiproc  int
	L2Cache             int
	MaxThreadsPerBlock  int
	MemoryClockKHz      int
	MemoryBusWidth      int // bits
	AsyncEngines        int
	UnifiedAddressing   bool
	DriverVersion       int
}

// Arch is the NVRTC architecture of the device, e.g. "sm_90".
func (i Info) Arch() string { return fmt.Sprintf("sm_%d%d", i.Major, i.Minor) }

// DeviceInfo gathers what fleet needs to know about device ordinal.
func (d *Driver) DeviceInfo(ordinal int) (Info, error) {
	info := Info{Ordinal: ordinal}
	dev, err := d.Device(ordinal)
	if err != nil {
		return info, err
	}
	if info.Name, err = d.DeviceName(dev); err != nil {
		return info, err
	}
	if info.TotalMem, err = d.DeviceTotalMem(dev); err != nil {
		return info, err
	}
	info.DriverVersion, _ = d.DriverVersion()
	for _, a := range []struct {
		attr Attribute
		dst  *int
	}{
		{AttrComputeCapabilityMajor, &info.Major},
		{AttrComputeCapabilityMinor, &info.Minor},
		{AttrMultiprocessorCount, &info.SMs},
	} {
		if *a.dst, err = d.DeviceAttribute(dev, a.attr); err != nil {
			return info, err
		}
	}
	// The rest are informative: a driver that no longer reports one (the
	// memory clock is deprecated in CUDA 13) must not stop the device opening.
	for _, a := range []struct {
		attr Attribute
		dst  *int
	}{
		{AttrMaxSharedMemoryPerBlock, &info.SharedPerBlock},
		{AttrMaxSharedMemoryPerBlockOptin, &info.SharedPerBlockOptin},
		{AttrMaxSharedMemoryPerMultiprocessor, &info.SharedPerMultiproc},
		{AttrL2CacheSize, &info.L2Cache},
		{AttrMaxThreadsPerBlock, &info.MaxThreadsPerBlock},
		{AttrMemoryClockRate, &info.MemoryClockKHz},
		{AttrGlobalMemoryBusWidth, &info.MemoryBusWidth},
		{AttrAsyncEngineCount, &info.AsyncEngines},
	} {
		if v, err := d.DeviceAttribute(dev, a.attr); err == nil {
			*a.dst = v
		}
	}
	ua, err := d.DeviceAttribute(dev, AttrUnifiedAddressing)
	info.UnifiedAddressing = err == nil && ua != 0
	return info, nil
}

// PrimaryCtxRetain retains dev's primary context (the one the runtime API
// and other libraries share).
func (d *Driver) PrimaryCtxRetain(dev Device) (Context, error) {
	var c uintptr
	r, err := d.cuDevicePrimaryCtxRetain.Call(uintptr(unsafe.Pointer(&c)), uintptr(dev))
	return Context(c), d.result("cuDevicePrimaryCtxRetain", r, err)
}

// PrimaryCtxRelease releases what PrimaryCtxRetain retained.
func (d *Driver) PrimaryCtxRelease(dev Device) error {
	r, err := d.cuDevicePrimaryCtxRelease.Fast(uintptr(dev))
	return d.result("cuDevicePrimaryCtxRelease_v2", r, err)
}

// CtxSetCurrent makes c current on the calling OS thread. Lock the goroutine
// to its thread (runtime.LockOSThread) first.
func (d *Driver) CtxSetCurrent(c Context) error {
	r, err := d.cuCtxSetCurrent.Fast(uintptr(c))
	return d.result("cuCtxSetCurrent", r, err)
}

// CtxSynchronize waits for all work in the current context.
func (d *Driver) CtxSynchronize() error {
	r, err := d.cuCtxSynchronize.Fast()
	return d.result("cuCtxSynchronize", r, err)
}

// MemAlloc allocates device memory. errors.Is(err, ErrOutOfMemory) tells
// when the device is full.
func (d *Driver) MemAlloc(bytes uint64) (DevicePtr, error) {
	var p uint64
	r, err := d.cuMemAlloc.Call(uintptr(unsafe.Pointer(&p)), uintptr(bytes))
	if err := d.result("cuMemAlloc_v2", r, err); err != nil {
		return 0, fmt.Errorf("%w allocating %d bytes", err, bytes)
	}
	return DevicePtr(p), nil
}

// MemFree frees device memory.
func (d *Driver) MemFree(p DevicePtr) error {
	r, err := d.cuMemFree.Fast(uintptr(p))
	return d.result("cuMemFree_v2", r, err)
}

// MemGetInfo gives the current context's device's free and total memory.
func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	r, err := d.cuMemGetInfo.Call(uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total)))
	return free, total, d.result("cuMemGetInfo_v2", r, err)
}

// MemHostAlloc allocates page-locked host memory (HostAlloc* flags), which
// async copies can read and write while the CPU goes on.
func (d *Driver) MemHostAlloc(bytes uint64, flags uint32) (unsafe.Pointer, error) {
	var p uintptr
	r, err := d.cuMemHostAlloc.Call(uintptr(unsafe.Pointer(&p)), uintptr(bytes), uintptr(flags))
	if err := d.result("cuMemHostAlloc", r, err); err != nil {
		return nil, fmt.Errorf("%w allocating %d pinned bytes", err, bytes)
	}
	return cptr(p), nil
}

// MemFreeHost frees what MemHostAlloc allocated.
func (d *Driver) MemFreeHost(p unsafe.Pointer) error {
	r, err := d.cuMemFreeHost.Call(uintptr(p))
	return d.result("cuMemFreeHost", r, err)
}

// MemcpyHtoD copies bytes from host memory to the device and waits for it.
func (d *Driver) MemcpyHtoD(dst DevicePtr, src unsafe.Pointer, bytes uint64) error {
	r, err := d.cuMemcpyHtoD.Call(uintptr(dst), uintptr(src), uintptr(bytes))
	return d.result("cuMemcpyHtoD_v2", r, err)
}

// MemcpyDtoH copies bytes from the device to host memory and waits for it.
func (d *Driver) MemcpyDtoH(dst unsafe.Pointer, src DevicePtr, bytes uint64) error {
	r, err := d.cuMemcpyDtoH.Call(uintptr(dst), uintptr(src), uintptr(bytes))
	return d.result("cuMemcpyDtoH_v2", r, err)
}

// MemcpyDtoD copies bytes between device buffers.
func (d *Driver) MemcpyDtoD(dst, src DevicePtr, bytes uint64) error {
	r, err := d.cuMemcpyDtoD.Fast(uintptr(dst), uintptr(src), uintptr(bytes))
	return d.result("cuMemcpyDtoD_v2", r, err)
}

// MemcpyHtoDAsync queues a host-to-device copy on s. The host memory should
// be pinned (MemHostAlloc) and must stay untouched until the copy is done.
// It does not allocate when src is pinned memory or a Go heap object.
func (d *Driver) MemcpyHtoDAsync(dst DevicePtr, src unsafe.Pointer, bytes uint64, s Stream) error {
	r, err := call4(d.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	return d.result("cuMemcpyHtoDAsync_v2", r, err)
}

// MemcpyDtoHAsync queues a device-to-host copy on s; see MemcpyHtoDAsync.
func (d *Driver) MemcpyDtoHAsync(dst unsafe.Pointer, src DevicePtr, bytes uint64, s Stream) error {
	r, err := call4(d.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	return d.result("cuMemcpyDtoHAsync_v2", r, err)
}

// MemcpyPeerAsync queues on s a copy of bytes from src, memory of context
// srcCtx, to dst, memory of context dstCtx: between two devices, device
// to device (over NVLink or PCIe; the driver stages it where the devices
// cannot reach each other).
func (d *Driver) MemcpyPeerAsync(dst DevicePtr, dstCtx Context, src DevicePtr, srcCtx Context, bytes uint64, s Stream) error {
	r, err := d.cuMemcpyPeerAsync.Fast(uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(bytes), uintptr(s))
	return d.result("cuMemcpyPeerAsync", r, err)
}

// MemcpyDtoDAsync queues a device-to-device copy on s.
func (d *Driver) MemcpyDtoDAsync(dst, src DevicePtr, bytes uint64, s Stream) error {
	r, err := d.cuMemcpyDtoDAsync.Fast(uintptr(dst), uintptr(src), uintptr(bytes), uintptr(s))
	return d.result("cuMemcpyDtoDAsync_v2", r, err)
}

// MemsetD32 sets n 32-bit words at dst to v.
func (d *Driver) MemsetD32(dst DevicePtr, v uint32, n uint64) error {
	r, err := d.cuMemsetD32.Fast(uintptr(dst), uintptr(v), uintptr(n))
	return d.result("cuMemsetD32_v2", r, err)
}

// MemsetD8 sets n bytes at dst to v.
func (d *Driver) MemsetD8(dst DevicePtr, v uint8, n uint64) error {
	r, err := d.cuMemsetD8.Fast(uintptr(dst), uintptr(v), uintptr(n))
	return d.result("cuMemsetD8_v2", r, err)
}

// MemsetD32Async queues setting n 32-bit words at dst to v on s.
func (d *Driver) MemsetD32Async(dst DevicePtr, v uint32, n uint64, s Stream) error {
	r, err := d.cuMemsetD32Async.Fast(uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
	return d.result("cuMemsetD32Async", r, err)
}

// MemsetD8Async queues setting n bytes at dst to v on s.
func (d *Driver) MemsetD8Async(dst DevicePtr, v uint8, n uint64, s Stream) error {
	r, err := d.cuMemsetD8Async.Fast(uintptr(dst), uintptr(v), uintptr(n), uintptr(s))
	return d.result("cuMemsetD8Async", r, err)
}

// StreamCreate creates a stream (StreamDefault or StreamNonBlocking).
func (d *Driver) StreamCreate(flags uint32) (Stream, error) {
	var s uintptr
	r, err := d.cuStreamCreate.Call(uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return Stream(s), d.result("cuStreamCreate", r, err)
}

// StreamDestroy destroys s once its work is done.
func (d *Driver) StreamDestroy(s Stream) error {
	r, err := d.cuStreamDestroy.Fast(uintptr(s))
	return d.result("cuStreamDestroy_v2", r, err)
}

// StreamSynchronize waits for s's work.
func (d *Driver) StreamSynchronize(s Stream) error {
	r, err := d.cuStreamSynchronize.Fast(uintptr(s))
	return d.result("cuStreamSynchronize", r, err)
}

// StreamWaitEvent makes s's later work wait for e (its latest record).
func (d *Driver) StreamWaitEvent(s Stream, e Event) error {
	r, err := d.cuStreamWaitEvent.Fast(uintptr(s), uintptr(e), 0)
	return d.result("cuStreamWaitEvent", r, err)
}

// EventCreate creates an event (Event* flags).
func (d *Driver) EventCreate(flags uint32) (Event, error) {
	var e uintptr
	r, err := d.cuEventCreate.Call(uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return Event(e), d.result("cuEventCreate", r, err)
}

// EventRecord records e at the current end of s.
func (d *Driver) EventRecord(e Event, s Stream) error {
	r, err := d.cuEventRecord.Fast(uintptr(e), uintptr(s))
	return d.result("cuEventRecord", r, err)
}

// EventSynchronize waits until e's recorded work is done.
func (d *Driver) EventSynchronize(e Event) error {
	r, err := d.cuEventSynchronize.Fast(uintptr(e))
	return d.result("cuEventSynchronize", r, err)
}

// EventQuery reports whether e's recorded work is done, without waiting.
func (d *Driver) EventQuery(e Event) (bool, error) {
	r, err := d.cuEventQuery.Fast(uintptr(e))
	if err == nil && Result(int32(uint32(r))) == ErrorNotReady {
		return false, nil
	}
	if err := d.result("cuEventQuery", r, err); err != nil {
		return false, err
	}
	return true, nil
}

// EventElapsedTime is the time in milliseconds between two recorded events.
func (d *Driver) EventElapsedTime(start, end Event) (float32, error) {
	var ms float32
	r, err := d.cuEventElapsedTime.Call(uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return ms, d.result(d.cuEventElapsedTime.Name, r, err)
}

// EventDestroy destroys e.
func (d *Driver) EventDestroy(e Event) error {
	r, err := d.cuEventDestroy.Fast(uintptr(e))
	return d.result("cuEventDestroy_v2", r, err)
}

// CaptureRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED: other threads may
// call the driver while a stream captures (fleet's allocator and its
// watchdog do; nothing of theirs is captured).
const CaptureRelaxed = 2

// StreamBeginCapture starts recording the work queued on s into a graph,
// instead of running it, until StreamEndCapture.
func (d *Driver) StreamBeginCapture(s Stream, mode int) error {
	r, err := d.cuStreamBeginCapture.Fast(uintptr(s), uintptr(mode))
	return d.result("cuStreamBeginCapture_v2", r, err)
}

// StreamEndCapture ends s's capture and returns the graph it recorded.
func (d *Driver) StreamEndCapture(s Stream) (Graph, error) {
	var g uintptr
	r, err := d.cuStreamEndCapture.Fast(uintptr(s), uintptr(unsafe.Pointer(&g)))
	return Graph(g), d.result("cuStreamEndCapture", r, err)
}

// GraphInstantiate makes g launchable.
func (d *Driver) GraphInstantiate(g Graph) (GraphExec, error) {
	var e uintptr
	r, err := d.cuGraphInstantiate.Call(uintptr(unsafe.Pointer(&e)), uintptr(g), 0)
	return GraphExec(e), d.result("cuGraphInstantiateWithFlags", r, err)
}

// GraphLaunch queues all of e's work on s, as one call.
func (d *Driver) GraphLaunch(e GraphExec, s Stream) error {
	r, err := d.cuGraphLaunch.Fast(uintptr(e), uintptr(s))
	return d.result("cuGraphLaunch", r, err)
}

// GraphExecDestroy frees a launchable graph; GraphDestroy a graph.
func (d *Driver) GraphExecDestroy(e GraphExec) error {
	r, err := d.cuGraphExecDestroy.Fast(uintptr(e))
	return d.result("cuGraphExecDestroy", r, err)
}

// GraphDestroy frees a graph.
func (d *Driver) GraphDestroy(g Graph) error {
	r, err := d.cuGraphDestroy.Fast(uintptr(g))
	return d.result("cuGraphDestroy", r, err)
}

// ModuleLoadData loads a cubin (or NUL-terminated PTX; a missing NUL is
// added) into the current context.
func (d *Driver) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, &Error{Code: ErrorInvalidImage, Func: "cuModuleLoadData", Name: "CUDA_ERROR_INVALID_IMAGE", Desc: "empty image"}
	}
	isELF := len(image) >= 4 && string(image[:4]) == "\x7fELF"
	if !isELF && image[len(image)-1] != 0 {
		image = append(image[:len(image):len(image)], 0)
	}
	var m uintptr
	r, err := d.cuModuleLoadData.Call(uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&image[0])))
	return Module(m), d.result("cuModuleLoadData", r, err)
}

// ModuleGetFunction finds a kernel by its (extern "C") name.
func (d *Driver) ModuleGetFunction(m Module, name string) (Function, error) {
	var f uintptr
	cname := libs.CString(name)
	r, err := d.cuModuleGetFunction.Call(uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if err := d.result("cuModuleGetFunction", r, err); err != nil {
		return 0, fmt.Errorf("%w: kernel %s", err, name)
	}
	return Function(f), nil
}

// ModuleUnload unloads m.
func (d *Driver) ModuleUnload(m Module) error {
	r, err := d.cuModuleUnload.Fast(uintptr(m))
	return d.result("cuModuleUnload", r, err)
}

// FuncSetAttribute sets an attribute of a kernel; a kernel that uses more
// than 48 KiB of dynamic shared memory needs FuncAttrMaxDynamicSharedSizeBytes.
func (d *Driver) FuncSetAttribute(f Function, a FuncAttribute, v int) error {
	r, err := d.cuFuncSetAttribute.Fast(uintptr(f), uintptr(a), uintptr(v))
	return d.result("cuFuncSetAttribute", r, err)
}

// LaunchKernel queues f on s over grid×block threads with shared bytes of
// dynamic shared memory. Reuse one *Args (per stream or worker) and the call
// does not allocate.
func (d *Driver) LaunchKernel(f Function, grid, block Dim3, shared uint32, s Stream, args *Args) error {
	r, err := launch(d.cuLaunchKernel, uintptr(f), uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(shared), uintptr(s),
		uintptr(unsafe.Pointer(&args.ptrs[0])))
	return d.result("cuLaunchKernel", r, err)
}

// call4 keeps what its arguments point to on the heap and alive during the
// call (go:uintptrescapes), and calls without allocating.
//
//go:uintptrescapes
func call4(f libs.Func, a0, a1, a2, a3 uintptr) (uintptr, error) {
	return f.Fast(a0, a1, a2, a3)
}

// launch is call4 for cuLaunchKernel's 11 arguments (the last, extra, is NULL).
//
//go:uintptrescapes
func launch(f libs.Func, fn, gx, gy, gz, bx, by, bz, shared, stream, params uintptr) (uintptr, error) {
	return f.Fast(fn, gx, gy, gz, bx, by, bz, shared, stream, params, 0)
}

// cptr turns a C address into a pointer (through memory, so vet's unsafeptr
// check, which guards Go memory, accepts it).
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

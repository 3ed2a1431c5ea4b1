// Package opencl is the GPU runtime's OpenCL driver (package gpu's Driver
// for OpenCL devices, registered as opencl:N). It binds OpenCL through its
// ICD loader (libOpenCL.so.1) at run time, with no cgo and no headers, and
// finds the OpenCL devices of every platform. It compiles OpenCL C with
// the device's own compiler (clBuildProgram, binaries cached on disk),
// moves buffers over two in-order queues ordered by events, launches
// kernels, and runs products through CLBlast. It also holds the kernels:
// the OpenCL C twins of the CUDA kernels (kernels/*.cl; see
// kernels/common.cl). The backend itself is the GPU runtime over this
// driver (driver.go): the same allocator, op functions and checks as
// CUDA's; the runtime's products go to CLBlast's SGEMM.
//
// The loader is searched for as package libs searches for NVIDIA's
// libraries, with its own variable: $FLEET_OPENCL_PATH (folders, like
// $PATH), then the dynamic loader's search, then the system's library
// folder. `fleet doctor` reports the search and the devices.
//
// Devices are numbered across platforms in the order the loader lists the
// platforms, and within a platform in the order it lists its devices
// (CL_DEVICE_TYPE_ALL): opencl:N is the N-th of that list.
package opencl

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/internal/units"
)

// Library is the OpenCL ICD loader, as libs searches for it.
var Library = libs.Library{Name: "opencl", Sonames: []string{"libOpenCL.so.1"}, Locate: func() []libs.Location {
	locs := libs.EnvLocations("FLEET_OPENCL_PATH")
	locs = append(locs, libs.Location{Where: "loader search"})
	return append(locs, libs.SystemLocations()...)
}}

// OpenCL's constants (cl.h), those fleet uses.
const (
	clSuccess = 0

	clPlatformVersion = 0x0901
	clPlatformName    = 0x0902

	clDeviceTypeAll = 0xFFFFFFFF

	clDeviceType                = 0x1000
	clDeviceMaxComputeUnits     = 0x1002
	clDeviceMaxWorkGroupSize    = 0x1004
	clDeviceGlobalMemSize       = 0x101F
	clDeviceMaxMemAllocSize     = 0x1010
	clDeviceSingleFPConfig      = 0x101B
	clFPCorrectlyRoundedDivSqrt = 1 << 7
	clDeviceName                = 0x102B
	clDeviceVendor              = 0x102C
	clDriverVersion             = 0x102D
	clDeviceVersion             = 0x102F
	clDeviceExtensions          = 0x1030
	clProgramBuildLog           = 0x1183
	clMemReadWrite              = 1 << 0
	clDeviceNotFound            = -1
	clBuildProgramFailure       = -11
	clDeviceTypeCPU             = 1 << 1
	clDeviceTypeGPU             = 1 << 2
	clDeviceTypeAccelerator     = 1 << 3
	clPlatformNotFoundKHR       = -1001
	clInvalidKernelName         = -46
	clOutOfResources            = -5
	clMemObjectAllocFailure     = -4
	clOutOfHostMemory           = -6
	clInvalidBufferSize         = -61
	clInvalidWorkGroupSize      = -54
	clInvalidGlobalWorkSize     = -63
	clCompilerNotAvailable      = -3
	clInvalidValue              = -30
	clInvalidProgramExecutable  = -45
)

// Error is a failed OpenCL call: the function and its error code.
type Error struct {
	Func string
	Code int32
	// Log is the compiler's log of a failed build.
	Log string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("opencl: %s: %s (%d)", e.Func, codeName(e.Code), e.Code)
	if e.Log != "" {
		s += ":\n" + strings.TrimSpace(e.Log)
	}
	return s
}

// codes are cl.h's names of the error codes fleet is likely to meet.
var codes = libs.Codes[int32]{Type: "cl_int", Names: map[int32]string{
	clDeviceNotFound:           "CL_DEVICE_NOT_FOUND",
	clCompilerNotAvailable:     "CL_COMPILER_NOT_AVAILABLE",
	clMemObjectAllocFailure:    "CL_MEM_OBJECT_ALLOCATION_FAILURE",
	clOutOfResources:           "CL_OUT_OF_RESOURCES",
	clOutOfHostMemory:          "CL_OUT_OF_HOST_MEMORY",
	clBuildProgramFailure:      "CL_BUILD_PROGRAM_FAILURE",
	clInvalidValue:             "CL_INVALID_VALUE",
	clInvalidKernelName:        "CL_INVALID_KERNEL_NAME",
	clInvalidWorkGroupSize:     "CL_INVALID_WORK_GROUP_SIZE",
	clInvalidProgramExecutable: "CL_INVALID_PROGRAM_EXECUTABLE",
	clInvalidBufferSize:        "CL_INVALID_BUFFER_SIZE",
	clInvalidGlobalWorkSize:    "CL_INVALID_GLOBAL_WORK_SIZE",
	clPlatformNotFoundKHR:      "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL platform is installed)",
}}

// codeName is the table's name of c, or "error" for a code it does not
// name (the message prints the number beside it).
func codeName(c int32) string {
	if _, ok := codes.Names[c]; !ok {
		return "error"
	}
	return codes.Name(c)
}

// ErrNoPlatform says the loader found no OpenCL platform: no ICD (PoCL,
// a GPU vendor's) is installed.
var ErrNoPlatform = errors.New("opencl: the loader lists no platform: install one (pocl-opencl-icd, or a GPU vendor's ICD)")

// api holds the bound entry points.
type api struct {
	getPlatformIDs, getPlatformInfo, getDeviceIDs, getDeviceInfo libs.Func
	createContext, createCommandQueue, createBuffer              libs.Func
	enqueueWriteBuffer, enqueueReadBuffer                        libs.Func
	createProgramWithSource, buildProgram, getProgramBuildInfo   libs.Func
	createProgramWithBinary, getProgramInfo                      libs.Func
	createKernel, setKernelArg, enqueueNDRangeKernel, finish     libs.Func
	releaseMemObject, releaseKernel, releaseProgram              libs.Func
	releaseCommandQueue, releaseContext                          libs.Func
	// The backend's queue work: copies, events, mapped host memory.
	enqueueCopyBuffer, enqueueMarkerWithWaitList libs.Func
	enqueueBarrierWithWaitList, waitForEvents    libs.Func
	releaseEvent, getEventProfilingInfo, flush   libs.Func
	enqueueMapBuffer, enqueueUnmapMemObject      libs.Func
	getKernelInfo                                libs.Func
}

var (
	loadOnce sync.Once
	cl       *api
	loadErr  error
)

// load opens the loader and binds its functions, once.
func load() (*api, error) {
	loadOnce.Do(func() {
		lib, err := libs.Open(Library)
		if err != nil {
			loadErr = fmt.Errorf("opencl: %w", err)
			return
		}
		a := &api{}
		for _, b := range []struct {
			f    *libs.Func
			name string
		}{
			{&a.getPlatformIDs, "clGetPlatformIDs"}, {&a.getPlatformInfo, "clGetPlatformInfo"},
			{&a.getDeviceIDs, "clGetDeviceIDs"}, {&a.getDeviceInfo, "clGetDeviceInfo"},
			{&a.createContext, "clCreateContext"}, {&a.createCommandQueue, "clCreateCommandQueue"},
			{&a.createBuffer, "clCreateBuffer"}, {&a.enqueueWriteBuffer, "clEnqueueWriteBuffer"},
			{&a.enqueueReadBuffer, "clEnqueueReadBuffer"}, {&a.createProgramWithSource, "clCreateProgramWithSource"},
			{&a.buildProgram, "clBuildProgram"}, {&a.getProgramBuildInfo, "clGetProgramBuildInfo"},
			{&a.createKernel, "clCreateKernel"}, {&a.setKernelArg, "clSetKernelArg"},
			{&a.enqueueNDRangeKernel, "clEnqueueNDRangeKernel"}, {&a.finish, "clFinish"},
			{&a.releaseMemObject, "clReleaseMemObject"}, {&a.releaseKernel, "clReleaseKernel"},
			{&a.releaseProgram, "clReleaseProgram"}, {&a.releaseCommandQueue, "clReleaseCommandQueue"},
			{&a.releaseContext, "clReleaseContext"},
			{&a.createProgramWithBinary, "clCreateProgramWithBinary"}, {&a.getProgramInfo, "clGetProgramInfo"},
			{&a.enqueueCopyBuffer, "clEnqueueCopyBuffer"}, {&a.enqueueMarkerWithWaitList, "clEnqueueMarkerWithWaitList"},
			{&a.enqueueBarrierWithWaitList, "clEnqueueBarrierWithWaitList"}, {&a.waitForEvents, "clWaitForEvents"},
			{&a.releaseEvent, "clReleaseEvent"}, {&a.getEventProfilingInfo, "clGetEventProfilingInfo"},
			{&a.flush, "clFlush"}, {&a.enqueueMapBuffer, "clEnqueueMapBuffer"},
			{&a.enqueueUnmapMemObject, "clEnqueueUnmapMemObject"}, {&a.getKernelInfo, "clGetKernelInfo"},
		} {
			*b.f = lib.Func(b.name)
		}
		cl = a
	})
	return cl, loadErr
}

// check turns a call's result into an error: r is the cl_int it returned
// (or the error code it wrote), err the binding's (a missing symbol).
func check(fn string, r uintptr, err error) error {
	if err != nil {
		err = fmt.Errorf("opencl: %s: %w", fn, err)
	}
	return codes.Err(r, err, func(c int32) error { return &Error{Func: fn, Code: c} })
}

// Device is one OpenCL device, as Devices lists it.
type Device struct {
	Index    int    // its N in opencl:N
	Platform string // the platform's name
	// PlatformVersion is the platform's OpenCL version string ("OpenCL
	// 3.0 PoCL ...").
	PlatformVersion string
	Name, Vendor    string
	// Version is the device's OpenCL version string, DriverVersion its
	// driver's.
	Version, DriverVersion string
	Type                   string // "cpu", "gpu", "accelerator" or "other"
	ComputeUnits           int
	MaxWorkGroupSize       int
	GlobalMemBytes         int64
	// MaxAllocBytes is the largest single buffer the device allows.
	MaxAllocBytes int64
	// CorrectDivSqrt says the device can divide and take square roots
	// correctly rounded (CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT), as the CPU
	// and CUDA do: fleet builds its kernels so where it can
	// (BuildOptions). OpenCL otherwise allows 2.5 and 3 ulp.
	CorrectDivSqrt bool
	// FP16 says the device has half-precision arithmetic (cl_khr_fp16).
	FP16 bool
	// BF16 names an extension for bf16 where the device lists one
	// (cl_intel_bfloat16_conversions); bf16 is otherwise stored and
	// widened to f32 for arithmetic.
	BF16 string

	platform, id uintptr
}

// Devices lists every device of every OpenCL platform, numbered as
// opencl:N numbers them. It fails with the library search's error where
// there is no loader, and with ErrNoPlatform where it lists no platform.
func Devices() ([]Device, error) {
	a, err := load()
	if err != nil {
		return nil, err
	}
	var n uint32
	r, err := a.getPlatformIDs.Call(0, 0, uintptr(unsafe.Pointer(&n)))
	if int32(r) == clPlatformNotFoundKHR || (err == nil && int32(r) == clSuccess && n == 0) {
		return nil, ErrNoPlatform
	}
	if err := check("clGetPlatformIDs", r, err); err != nil {
		return nil, err
	}
	plats := make([]uintptr, n)
	r, err = a.getPlatformIDs.Call(uintptr(n), uintptr(unsafe.Pointer(&plats[0])), 0)
	if err := check("clGetPlatformIDs", r, err); err != nil {
		return nil, err
	}
	var out []Device
	for _, p := range plats {
		pname, err := platformString(a, p, clPlatformName)
		if err != nil {
			return nil, err
		}
		pver, err := platformString(a, p, clPlatformVersion)
		if err != nil {
			return nil, err
		}
		var nd uint32
		r, err := a.getDeviceIDs.Call(p, clDeviceTypeAll, 0, 0, uintptr(unsafe.Pointer(&nd)))
		if int32(r) == clDeviceNotFound {
			continue // a platform with no device
		}
		if err := check("clGetDeviceIDs", r, err); err != nil {
			return nil, err
		}
		if nd == 0 {
			continue
		}
		ids := make([]uintptr, nd)
		r, err = a.getDeviceIDs.Call(p, clDeviceTypeAll, uintptr(nd), uintptr(unsafe.Pointer(&ids[0])), 0)
		if err := check("clGetDeviceIDs", r, err); err != nil {
			return nil, err
		}
		for _, id := range ids {
			d, err := describe(a, p, id)
			if err != nil {
				return nil, err
			}
			d.Index, d.Platform, d.PlatformVersion = len(out), pname, pver
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("opencl: %d platform(s) but no device", len(plats))
	}
	return out, nil
}

// describe reads a device's properties.
func describe(a *api, p, id uintptr) (Device, error) {
	d := Device{platform: p, id: id}
	str := func(param uint32, dst *string) error {
		s, err := deviceString(a, id, param)
		*dst = s
		return err
	}
	for _, f := range []struct {
		param uint32
		dst   *string
	}{{clDeviceName, &d.Name}, {clDeviceVendor, &d.Vendor}, {clDeviceVersion, &d.Version}, {clDriverVersion, &d.DriverVersion}} {
		if err := str(f.param, f.dst); err != nil {
			return d, err
		}
	}
	var ext string
	if err := str(clDeviceExtensions, &ext); err != nil {
		return d, err
	}
	exts := strings.Fields(ext)
	for _, e := range exts {
		switch e {
		case "cl_khr_fp16":
			d.FP16 = true
		case "cl_intel_bfloat16_conversions":
			d.BF16 = e
		}
	}
	var typ uint64
	var cu, wg uint64
	var mem, maxAlloc, fp uint64
	for _, f := range []struct {
		param uint32
		dst   unsafe.Pointer
		size  uintptr
	}{
		{clDeviceType, unsafe.Pointer(&typ), 8}, {clDeviceMaxComputeUnits, unsafe.Pointer(&cu), 4},
		{clDeviceMaxWorkGroupSize, unsafe.Pointer(&wg), unsafe.Sizeof(uintptr(0))}, {clDeviceGlobalMemSize, unsafe.Pointer(&mem), 8},
		{clDeviceMaxMemAllocSize, unsafe.Pointer(&maxAlloc), 8}, {clDeviceSingleFPConfig, unsafe.Pointer(&fp), 8},
	} {
		r, err := a.getDeviceInfo.Call(id, uintptr(f.param), f.size, uintptr(f.dst), 0)
		if err := check("clGetDeviceInfo", r, err); err != nil {
			return d, err
		}
	}
	d.ComputeUnits, d.MaxWorkGroupSize, d.GlobalMemBytes, d.MaxAllocBytes = int(uint32(cu)), int(wg), int64(mem), int64(maxAlloc)
	d.CorrectDivSqrt = fp&clFPCorrectlyRoundedDivSqrt != 0
	switch {
	case typ&clDeviceTypeGPU != 0:
		d.Type = "gpu"
	case typ&clDeviceTypeCPU != 0:
		d.Type = "cpu"
	case typ&clDeviceTypeAccelerator != 0:
		d.Type = "accelerator"
	default:
		d.Type = "other"
	}
	return d, nil
}

// platformString reads a string property of platform p.
func platformString(a *api, p uintptr, param uint32) (string, error) {
	return infoString("clGetPlatformInfo", a.getPlatformInfo, p, param)
}

// deviceString reads a string property of device id.
func deviceString(a *api, id uintptr, param uint32) (string, error) {
	return infoString("clGetDeviceInfo", a.getDeviceInfo, id, param)
}

// infoString calls one of the clGet*Info functions for a string: its size,
// then its bytes.
func infoString(name string, f libs.Func, obj uintptr, param uint32) (string, error) {
	var size uintptr
	r, err := f.Call(obj, uintptr(param), 0, 0, uintptr(unsafe.Pointer(&size)))
	if err := check(name, r, err); err != nil {
		return "", err
	}
	if size == 0 {
		return "", nil
	}
	b := make([]byte, size)
	r, err = f.Call(obj, uintptr(param), size, uintptr(unsafe.Pointer(&b[0])), 0)
	if err := check(name, r, err); err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\x00 "), nil
}

// Doctor writes what fleet finds of OpenCL: where the loader is, or why
// it was not found, and each platform's devices with their versions,
// memory and fp16 support. It says what it cannot find and returns
// nothing: OpenCL is optional.
func Doctor(w io.Writer) {
	fmt.Fprintln(w, "OpenCL:")
	ds, err := Devices()
	for _, r := range libs.Report() {
		if r.Name != Library.Name {
			continue
		}
		if r.Lib != nil {
			fmt.Fprintf(w, "  loader: %s (%s)\n", r.Lib.Path, r.Lib.Where)
		}
	}
	if err != nil {
		fmt.Fprintf(w, "  %v\n", err)
		return
	}
	if _, berr := loadBLAS(); berr != nil {
		fmt.Fprintf(w, "  CLBlast: %v (the products need it: install libclblast1)\n", berr)
	} else {
		for _, r := range libs.Report() {
			if r.Name == CLBlastLibrary.Name && r.Lib != nil {
				fmt.Fprintf(w, "  CLBlast: %s (%s)\n", r.Lib.Path, r.Lib.Where)
			}
		}
	}
	platform := ""
	for _, d := range ds {
		if d.Platform != platform {
			platform = d.Platform
			fmt.Fprintf(w, "  platform %s: %s\n", d.Platform, d.PlatformVersion)
		}
		fp16 := "no fp16"
		if d.FP16 {
			fp16 = "fp16"
		}
		div := "division and sqrt correctly rounded"
		if !d.CorrectDivSqrt {
			div = "division and sqrt within 2.5 and 3 ulp"
		}
		fmt.Fprintf(w, "    opencl:%d  %s (%s, %s, driver %s): %d compute units, %s, work-groups up to %d, %s, %s\n",
			d.Index, d.Name, d.Type, d.Version, d.DriverVersion, d.ComputeUnits, units.Bytes(d.GlobalMemBytes), d.MaxWorkGroupSize, fp16, div)
		if d.MaxWorkGroupSize < MinWorkGroupSize {
			fmt.Fprintf(w, "      fleet cannot train on it: its kernels run work-groups of %d\n", MinWorkGroupSize)
		}
	}
	fmt.Fprintln(w, "  (train on one with --device opencl:N; --device auto never picks OpenCL)")
}

// OutOfMemory reports whether the error says the device ran out of
// memory for a buffer.
func (e *Error) OutOfMemory() bool {
	return e.Code == clMemObjectAllocFailure || e.Code == clOutOfResources || e.Code == clInvalidBufferSize
}

// MinWorkGroupSize is the work-group size fleet's kernels launch: a
// device that allows less cannot run them.
const MinWorkGroupSize = 256

// BuildOptions is how fleet builds its kernels for d: OpenCL C 1.2, with
// division and square roots correctly rounded where d can.
func BuildOptions(d Device) string {
	if d.CorrectDivSqrt {
		return "-cl-std=CL1.2 -cl-fp32-correctly-rounded-divide-sqrt"
	}
	return "-cl-std=CL1.2"
}

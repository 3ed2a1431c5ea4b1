package driver

import (
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Result is a CUresult, the status every driver call returns.
type Result int32

// Results that callers test for. The rest are named by String.
const (
	Success                      Result = 0
	ErrorInvalidValue            Result = 1
	ErrorOutOfMemory             Result = 2
	ErrorNotInitialized          Result = 3
	ErrorDeinitialized           Result = 4
	ErrorStubLibrary             Result = 34
	ErrorNoDevice                Result = 100
	ErrorInvalidDevice           Result = 101
	ErrorInvalidImage            Result = 200
	ErrorInvalidContext          Result = 201
	ErrorNoBinaryForGPU          Result = 209
	ErrorInvalidPTX              Result = 218
	ErrorUnsupportedPTXVersion   Result = 222
	ErrorNotFound                Result = 500
	ErrorNotReady                Result = 600
	ErrorIllegalAddress          Result = 700
	ErrorLaunchOutOfResources    Result = 701
	ErrorLaunchFailed            Result = 719
	ErrorSystemDriverMismatch    Result = 803
	ErrorCompatNotSupportedOnDev Result = 804
	ErrorUnknown                 Result = 999
)

// results are cuda.h's names, used when the driver cannot name a code
// itself (or is not loaded).
var results = libs.Codes[Result]{Type: "CUresult", Names: map[Result]string{
	0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
	3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
	34: "CUDA_ERROR_STUB_LIBRARY", 46: "CUDA_ERROR_DEVICE_UNAVAILABLE",
	100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE", 201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU", 218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", 400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND", 600: "CUDA_ERROR_NOT_READY",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS", 701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT", 719: "CUDA_ERROR_LAUNCH_FAILED",
	801: "CUDA_ERROR_NOT_SUPPORTED", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", 900: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	901: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", 999: "CUDA_ERROR_UNKNOWN",
}}

// String is cuda.h's name for r, or the number.
func (r Result) String() string { return results.Name(r) }

// Error is a failed driver call.
type Error struct {
	Code Result
	Func string // the driver function, e.g. "cuMemAlloc_v2"
	Name string // e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Desc string // the driver's description, e.g. "out of memory"
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.String()
	}
	s := "cuda: "
	if e.Func != "" {
		s += e.Func + ": "
	}
	s += name
	if e.Desc != "" {
		s += " (" + e.Desc + ")"
	}
	return s
}

// Is matches another *Error with the same Code, so that
// errors.Is(err, ErrOutOfMemory) holds for any out-of-memory failure.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errors to test for with errors.Is.
var (
	ErrOutOfMemory    = &Error{Code: ErrorOutOfMemory, Name: "CUDA_ERROR_OUT_OF_MEMORY"}
	ErrNoDevice       = &Error{Code: ErrorNoDevice, Name: "CUDA_ERROR_NO_DEVICE"}
	ErrNotReady       = &Error{Code: ErrorNotReady, Name: "CUDA_ERROR_NOT_READY"}
	ErrNotInitialized = &Error{Code: ErrorNotInitialized, Name: "CUDA_ERROR_NOT_INITIALIZED"}
	ErrInvalidValue   = &Error{Code: ErrorInvalidValue, Name: "CUDA_ERROR_INVALID_VALUE"}
	ErrNoBinaryForGPU = &Error{Code: ErrorNoBinaryForGPU, Name: "CUDA_ERROR_NO_BINARY_FOR_GPU"}
)

// result turns a call's outcome into an error: a missing symbol's error as
// it is, a non-zero CUresult as an *Error named by the driver.
func (d *Driver) result(fn string, r uintptr, err error) error {
	return results.Err(r, err, func(code Result) error {
		return &Error{Code: code, Func: fn, Name: d.ErrorName(code), Desc: d.ErrorString(code)}
	})
}

// ErrorName asks the driver for r's name (cuGetErrorName), falling back to
// cuda.h's.
func (d *Driver) ErrorName(r Result) string {
	var p uintptr
	if d != nil {
		if rc, err := d.cuGetErrorName.Call(uintptr(r), uintptr(unsafe.Pointer(&p))); err == nil && rc == 0 && p != 0 {
			return libs.GoString(p)
		}
	}
	return r.String()
}

// ErrorString asks the driver to describe r (cuGetErrorString); "" if it cannot.
func (d *Driver) ErrorString(r Result) string {
	var p uintptr
	if d != nil {
		if rc, err := d.cuGetErrorString.Call(uintptr(r), uintptr(unsafe.Pointer(&p))); err == nil && rc == 0 && p != 0 {
			return libs.GoString(p)
		}
	}
	return ""
}

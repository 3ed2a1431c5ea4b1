package nvrtc

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// KernelOptions are the options fleet's kernels are compiled with, besides
// the architecture: device functions by default (no __device__ needed on
// helpers) and C++17. NVRTC 11.2 and later accept them.
var KernelOptions = []string{"-default-device", "-std=c++17"}

// Result is an nvrtcResult.
type Result int32

// NVRTC results.
const (
	Success               Result = 0
	ErrorOutOfMemory      Result = 1
	ErrorProgramCreation  Result = 2
	ErrorInvalidInput     Result = 3
	ErrorInvalidProgram   Result = 4
	ErrorInvalidOption    Result = 5
	ErrorCompilation      Result = 6
	ErrorBuiltinOperation Result = 7
	ErrorInternal         Result = 11
)

var results = libs.Codes[Result]{Type: "nvrtcResult", Names: map[Result]string{
	0: "NVRTC_SUCCESS", 1: "NVRTC_ERROR_OUT_OF_MEMORY", 2: "NVRTC_ERROR_PROGRAM_CREATION_FAILURE",
	3: "NVRTC_ERROR_INVALID_INPUT", 4: "NVRTC_ERROR_INVALID_PROGRAM", 5: "NVRTC_ERROR_INVALID_OPTION",
	6: "NVRTC_ERROR_COMPILATION", 7: "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
	8: "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION", 9: "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
	10: "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", 11: "NVRTC_ERROR_INTERNAL_ERROR",
}}

func (r Result) String() string { return results.Name(r) }

// Error is a failed NVRTC call. For a compilation, Log holds NVRTC's log.
type Error struct {
	Code Result
	Func string // e.g. "nvrtcCompileProgram"
	Desc string // nvrtcGetErrorString's text
	Name string // the program's name, e.g. "elementwise.cu"
	Log  string
}

func (e *Error) Error() string {
	s := "nvrtc: "
	if e.Name != "" {
		s += e.Name + ": "
	}
	s += e.Func + ": " + e.Code.String()
	if e.Desc != "" && e.Desc != e.Code.String() {
		s += " (" + e.Desc + ")"
	}
	if e.Log != "" {
		s += "\n" + strings.TrimRight(e.Log, "\n\x00")
	}
	return s
}

// Is matches another *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// ErrCompilation matches (errors.Is) every failed compilation.
var ErrCompilation = &Error{Code: ErrorCompilation}

// NVRTC is one loaded NVRTC library.
type NVRTC struct {
	Lib          *libs.Lib
	Major, Minor int

	nvrtcVersion, nvrtcGetErrorString, nvrtcCreateProgram, nvrtcDestroyProgram libs.Func
	nvrtcCompileProgram, nvrtcGetProgramLogSize, nvrtcGetProgramLog            libs.Func
	nvrtcGetCUBINSize, nvrtcGetCUBIN, nvrtcGetPTXSize, nvrtcGetPTX             libs.Func
	nvrtcGetNumSupportedArchs, nvrtcGetSupportedArchs                          libs.Func

	mu sync.Mutex // one compilation at a time: NVRTC 11 does not promise more
}

var (
	openOnce  sync.Once
	shared    *NVRTC
	sharedErr error
)

// Open loads NVRTC (the newest of libnvrtc.so.13, .12, .11.2 found; see
// package libs) once per process, with its libnvrtc-builtins.
func Open() (*NVRTC, error) {
	openOnce.Do(func() {
		lib, err := libs.Open(libs.NVRTC)
		if err != nil {
			sharedErr = err
			return
		}
		shared, sharedErr = Load(lib)
	})
	return shared, sharedErr
}

// Load binds an opened NVRTC library and reads its version.
func Load(lib *libs.Lib) (*NVRTC, error) {
	n := &NVRTC{Lib: lib}
	for _, b := range []struct {
		f    *libs.Func
		name string
	}{
		{&n.nvrtcVersion, "nvrtcVersion"},
		{&n.nvrtcGetErrorString, "nvrtcGetErrorString"},
		{&n.nvrtcCreateProgram, "nvrtcCreateProgram"},
		{&n.nvrtcDestroyProgram, "nvrtcDestroyProgram"},
		{&n.nvrtcCompileProgram, "nvrtcCompileProgram"},
		{&n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize"},
		{&n.nvrtcGetProgramLog, "nvrtcGetProgramLog"},
		{&n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize"},
		{&n.nvrtcGetCUBIN, "nvrtcGetCUBIN"},
		{&n.nvrtcGetPTXSize, "nvrtcGetPTXSize"},
		{&n.nvrtcGetPTX, "nvrtcGetPTX"},
		{&n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs"},
		{&n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs"},
	} {
		*b.f = lib.Func(b.name)
	}
	var major, minor int32
	r, err := n.nvrtcVersion.Call(uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))
	if err := n.result("nvrtcVersion", "", r, err); err != nil {
		return nil, err
	}
	n.Major, n.Minor = int(major), int(minor)
	lib.SetVersion(n.Version())
	return n, nil
}

// Version is "major.minor", e.g. "12.8". It is part of the kernel cache key.
func (n *NVRTC) Version() string { return fmt.Sprintf("%d.%d", n.Major, n.Minor) }

func (n *NVRTC) result(fn, name string, r uintptr, err error) error {
	return results.Err(r, err, func(code Result) error {
		e := &Error{Code: code, Func: fn, Name: name}
		if p, err := n.nvrtcGetErrorString.Call(uintptr(code)); err == nil {
			e.Desc = libs.GoString(p)
		}
		return e
	})
}

// SupportedArchs lists the sm_XY numbers (e.g. 90) this NVRTC can target.
func (n *NVRTC) SupportedArchs() ([]int, error) {
	var count int32
	r, err := n.nvrtcGetNumSupportedArchs.Call(uintptr(unsafe.Pointer(&count)))
	if err := n.result("nvrtcGetNumSupportedArchs", "", r, err); err != nil {
		return nil, err
	}
	if count <= 0 {
		return nil, nil
	}
	archs := make([]int32, count)
	r, err = n.nvrtcGetSupportedArchs.Call(uintptr(unsafe.Pointer(&archs[0])))
	if err := n.result("nvrtcGetSupportedArchs", "", r, err); err != nil {
		return nil, err
	}
	out := make([]int, count)
	for i, a := range archs {
		out[i] = int(a)
	}
	return out, nil
}

// Options is the option list Compile passes for arch and opts: the
// architecture option first (unless opts has one), then opts.
func Options(arch string, opts ...string) []string {
	for _, o := range opts {
		if strings.HasPrefix(o, "--gpu-architecture") || strings.HasPrefix(o, "-arch") {
			return append([]string(nil), opts...)
		}
	}
	out := make([]string, 0, len(opts)+1)
	if arch != "" {
		out = append(out, "--gpu-architecture="+arch)
	}
	return append(out, opts...)
}

// Compile compiles one CUDA C++ translation unit. For a real architecture
// ("sm_90") it returns a cubin the driver loads as it is; for a virtual one
// ("compute_90") it returns PTX. name names the program in messages. The log
// holds NVRTC's warnings, or its errors when err is a compilation failure
// (errors.Is(err, ErrCompilation); the *Error carries the log too).
func (n *NVRTC) Compile(src, name, arch string, opts ...string) (image []byte, log string, err error) {
	options := Options(arch, opts...)
	if archOf(options) == "" {
		return nil, "", fmt.Errorf("nvrtc: %s: no target architecture (want e.g. sm_90)", name)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	ptx := strings.HasPrefix(archOf(options), "compute_")

	csrc, cname := libs.CString(src), libs.CString(name)
	var prog uintptr
	r, err := n.nvrtcCreateProgram.Call(uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])),
		uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0)
	if err := n.result("nvrtcCreateProgram", name, r, err); err != nil {
		return nil, "", err
	}
	defer n.nvrtcDestroyProgram.Call(uintptr(unsafe.Pointer(&prog)))

	copts := make([][]byte, len(options))
	ptrs := make([]*byte, len(options)+1) // +1: never empty
	for i, o := range options {
		copts[i] = libs.CString(o)
		ptrs[i] = &copts[i][0]
	}
	r, cerr := n.nvrtcCompileProgram.Call(prog, uintptr(len(options)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(copts) // ptrs points into them
	log = n.log(prog)
	if err := n.result("nvrtcCompileProgram", name, r, cerr); err != nil {
		if e, ok := err.(*Error); ok {
			e.Log = log
		}
		return nil, log, err
	}

	sizeFn, getFn, what := n.nvrtcGetCUBINSize, n.nvrtcGetCUBIN, "CUBIN"
	if ptx {
		sizeFn, getFn, what = n.nvrtcGetPTXSize, n.nvrtcGetPTX, "PTX"
	}
	var size uint64
	r, err = sizeFn.Call(prog, uintptr(unsafe.Pointer(&size)))
	if err := n.result("nvrtcGet"+what+"Size", name, r, err); err != nil {
		return nil, log, err
	}
	if size == 0 {
		return nil, log, fmt.Errorf("nvrtc: %s: empty %s (is %q a real architecture?)", name, what, archOf(options))
	}
	image = make([]byte, size)
	r, err = getFn.Call(prog, uintptr(unsafe.Pointer(&image[0])))
	if err := n.result("nvrtcGet"+what, name, r, err); err != nil {
		return nil, log, err
	}
	if ptx {
		image = []byte(strings.TrimRight(string(image), "\x00"))
	}
	return image, log, nil
}

// archOf is the architecture an option list names ("sm_90"), or "".
func archOf(opts []string) string {
	for i, o := range opts {
		for _, p := range []string{"--gpu-architecture=", "-arch=", "--gpu-architecture", "-arch"} {
			if strings.HasPrefix(o, p) {
				if v := strings.TrimPrefix(o, p); v != "" {
					return v
				}
				if i+1 < len(opts) {
					return opts[i+1]
				}
			}
		}
	}
	return ""
}

func (n *NVRTC) log(prog uintptr) string {
	var size uint64
	if r, err := n.nvrtcGetProgramLogSize.Call(prog, uintptr(unsafe.Pointer(&size))); err != nil || r != 0 || size <= 1 {
		return ""
	}
	buf := make([]byte, size)
	if r, err := n.nvrtcGetProgramLog.Call(prog, uintptr(unsafe.Pointer(&buf[0]))); err != nil || r != 0 {
		return ""
	}
	return strings.TrimRight(string(buf), "\x00")
}

// Compile compiles src with the process's NVRTC (see NVRTC.Compile).
func Compile(src, name, arch string, opts ...string) (image []byte, log string, err error) {
	n, err := Open()
	if err != nil {
		return nil, "", err
	}
	return n.Compile(src, name, arch, opts...)
}

package cublas

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Op says whether a matrix is used as it is or transposed (cublasOperation_t).
type Op int32

// Operations.
const (
	OpN Op = 0 // as stored
	OpT Op = 1 // transposed
)

// DataType is a cudaDataType.
type DataType int32

// Data types.
const (
	R32F  DataType = 0  // CUDA_R_32F
	R64F  DataType = 1  // CUDA_R_64F
	R16F  DataType = 2  // CUDA_R_16F
	R16BF DataType = 14 // CUDA_R_16BF
)

// ComputeType is a cublasComputeType_t. fleet uses the F32 ones, whose
// alpha and beta are float32.
type ComputeType int32

// Compute types with F32 scalars.
const (
	Compute32F         ComputeType = 68 // CUBLAS_COMPUTE_32F
	Compute32FPedantic ComputeType = 69
	Compute32FFast16F  ComputeType = 74
	Compute32FFast16BF ComputeType = 75
	Compute32FFastTF32 ComputeType = 77 // TF32 tensor cores for F32 inputs
)

// Algo is a cublasGemmAlgo_t.
type Algo int32

// AlgoDefault lets cuBLAS choose (CUBLAS_GEMM_DEFAULT).
const AlgoDefault Algo = -1

// Math is a cublasMath_t.
type Math int32

// Math modes.
const (
	MathDefault                 Math = 0
	MathPedantic                Math = 2
	MathTF32TensorOp            Math = 3
	MathDisallowReducedPrecRedn Math = 16 // or'ed in: no reduced-precision reductions for F16/BF16
)

// Status is a cublasStatus_t.
type Status int32

// Statuses.
const (
	StatusSuccess         Status = 0
	StatusNotInitialized  Status = 1
	StatusAllocFailed     Status = 3
	StatusInvalidValue    Status = 7
	StatusArchMismatch    Status = 8
	StatusMappingError    Status = 11
	StatusExecutionFailed Status = 13
	StatusInternalError   Status = 14
	StatusNotSupported    Status = 15
	StatusLicenseError    Status = 16
)

var statuses = libs.Codes[Status]{Type: "cublasStatus", Names: map[Status]string{
	0: "CUBLAS_STATUS_SUCCESS", 1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED",
	7: "CUBLAS_STATUS_INVALID_VALUE", 8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR",
	13: "CUBLAS_STATUS_EXECUTION_FAILED", 14: "CUBLAS_STATUS_INTERNAL_ERROR",
	15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}}

func (s Status) String() string { return statuses.Name(s) }

// Error is a failed cuBLAS call.
type Error struct {
	Code Status
	Func string
}

func (e *Error) Error() string { return "cublas: " + e.Func + ": " + e.Code.String() }

// Is matches another *Error with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// Errors to test for with errors.Is.
var (
	ErrAllocFailed  = &Error{Code: StatusAllocFailed}
	ErrNotSupported = &Error{Code: StatusNotSupported}
	ErrInvalidValue = &Error{Code: StatusInvalidValue}
)

func check(fn string, r uintptr, err error) error {
	return statuses.Err(r, err, func(s Status) error { return &Error{Code: s, Func: fn} })
}

// CUBLAS is one loaded libcublas.
type CUBLAS struct {
	Lib *libs.Lib

	create, destroy, setStream, setWorkspace, setMathMode, getProperty libs.Func
	gemmEx, gemmStridedBatchedEx                                       libs.Func
}

var (
	openOnce  sync.Once
	shared    *CUBLAS
	sharedErr error
)

// Open loads libcublas (.so.13 or .so.12, with the libcublasLt beside it)
// once per process.
func Open() (*CUBLAS, error) {
	openOnce.Do(func() {
		lib, err := libs.Open(libs.CUBLAS)
		if err != nil {
			sharedErr = err
			return
		}
		shared = Load(lib)
		if v, err := shared.Version(); err == nil {
			lib.SetVersion(v)
		}
	})
	return shared, sharedErr
}

// Load binds an opened libcublas. Functions it lacks fail when called with
// a *libs.MissingSymbolError.
func Load(lib *libs.Lib) *CUBLAS {
	return &CUBLAS{
		Lib:                  lib,
		create:               lib.Func("cublasCreate_v2"),
		destroy:              lib.Func("cublasDestroy_v2"),
		setStream:            lib.Func("cublasSetStream_v2"),
		setWorkspace:         lib.Func("cublasSetWorkspace_v2"),
		setMathMode:          lib.Func("cublasSetMathMode"),
		getProperty:          lib.Func("cublasGetProperty"),
		gemmEx:               lib.Func("cublasGemmEx"),
		gemmStridedBatchedEx: lib.Func("cublasGemmStridedBatchedEx"),
	}
}

// Version is the library's "major.minor.patch" (cublasGetProperty).
func (b *CUBLAS) Version() (string, error) {
	var v [3]int32
	for i := range v {
		r, err := b.getProperty.Call(uintptr(i), uintptr(unsafe.Pointer(&v[i])))
		if err := check("cublasGetProperty", r, err); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]), nil
}

// Handle is a cuBLAS context: create one per device and stream, after the
// device's context is current. A Handle is used by one goroutine at a time.
type Handle struct {
	b       *CUBLAS
	h       uintptr
	scalars [2]float32 // alpha and beta, read by cuBLAS during each call
}

// Create creates a handle in the current CUDA context.
func (b *CUBLAS) Create() (*Handle, error) {
	h := &Handle{b: b}
	r, err := b.create.Call(uintptr(unsafe.Pointer(&h.h)))
	if err := check("cublasCreate_v2", r, err); err != nil {
		return nil, err
	}
	return h, nil
}

// Raw is the cublasHandle_t.
func (h *Handle) Raw() uintptr { return h.h }

// Destroy releases the handle.
func (h *Handle) Destroy() error {
	r, err := h.b.destroy.Fast(h.h)
	return check("cublasDestroy_v2", r, err)
}

// SetStream makes later calls run on stream (a CUstream; 0 is the default stream).
func (h *Handle) SetStream(stream uintptr) error {
	r, err := h.b.setStream.Fast(h.h, stream)
	return check("cublasSetStream_v2", r, err)
}

// SetWorkspace gives cuBLAS a device buffer of its own, so it allocates
// none while a CUDA graph is captured or the pool is tight.
func (h *Handle) SetWorkspace(ptr, bytes uint64) error {
	r, err := h.b.setWorkspace.Fast(h.h, uintptr(ptr), uintptr(bytes))
	return check("cublasSetWorkspace_v2", r, err)
}

// SetMathMode sets the math mode (MathDefault, MathTF32TensorOp, ...).
func (h *Handle) SetMathMode(m Math) error {
	r, err := h.b.setMathMode.Fast(h.h, uintptr(m))
	return check("cublasSetMathMode", r, err)
}

// Gemm describes C = Alpha·op(A)·op(B) + Beta·C in cuBLAS's column-major
// terms: op(A) is M×K, op(B) is K×N, C is M×N, and LDx are leading
// dimensions. A, B and C are device addresses. For a batch, StrideX are the
// elements between consecutive matrices (0 repeats one) and Batch the count.
//
// Row-major products are column-major ones transposed: row-major C = A·B is
// column-major Cᵀ = Bᵀ·Aᵀ, so swap A and B (and M and N). For a Linear
// layer, y[B,out] = x[B,in]·W[out,in]ᵀ is TransA=OpT, TransB=OpN, M=out,
// N=B, K=in, A=W, LDA=in, B=x, LDB=in, C=y, LDC=out.
type Gemm struct {
	TransA, TransB      Op
	M, N, K             int
	Alpha, Beta         float32
	A, B, C             uint64
	AType, BType, CType DataType
	LDA, LDB, LDC       int
	StrideA, StrideB    int64
	StrideC             int64
	Batch               int
	Compute             ComputeType
	Algo                Algo
}

func (g *Gemm) checkCompute() error {
	switch g.Compute {
	case Compute32F, Compute32FPedantic, Compute32FFast16F, Compute32FFast16BF, Compute32FFastTF32:
		return nil
	}
	return fmt.Errorf("cublas: compute type %d has non-float32 scalars; use a Compute32F* type", g.Compute)
}

// GemmEx runs cublasGemmEx (Batch and the strides are ignored). It does not
// allocate.
func (h *Handle) GemmEx(g *Gemm) error {
	if err := g.checkCompute(); err != nil {
		return err
	}
	h.scalars = [2]float32{g.Alpha, g.Beta}
	alpha, beta := uintptr(unsafe.Pointer(&h.scalars[0])), uintptr(unsafe.Pointer(&h.scalars[1]))
	r, err := h.b.gemmEx.Fast(h.h, uintptr(g.TransA), uintptr(g.TransB),
		uintptr(g.M), uintptr(g.N), uintptr(g.K),
		alpha, uintptr(g.A), uintptr(g.AType), uintptr(g.LDA),
		uintptr(g.B), uintptr(g.BType), uintptr(g.LDB),
		beta, uintptr(g.C), uintptr(g.CType), uintptr(g.LDC),
		uintptr(g.Compute), uintptr(g.Algo))
	runtime.KeepAlive(h) // h.scalars is read during the call
	return check("cublasGemmEx", r, err)
}

// GemmStridedBatchedEx runs cublasGemmStridedBatchedEx over g.Batch
// matrices. It does not allocate.
func (h *Handle) GemmStridedBatchedEx(g *Gemm) error {
	if err := g.checkCompute(); err != nil {
		return err
	}
	h.scalars = [2]float32{g.Alpha, g.Beta}
	alpha, beta := uintptr(unsafe.Pointer(&h.scalars[0])), uintptr(unsafe.Pointer(&h.scalars[1]))
	r, err := h.b.gemmStridedBatchedEx.Fast(h.h, uintptr(g.TransA), uintptr(g.TransB),
		uintptr(g.M), uintptr(g.N), uintptr(g.K),
		alpha, uintptr(g.A), uintptr(g.AType), uintptr(g.LDA), uintptr(g.StrideA),
		uintptr(g.B), uintptr(g.BType), uintptr(g.LDB), uintptr(g.StrideB),
		beta, uintptr(g.C), uintptr(g.CType), uintptr(g.LDC), uintptr(g.StrideC),
		uintptr(g.Batch), uintptr(g.Compute), uintptr(g.Algo))
	runtime.KeepAlive(h)
	return check("cublasGemmStridedBatchedEx", r, err)
}

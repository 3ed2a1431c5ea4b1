package cublas

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/cuda/libs"
)

// Lt is libcublasLt, cuBLAS's matmul library with fused epilogues (bias,
// GELU), as llm.c uses it. Only the handle and version are bound so far:
// this is the seam where cublasLtMatmul (16 arguments, which purego passes)
// and its descriptor calls (cublasLtMatmulDescCreate, ...SetAttribute,
// cublasLtMatrixLayoutCreate, cublasLtMatmulPreference*,
// cublasLtMatmulAlgoGetHeuristic) go when fused matmuls come.
type Lt struct {
	Lib *libs.Lib

	create, destroy, getVersion libs.Func
}

var (
	ltOnce   sync.Once
	ltShared *Lt
	ltErr    error
)

// OpenLt loads libcublasLt (.so.13 or .so.12) once per process.
func OpenLt() (*Lt, error) {
	ltOnce.Do(func() {
		lib, err := libs.Open(libs.CUBLASLt)
		if err != nil {
			ltErr = err
			return
		}
		ltShared = LoadLt(lib)
		if v, err := ltShared.Version(); err == nil {
			lib.SetVersion(v)
		}
	})
	return ltShared, ltErr
}

// LoadLt binds an opened libcublasLt.
func LoadLt(lib *libs.Lib) *Lt {
	return &Lt{
		Lib:        lib,
		create:     lib.Func("cublasLtCreate"),
		destroy:    lib.Func("cublasLtDestroy"),
		getVersion: lib.Func("cublasLtGetVersion"),
	}
}

// Version is cublasLtGetVersion's number as "major.minor.patch" (120805 is 12.8.5).
func (l *Lt) Version() (string, error) {
	v, err := l.getVersion.Fast()
	if err != nil {
		return "", err
	}
	return ltVersion(uint64(v)), nil
}

func ltVersion(v uint64) string { return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100) }

// LtHandle is a cublasLtHandle_t.
type LtHandle uintptr

// Create creates a cuBLASLt handle.
func (l *Lt) Create() (LtHandle, error) {
	var h uintptr
	r, err := l.create.Call(uintptr(unsafe.Pointer(&h)))
	return LtHandle(h), check("cublasLtCreate", r, err)
}

// Destroy releases h.
func (l *Lt) Destroy(h LtHandle) error {
	r, err := l.destroy.Fast(uintptr(h))
	return check("cublasLtDestroy", r, err)
}

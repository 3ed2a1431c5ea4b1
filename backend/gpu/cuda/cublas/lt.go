package cublas

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Lt is libcublasLt, cuBLAS's matmul library with fused epilogues (bias,
// GELU and their gradients), as llm.c uses it: the handle, the version and
// Matmul (cublasLtMatmul, 16 arguments, with its descriptor calls). The
// backend does not use it yet.
type Lt struct {
	Lib *libs.Lib

	create, destroy, getVersion libs.Func

	matmul, heuristic                    libs.Func
	descCreate, descDestroy, descSetAttr libs.Func
	layoutCreate, layoutDestroy          libs.Func
	layoutSetAttr                        libs.Func
	prefCreate, prefDestroy, prefSetAttr libs.Func

	mu    sync.Mutex
	plans map[ltKey]*ltPlan // the products' plans, by shape (Matmul)
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

		matmul:        lib.Func("cublasLtMatmul"),
		heuristic:     lib.Func("cublasLtMatmulAlgoGetHeuristic"),
		descCreate:    lib.Func("cublasLtMatmulDescCreate"),
		descDestroy:   lib.Func("cublasLtMatmulDescDestroy"),
		descSetAttr:   lib.Func("cublasLtMatmulDescSetAttribute"),
		layoutCreate:  lib.Func("cublasLtMatrixLayoutCreate"),
		layoutDestroy: lib.Func("cublasLtMatrixLayoutDestroy"),
		layoutSetAttr: lib.Func("cublasLtMatrixLayoutSetAttribute"),
		prefCreate:    lib.Func("cublasLtMatmulPreferenceCreate"),
		prefDestroy:   lib.Func("cublasLtMatmulPreferenceDestroy"),
		prefSetAttr:   lib.Func("cublasLtMatmulPreferenceSetAttribute"),
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
	l.forget(h)
	r, err := l.destroy.Fast(uintptr(h))
	return check("cublasLtDestroy", r, err)
}

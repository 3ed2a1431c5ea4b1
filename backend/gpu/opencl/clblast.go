package opencl

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"

	"github.com/fleetml/fleet/backend/gpu/libs"
)

// CLBlastLibrary is CLBlast, the OpenCL BLAS fleet's products go to,
// searched for as the loader is.
var CLBlastLibrary = libs.Library{Name: "clblast", Sonames: []string{"libclblast.so.1"}, Locate: Library.Locate}

// CLBlast's enumerations (clblast_c.h).
const (
	clblastRowMajor    = 101
	clblastColMajor    = 102
	clblastNoTranspose = 111
	clblastTranspose   = 112
	clblastSuccess     = 0
)

// blas holds CLBlast's entry points. They take floats by value, so they
// are bound with purego.RegisterFunc rather than called through libs.
type blas struct {
	sgemm func(layout, ta, tb int32, m, n, k uintptr, alpha float32, a, aOff, aLd, b, bOff, bLd uintptr,
		beta float32, c, cOff, cLd uintptr, queue *uintptr, event uintptr) int32
	sgemmStridedBatched func(layout, ta, tb int32, m, n, k uintptr, alpha float32, a, aOff, aLd, aStride, b, bOff, bLd, bStride uintptr,
		beta float32, c, cOff, cLd, cStride, batch uintptr, queue *uintptr, event uintptr) int32
}

var (
	blasOnce sync.Once
	blasLib  *blas
	blasErr  error
)

// loadBLAS opens CLBlast and binds its products, once.
func loadBLAS() (*blas, error) {
	blasOnce.Do(func() {
		defer func() { // purego refuses a signature the platform cannot pass (too many arguments)
			if r := recover(); r != nil {
				blasLib, blasErr = nil, fmt.Errorf("opencl: binding CLBlast: %v", r)
			}
		}()
		lib, err := libs.Open(CLBlastLibrary)
		if err != nil {
			blasErr = fmt.Errorf("opencl: the products need CLBlast: %w", err)
			return
		}
		b := &blas{}
		for _, f := range []struct {
			fn   any
			name string
		}{{&b.sgemm, "CLBlastSgemm"}, {&b.sgemmStridedBatched, "CLBlastSgemmStridedBatched"}} {
			sym := lib.Func(f.name)
			if sym.Addr == 0 {
				blasErr = fmt.Errorf("opencl: CLBlast: %w", sym.Err())
				return
			}
			purego.RegisterFunc(f.fn, sym.Addr)
		}
		blasLib = b
	})
	return blasLib, blasErr
}

// CLBlast reports whether CLBlast loads and binds: nil, or why not.
func CLBlast() error {
	_, err := loadBLAS()
	return err
}

// GEMM is one (batched, strided) product in row-major layout: for each of
// Batch items, C = Alpha·op(A)·op(B) + Beta·C, op(A) M×K and op(B) K×N,
// with the items StrideA, StrideB and StrideC elements apart and the first
// at OffA, OffB and OffC.
//
// ColMajor reads the matrices column-major instead (as BLAS and cuBLAS
// do), and LDA, LDB and LDC, where not 0, are the leading dimensions (else
// those of packed matrices).
type GEMM struct {
	Batch, M, N, K            int
	TransA, TransB            bool
	Alpha, Beta               float32
	OffA, OffB, OffC          int
	StrideA, StrideB, StrideC int
	ColMajor                  bool
	LDA, LDB, LDC             int
}

// Sgemm queues the F32 product g of buffers a, b and c on the context's
// queue, through CLBlast (whose kernels it compiles for the device on
// first use).
func (c *Context) Sgemm(g GEMM, a, b, cc *Buffer) error {
	bl, err := loadBLAS()
	if err != nil {
		return err
	}
	if g.Batch < 1 || g.M < 1 || g.N < 1 || g.K < 1 {
		return fmt.Errorf("opencl: sgemm of %d×(%d×%d×%d)", g.Batch, g.M, g.K, g.N)
	}
	layout := int32(clblastRowMajor)
	// Packed leading dimensions: a row-major op(A) M×K stored as is has
	// K columns; column-major, M rows.
	ta, lda := int32(clblastNoTranspose), g.K
	if g.TransA {
		ta, lda = clblastTranspose, g.M
	}
	tb, ldb := int32(clblastNoTranspose), g.N
	if g.TransB {
		tb, ldb = clblastTranspose, g.K
	}
	ldc := g.N
	if g.ColMajor {
		layout, lda, ldb, ldc = clblastColMajor, g.M, g.K, g.M
		if g.TransA {
			lda = g.K
		}
		if g.TransB {
			ldb = g.N
		}
	}
	if g.LDA != 0 {
		lda = g.LDA
	}
	if g.LDB != 0 {
		ldb = g.LDB
	}
	if g.LDC != 0 {
		ldc = g.LDC
	}
	q := &c.queue // CLBlast takes the queue by address
	var code int32
	if g.Batch == 1 {
		code = bl.sgemm(layout, ta, tb, uintptr(g.M), uintptr(g.N), uintptr(g.K), g.Alpha,
			a.mem, uintptr(g.OffA), uintptr(lda), b.mem, uintptr(g.OffB), uintptr(ldb),
			g.Beta, cc.mem, uintptr(g.OffC), uintptr(ldc), q, 0)
	} else {
		code = bl.sgemmStridedBatched(layout, ta, tb, uintptr(g.M), uintptr(g.N), uintptr(g.K), g.Alpha,
			a.mem, uintptr(g.OffA), uintptr(lda), uintptr(g.StrideA), b.mem, uintptr(g.OffB), uintptr(ldb), uintptr(g.StrideB),
			g.Beta, cc.mem, uintptr(g.OffC), uintptr(ldc), uintptr(g.StrideC), uintptr(g.Batch), q, 0)
	}
	if code != clblastSuccess {
		return fmt.Errorf("opencl: CLBlast sgemm %d×(%d×%d×%d): status %d", g.Batch, g.M, g.K, g.N, code)
	}
	return nil
}

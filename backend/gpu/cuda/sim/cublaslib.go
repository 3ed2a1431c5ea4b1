package sim

import (
	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/libs"
)

// CUBLAS is the stand-in for libcublas: handles, streams and settings are
// accepted, and each GEMM is recorded with its FLOPs (2·M·N·K a matrix)
// and the bytes of its three matrices, priced on the unit its types run
// on: tensor cores for BF16 or F16 operands (and TF32 where asked), CUDA
// cores for plain F32.
func (d *Device) CUBLAS() *libs.Lib {
	ok := func(a []uintptr) uintptr { return 0 }
	size := func(t cublas.DataType) float64 {
		switch t {
		case cublas.R16F, cublas.R16BF:
			return 2
		}
		return 4
	}
	gemm := func(name string, m, n, k, batch float64, at, bt, ct cublas.DataType, beta float32, compute cublas.ComputeType) {
		flops := 2 * m * n * k * batch
		cBytes := m * n * size(ct)
		if beta != 0 {
			cBytes *= 2 // C is read too
		}
		bytes := batch * (m*k*size(at) + k*n*size(bt) + cBytes)
		peak := d.Spec.FP32
		switch {
		case at == cublas.R16BF || at == cublas.R16F || compute == cublas.Compute32FFast16BF || compute == cublas.Compute32FFast16F:
			peak = d.Spec.BF16
		case compute == cublas.Compute32FFastTF32:
			peak = d.Spec.TF32
		}
		d.mu.Lock()
		d.work(name, bytes, flops, peak, TensorCoreEfficiency)
		d.mu.Unlock()
	}
	f32 := func(p uintptr) float32 { return *(*float32)(ptr(p)) }
	funcs := map[string]libs.GoFunc{
		"cublasCreate_v2": func(a []uintptr) uintptr {
			d.mu.Lock()
			h := d.newHandle()
			d.mu.Unlock()
			*(*uintptr)(ptr(a[0])) = h
			return 0
		},
		"cublasDestroy_v2":      ok,
		"cublasSetStream_v2":    ok,
		"cublasSetWorkspace_v2": ok,
		"cublasSetMathMode":     ok,
		"cublasGetProperty": func(a []uintptr) uintptr { // (type, value*): 12.8.0
			*(*int32)(ptr(a[1])) = [3]int32{12, 8, 0}[min(a[0], 2)]
			return 0
		},
		// cublasGemmEx(h, ta, tb, m, n, k, alpha*, A, Atype, lda, B, Btype, ldb, beta*, C, Ctype, ldc, compute, algo)
		"cublasGemmEx": func(a []uintptr) uintptr {
			gemm("cublasGemmEx", float64(a[3]), float64(a[4]), float64(a[5]), 1,
				cublas.DataType(a[8]), cublas.DataType(a[11]), cublas.DataType(a[15]), f32(a[13]), cublas.ComputeType(a[17]))
			return 0
		},
		// cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha*, A, Atype, lda, strideA,
		// B, Btype, ldb, strideB, beta*, C, Ctype, ldc, strideC, batch, compute, algo)
		"cublasGemmStridedBatchedEx": func(a []uintptr) uintptr {
			gemm("cublasGemmStridedBatchedEx", float64(a[3]), float64(a[4]), float64(a[5]), float64(a[20]),
				cublas.DataType(a[8]), cublas.DataType(a[12]), cublas.DataType(a[17]), f32(a[15]), cublas.ComputeType(a[21]))
			return 0
		},
	}
	return libs.Virtual("cublas", "libcublas.so.12 (simulated)", funcs)
}

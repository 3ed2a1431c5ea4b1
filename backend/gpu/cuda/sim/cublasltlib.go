package sim

import (
	"sync"

	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/libs"
)

// Attributes of cuBLASLt's descriptors the stand-in reads (cublasLt.h).
const (
	ltTransA    = 3
	ltEpilogue  = 7
	ltBias      = 8
	ltAux       = 11
	ltAuxLD     = 12
	ltBatchSize = 5
)

// ltDesc is a matmul descriptor: its compute type and the attributes set.
type ltDesc struct {
	compute  cublas.ComputeType
	transA   bool
	epilogue cublas.Epilogue
	bias     bool
	aux      bool
	auxLD    int64
}

// ltLayout is a matrix layout: its type, shape and batch.
type ltLayout struct {
	dt         cublas.DataType
	rows, cols float64
	batch      float64
}

// table holds the objects of one kind the stand-in hands out, by handle.
type table[T any] struct {
	mu sync.Mutex
	m  map[uintptr]*T
}

func (t *table[T]) put(h uintptr, v *T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[uintptr]*T{}
	}
	t.m[h] = v
}

// get returns the object h names, or nil; callers change it under the
// table's lock (with), since another call may hold it too.
func (t *table[T]) get(h uintptr) *T {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[h]
}

// with runs fn on the object h names, if any, under the table's lock.
func (t *table[T]) with(h uintptr, fn func(*T)) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok := t.m[h]
	if ok {
		fn(v)
	}
	return ok
}

func (t *table[T]) del(h uintptr) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.m, h)
}

// declines reports whether the stand-in's heuristic finds no algorithm
// for a product: by cublasLt.h's rule for CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
// a GELU epilogue's auxiliary matrix (GELU_AUX, GELU_AUX_BIAS, DGELU,
// DGELU_BGRAD) needs a leading dimension that is divisible by 8 and no
// less than the output's rows. So a model whose MLP is not a multiple of
// 8 wide (an odd n_embd) runs its GELU in fleet's own kernels, as a real
// cuBLASLt would make it, and the tests reach the fallback.
func declines(ds *ltDesc, lc *ltLayout) bool {
	switch ds.epilogue {
	case cublas.EpilogueGELUAux, cublas.EpilogueGELUAuxBias, cublas.EpilogueDGELU, cublas.EpilogueDGELUBGrad:
		return ds.auxLD%8 != 0 || float64(ds.auxLD) < lc.rows
	}
	return false
}

// CUBLASLt is the stand-in for libcublasLt: descriptors, layouts and
// preferences are kept as the library would, the heuristic finds one
// algorithm except where declines says the real one would find none, and each cublasLtMatmul is recorded as one launch with
// its FLOPs (2·M·N·K a matrix) and the bytes of its matrices, its bias
// and its epilogue's auxiliary matrix, priced as CUBLAS prices a GEMM.
func (d *Device) CUBLASLt() *libs.Lib {
	var descs table[ltDesc]
	var layouts table[ltLayout]
	ok := func(a []uintptr) uintptr { return 0 }
	handle := func(p uintptr) uintptr {
		d.mu.Lock()
		h := d.newHandle()
		d.mu.Unlock()
		*(*uintptr)(ptr(p)) = h
		return h
	}
	i32 := func(p uintptr) int32 { return *(*int32)(ptr(p)) }
	size := func(t cublas.DataType) float64 {
		switch t {
		case cublas.R16F, cublas.R16BF:
			return 2
		}
		return 4
	}
	funcs := map[string]libs.GoFunc{
		"cublasLtCreate":     func(a []uintptr) uintptr { handle(a[0]); return 0 },
		"cublasLtDestroy":    ok,
		"cublasLtGetVersion": func([]uintptr) uintptr { return 120805 },
		// (desc*, computeType, scaleType)
		"cublasLtMatmulDescCreate": func(a []uintptr) uintptr {
			descs.put(handle(a[0]), &ltDesc{compute: cublas.ComputeType(a[1])})
			return 0
		},
		"cublasLtMatmulDescDestroy": func(a []uintptr) uintptr { descs.del(a[0]); return 0 },
		// (desc, attribute, buf*, size)
		"cublasLtMatmulDescSetAttribute": func(a []uintptr) uintptr {
			found := descs.with(a[0], func(ds *ltDesc) {
				switch a[1] {
				case ltTransA:
					ds.transA = i32(a[2]) != int32(cublas.OpN)
				case ltEpilogue:
					ds.epilogue = cublas.Epilogue(uint32(i32(a[2])))
				case ltBias:
					ds.bias = *(*uint64)(ptr(a[2])) != 0
				case ltAux:
					ds.aux = *(*uint64)(ptr(a[2])) != 0
				case ltAuxLD:
					ds.auxLD = *(*int64)(ptr(a[2]))
				}
			})
			if !found {
				return uintptr(cublas.StatusInvalidValue)
			}
			return 0
		},
		// (layout*, type, rows, cols, ld)
		"cublasLtMatrixLayoutCreate": func(a []uintptr) uintptr {
			layouts.put(handle(a[0]), &ltLayout{dt: cublas.DataType(a[1]), rows: float64(a[2]), cols: float64(a[3]), batch: 1})
			return 0
		},
		"cublasLtMatrixLayoutDestroy": func(a []uintptr) uintptr { layouts.del(a[0]); return 0 },
		"cublasLtMatrixLayoutSetAttribute": func(a []uintptr) uintptr {
			if a[1] == ltBatchSize {
				layouts.with(a[0], func(l *ltLayout) { l.batch = float64(max(i32(a[2]), 1)) })
			}
			return 0
		},
		"cublasLtMatmulPreferenceCreate":       func(a []uintptr) uintptr { handle(a[0]); return 0 },
		"cublasLtMatmulPreferenceDestroy":      ok,
		"cublasLtMatmulPreferenceSetAttribute": ok,
		// (h, desc, la, lb, lc, ld, pref, requested, results*, found*)
		"cublasLtMatmulAlgoGetHeuristic": func(a []uintptr) uintptr {
			ds, lc := descs.get(a[1]), layouts.get(a[4])
			if ds == nil || lc == nil {
				return uintptr(cublas.StatusInvalidValue)
			}
			found := int32(1)
			if declines(ds, lc) {
				found = 0
			}
			*(*int32)(ptr(a[9])) = found
			return 0
		},
		// (h, desc, alpha*, A, la, B, lb, beta*, C, lc, D, ld, algo*, ws, wsBytes, stream)
		"cublasLtMatmul": func(a []uintptr) uintptr {
			ds, la, lb, lc := descs.get(a[1]), layouts.get(a[4]), layouts.get(a[6]), layouts.get(a[9])
			if ds == nil || la == nil || lb == nil || lc == nil {
				return uintptr(cublas.StatusInvalidValue)
			}
			d.mu.Lock()
			wsOK := a[14] == 0 || d.extent(uint64(a[13])) >= float64(a[14]) // the workspace lies in device memory
			if wsOK {
				d.ltWorkspace = int64(a[14])
			}
			d.mu.Unlock()
			if !wsOK {
				return uintptr(cublas.StatusInvalidValue)
			}
			m, n, k := lc.rows, lc.cols, la.cols
			if ds.transA {
				k = la.rows
			}
			batch := lc.batch
			cBytes := m * n * size(lc.dt)
			if *(*float32)(ptr(a[7])) != 0 {
				cBytes *= 2 // C is read too
			}
			bytes := batch * (la.rows*la.cols*size(la.dt) + lb.rows*lb.cols*size(lb.dt) + cBytes)
			if ds.aux { // GELU_AUX writes the product beside D; DGELU reads it (D's type)
				bytes += batch * m * n * size(lc.dt)
			}
			if ds.bias {
				bytes += m * size(lc.dt)
			}
			peak := d.Spec.FP32
			switch {
			case la.dt == cublas.R16BF || la.dt == cublas.R16F || ds.compute == cublas.Compute32FFast16BF || ds.compute == cublas.Compute32FFast16F:
				peak = d.Spec.BF16
			case ds.compute == cublas.Compute32FFastTF32:
				peak = d.Spec.TF32
			}
			d.mu.Lock()
			d.work("cublasLtMatmul", bytes, 2*m*n*k*batch, peak, TensorCoreEfficiency)
			d.mu.Unlock()
			return 0
		},
	}
	return libs.Virtual("cublasLt", "libcublasLt.so.12 (simulated)", funcs)
}

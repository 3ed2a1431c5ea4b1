package cublas

import (
	"fmt"
	"runtime"
	"unsafe"
)

// Epilogue is a cublasLtEpilogue_t: what cublasLtMatmul does to the product
// before it writes D.
type Epilogue uint32

// Epilogues (cublasLt.h).
const (
	EpilogueDefault     Epilogue = 1
	EpilogueBias        Epilogue = 4   // D = product + bias (a column, broadcast over D's columns)
	EpilogueGELU        Epilogue = 32  // D = gelu(product)
	EpilogueGELUBias    Epilogue = 36  // D = gelu(product + bias)
	EpilogueGELUAux     Epilogue = 160 // D = gelu(product), the product kept in Aux for the backward pass
	EpilogueGELUAuxBias Epilogue = 164 // D = gelu(product + bias), product + bias kept in Aux
	EpilogueDGELU       Epilogue = 192 // D = product · gelu'(Aux)
	EpilogueDGELUBGrad  Epilogue = 208 // DGELU, and the bias gradient (D's sum over columns) into Bias
	EpilogueBGradA      Epilogue = 256 // the bias gradient of A (its sum over columns) into Bias
	EpilogueBGradB      Epilogue = 512 // the bias gradient of B (its sum over rows) into Bias
)

// Descriptor attributes and layout attributes cublasLtMatmul reads
// (cublasLt.h).
const (
	ltDescTransA        = 3
	ltDescTransB        = 4
	ltDescEpilogue      = 7
	ltDescBiasPointer   = 8
	ltDescAuxPointer    = 11
	ltDescAuxLD         = 12
	ltLayoutBatchCount  = 5
	ltLayoutBatchStride = 6
	ltPrefMaxWorkspace  = 1
)

// LtMatmul is one cublasLtMatmul: D = Alpha·op(A)·op(B) + Beta·C for each
// matrix of the batch, column-major as Gemm, then the epilogue. D has C's
// type and leading dimension (it may be C itself). Bias is the bias
// vector, or where the bias gradient goes (BGRAD epilogues); Aux, with
// leading dimension AuxLD, is where GELU_AUX keeps the GELU input and
// where DGELU reads it. Workspace (WorkspaceBytes) is device memory
// cuBLASLt may use, and Stream the stream it queues on.
type LtMatmul struct {
	TransA, TransB      Op
	M, N, K             int
	Alpha, Beta         float32
	A, B, C, D          uint64
	AType, BType, CType DataType
	LDA, LDB, LDC       int
	Batch               int // 0 or 1: one product
	StrideA, StrideB    int64
	StrideC             int64
	Compute             ComputeType
	Epilogue            Epilogue
	Bias, Aux           uint64
	AuxLD               int
	Workspace           uint64
	WorkspaceBytes      int
	Stream              uintptr
}

// heuristicResult is a cublasLtMatmulHeuristicResult_t: the algorithm
// (64 bytes), the workspace it needs, its status and waves count, and 16
// reserved bytes.
type heuristicResult struct {
	algo      [64]byte
	workspace uint64
	state     int32
	waves     float32
	reserved  [4]int32
}

// ltKey is what a product's plan depends on: everything but its
// pointers, scalars and stream.
type ltKey struct {
	h                   LtHandle
	transA, transB      Op
	m, n, k             int
	aType, bType, cType DataType
	lda, ldb, ldc       int
	batch               int
	strideA, strideB    int64
	strideC             int64
	compute             ComputeType
	epilogue            Epilogue
	bias, aux           bool
	auxLD               int
	workspace           int
}

// ltPlan is a product's cuBLASLt description, kept for every later product
// of its shape: the operation, its three layouts and the algorithm the
// heuristic chose.
type ltPlan struct {
	desc, la, lb, lc uintptr
	algo             [64]byte
}

// Matmul runs one product with its epilogue on h. The first product of a
// shape describes the operation and its matrices and asks cuBLASLt's
// heuristic for one algorithm that fits the workspace; that plan is kept
// (a training step repeats its shapes, and the heuristic costs more host
// time than the launch), so later ones only set the bias and aux pointers
// and queue the product on m.Stream.
func (l *Lt) Matmul(h LtHandle, m *LtMatmul) error {
	if err := (&Gemm{Compute: m.Compute}).checkCompute(); err != nil {
		return err
	}
	key := ltKey{h, m.TransA, m.TransB, m.M, m.N, m.K, m.AType, m.BType, m.CType, m.LDA, m.LDB, m.LDC, max(m.Batch, 1),
		m.StrideA, m.StrideB, m.StrideC, m.Compute, m.Epilogue, m.Bias != 0, m.Aux != 0, m.AuxLD, m.WorkspaceBytes}
	l.mu.Lock()
	p, ok := l.plans[key]
	l.mu.Unlock()
	if !ok {
		var err error
		if p, err = l.plan(h, m); err != nil {
			return err
		}
		l.mu.Lock()
		if l.plans == nil {
			l.plans = map[ltKey]*ltPlan{}
		}
		l.plans[key] = p
		l.mu.Unlock()
	}
	for _, a := range [...]struct {
		attr int
		v    *uint64
	}{{ltDescBiasPointer, &m.Bias}, {ltDescAuxPointer, &m.Aux}} {
		if *a.v != 0 {
			r, err := l.descSetAttr.Fast(p.desc, uintptr(a.attr), uintptr(unsafe.Pointer(a.v)), 8)
			if err := check("cublasLtMatmulDescSetAttribute", r, err); err != nil {
				return err
			}
		}
	}
	alpha, beta := m.Alpha, m.Beta
	r, cerr := l.matmul.Fast(uintptr(h), p.desc, uintptr(unsafe.Pointer(&alpha)), uintptr(m.A), p.la, uintptr(m.B), p.lb,
		uintptr(unsafe.Pointer(&beta)), uintptr(m.C), p.lc, uintptr(m.D), p.lc, uintptr(unsafe.Pointer(&p.algo)),
		uintptr(m.Workspace), uintptr(m.WorkspaceBytes), m.Stream)
	runtime.KeepAlive(p)
	runtime.KeepAlive(m)
	return check("cublasLtMatmul", r, cerr)
}

// forget destroys the plans made on h (Destroy calls it).
func (l *Lt) forget(h LtHandle) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, p := range l.plans {
		if k.h == h {
			p.destroy(l)
			delete(l.plans, k)
		}
	}
}

func (p *ltPlan) destroy(l *Lt) {
	for _, d := range []struct {
		f interface {
			Fast(...uintptr) (uintptr, error)
		}
		p uintptr
	}{{l.descDestroy, p.desc}, {l.layoutDestroy, p.la}, {l.layoutDestroy, p.lb}, {l.layoutDestroy, p.lc}} {
		if d.p != 0 {
			d.f.Fast(d.p)
		}
	}
}

// plan describes m's product and picks its algorithm.
func (l *Lt) plan(h LtHandle, m *LtMatmul) (_ *ltPlan, err error) {
	p := &ltPlan{}
	var pref uintptr
	defer func() {
		if pref != 0 {
			l.prefDestroy.Fast(pref)
		}
		if err != nil {
			p.destroy(l)
		}
	}()
	r, cerr := l.descCreate.Call(uintptr(unsafe.Pointer(&p.desc)), uintptr(m.Compute), uintptr(R32F))
	if err := check("cublasLtMatmulDescCreate", r, cerr); err != nil {
		return nil, err
	}
	set := func(attr int, v unsafe.Pointer, size uintptr) error {
		r, err := l.descSetAttr.Call(p.desc, uintptr(attr), uintptr(v), size)
		return check(fmt.Sprintf("cublasLtMatmulDescSetAttribute(%d)", attr), r, err)
	}
	ta, tb, ep := int32(m.TransA), int32(m.TransB), uint32(m.Epilogue)
	auxLD := int64(m.AuxLD)
	for _, a := range []struct {
		attr int
		p    unsafe.Pointer
		size uintptr
		skip bool
	}{
		{ltDescTransA, unsafe.Pointer(&ta), 4, false},
		{ltDescTransB, unsafe.Pointer(&tb), 4, false},
		{ltDescEpilogue, unsafe.Pointer(&ep), 4, m.Epilogue == 0},
		{ltDescBiasPointer, unsafe.Pointer(&m.Bias), 8, m.Bias == 0},
		{ltDescAuxPointer, unsafe.Pointer(&m.Aux), 8, m.Aux == 0},
		{ltDescAuxLD, unsafe.Pointer(&auxLD), 8, m.Aux == 0},
	} {
		if !a.skip {
			if err := set(a.attr, a.p, a.size); err != nil {
				return nil, err
			}
		}
	}
	rowsA, colsA := m.M, m.K
	if m.TransA == OpT {
		rowsA, colsA = m.K, m.M
	}
	rowsB, colsB := m.K, m.N
	if m.TransB == OpT {
		rowsB, colsB = m.N, m.K
	}
	layout := func(lp *uintptr, t DataType, rows, cols, ld int, stride int64) error {
		r, err := l.layoutCreate.Call(uintptr(unsafe.Pointer(lp)), uintptr(t), uintptr(rows), uintptr(cols), uintptr(int64(ld)))
		if err := check("cublasLtMatrixLayoutCreate", r, err); err != nil {
			return err
		}
		if m.Batch <= 1 {
			return nil
		}
		n := int32(m.Batch)
		r, err = l.layoutSetAttr.Call(*lp, ltLayoutBatchCount, uintptr(unsafe.Pointer(&n)), 4)
		if err := check("cublasLtMatrixLayoutSetAttribute(batch count)", r, err); err != nil {
			return err
		}
		r, err = l.layoutSetAttr.Call(*lp, ltLayoutBatchStride, uintptr(unsafe.Pointer(&stride)), 8)
		return check("cublasLtMatrixLayoutSetAttribute(batch stride)", r, err)
	}
	if err := layout(&p.la, m.AType, rowsA, colsA, m.LDA, m.StrideA); err != nil {
		return nil, err
	}
	if err := layout(&p.lb, m.BType, rowsB, colsB, m.LDB, m.StrideB); err != nil {
		return nil, err
	}
	if err := layout(&p.lc, m.CType, m.M, m.N, m.LDC, m.StrideC); err != nil {
		return nil, err
	}
	r, cerr = l.prefCreate.Call(uintptr(unsafe.Pointer(&pref)))
	if err := check("cublasLtMatmulPreferenceCreate", r, cerr); err != nil {
		return nil, err
	}
	ws := uint64(m.WorkspaceBytes)
	r, cerr = l.prefSetAttr.Call(pref, ltPrefMaxWorkspace, uintptr(unsafe.Pointer(&ws)), 8)
	if err := check("cublasLtMatmulPreferenceSetAttribute", r, cerr); err != nil {
		return nil, err
	}
	var res heuristicResult
	var found int32
	r, cerr = l.heuristic.Call(uintptr(h), p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, uintptr(unsafe.Pointer(&res)), uintptr(unsafe.Pointer(&found)))
	if err := check("cublasLtMatmulAlgoGetHeuristic", r, cerr); err != nil {
		return nil, err
	}
	if found < 1 {
		return nil, fmt.Errorf("cublas: cuBLASLt has no algorithm for a %d×%d×%d product with epilogue %d within %d bytes of workspace (%w)",
			m.M, m.N, m.K, m.Epilogue, m.WorkspaceBytes, ErrNotSupported)
	}
	p.algo = res.algo
	return p, nil
}

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

// Matmul runs one product with its epilogue on h: it describes the
// operation and its matrices, asks cuBLASLt's heuristic for one
// algorithm that fits the workspace, and queues the product on m.Stream.
func (l *Lt) Matmul(h LtHandle, m *LtMatmul) (err error) {
	if err := (&Gemm{Compute: m.Compute}).checkCompute(); err != nil {
		return err
	}
	var desc, la, lb, lc, pref uintptr
	defer func() {
		for _, d := range []struct {
			f interface {
				Fast(...uintptr) (uintptr, error)
			}
			p uintptr
		}{{l.descDestroy, desc}, {l.layoutDestroy, la}, {l.layoutDestroy, lb}, {l.layoutDestroy, lc}, {l.prefDestroy, pref}} {
			if d.p != 0 {
				d.f.Fast(d.p)
			}
		}
	}()
	r, cerr := l.descCreate.Call(uintptr(unsafe.Pointer(&desc)), uintptr(m.Compute), uintptr(R32F))
	if err := check("cublasLtMatmulDescCreate", r, cerr); err != nil {
		return err
	}
	set := func(attr int, p unsafe.Pointer, size uintptr) error {
		r, err := l.descSetAttr.Call(desc, uintptr(attr), uintptr(p), size)
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
				return err
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
	layout := func(p *uintptr, t DataType, rows, cols, ld int, stride int64) error {
		r, err := l.layoutCreate.Call(uintptr(unsafe.Pointer(p)), uintptr(t), uintptr(rows), uintptr(cols), uintptr(int64(ld)))
		if err := check("cublasLtMatrixLayoutCreate", r, err); err != nil {
			return err
		}
		if m.Batch <= 1 {
			return nil
		}
		n := int32(m.Batch)
		r, err = l.layoutSetAttr.Call(*p, ltLayoutBatchCount, uintptr(unsafe.Pointer(&n)), 4)
		if err := check("cublasLtMatrixLayoutSetAttribute(batch count)", r, err); err != nil {
			return err
		}
		r, err = l.layoutSetAttr.Call(*p, ltLayoutBatchStride, uintptr(unsafe.Pointer(&stride)), 8)
		return check("cublasLtMatrixLayoutSetAttribute(batch stride)", r, err)
	}
	if err := layout(&la, m.AType, rowsA, colsA, m.LDA, m.StrideA); err != nil {
		return err
	}
	if err := layout(&lb, m.BType, rowsB, colsB, m.LDB, m.StrideB); err != nil {
		return err
	}
	if err := layout(&lc, m.CType, m.M, m.N, m.LDC, m.StrideC); err != nil {
		return err
	}
	r, cerr = l.prefCreate.Call(uintptr(unsafe.Pointer(&pref)))
	if err := check("cublasLtMatmulPreferenceCreate", r, cerr); err != nil {
		return err
	}
	ws := uint64(m.WorkspaceBytes)
	r, cerr = l.prefSetAttr.Call(pref, ltPrefMaxWorkspace, uintptr(unsafe.Pointer(&ws)), 8)
	if err := check("cublasLtMatmulPreferenceSetAttribute", r, cerr); err != nil {
		return err
	}
	var res heuristicResult
	var found int32
	r, cerr = l.heuristic.Call(uintptr(h), desc, la, lb, lc, lc, pref, 1, uintptr(unsafe.Pointer(&res)), uintptr(unsafe.Pointer(&found)))
	if err := check("cublasLtMatmulAlgoGetHeuristic", r, cerr); err != nil {
		return err
	}
	if found < 1 {
		return fmt.Errorf("cublas: cuBLASLt has no algorithm for a %d×%d×%d product with epilogue %d within %d bytes of workspace (%w)",
			m.M, m.N, m.K, m.Epilogue, m.WorkspaceBytes, ErrNotSupported)
	}
	alpha, beta := m.Alpha, m.Beta
	r, cerr = l.matmul.Call(uintptr(h), desc, uintptr(unsafe.Pointer(&alpha)), uintptr(m.A), la, uintptr(m.B), lb,
		uintptr(unsafe.Pointer(&beta)), uintptr(m.C), lc, uintptr(m.D), lc, uintptr(unsafe.Pointer(&res.algo)),
		uintptr(m.Workspace), uintptr(m.WorkspaceBytes), m.Stream)
	runtime.KeepAlive(&res)
	return check("cublasLtMatmul", r, cerr)
}

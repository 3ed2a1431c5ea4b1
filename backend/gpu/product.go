package gpu

import "github.com/fleetml/fleet/backend"

// Transpose says whether a product reads a stored matrix as it is or
// transposed.
type Transpose uint8

// The two ways to read a matrix.
const (
	NoTranspose Transpose = iota
	Transposed
)

// Compute is how a product computes. Every mode accumulates in F32 and
// takes F32 alpha and beta.
type Compute uint8

// Compute modes.
const (
	ComputeF32       Compute = iota // F32 throughout
	ComputeRoundBF16                // F32 operands rounded to BF16 as they are read
	ComputeRoundF16                 // F32 operands rounded to F16 as they are read
	ComputeTF32                     // F32 operands on TF32 tensor cores (10-bit mantissas)
)

// Rounds is the type a mode rounds F32 operands to: BF16, F16, or F32 for
// none (TF32 is the hardware's, not a rounding of the operands the
// product's result is defined by).
func (c Compute) Rounds() backend.DType {
	switch c {
	case ComputeRoundBF16:
		return backend.BF16
	case ComputeRoundF16:
		return backend.F16
	}
	return backend.F32
}

// Epilogue is what a product does to its result before it writes it.
type Epilogue uint8

// Epilogues.
const (
	EpilogueNone        Epilogue = iota
	EpilogueBias                 // D = product + bias (a column, broadcast over D's columns)
	EpilogueGELUAux              // D = gelu(product), the product kept in Aux for the backward pass
	EpilogueGELUAuxBias          // D = gelu(product + bias), product + bias kept in Aux
	EpilogueDGELU                // D = product · gelu'(Aux)
	EpilogueBGradA               // the bias gradient of A (its sum over columns) into Bias
)

// Product describes C = Alpha·op(A)·op(B) + Beta·C for each matrix of a
// batch, in the column-major terms of the BLAS libraries: op(A) is M×K,
// op(B) is K×N, C is M×N, LDx are leading dimensions, and StrideX the
// elements between consecutive matrices (0 repeats one). The operand types
// are F32, BF16 or F16 (A's and B's alike); C is F32 or BF16.
type Product struct {
	TransA, TransB      Transpose
	M, N, K             int
	Alpha, Beta         float32
	A, B, C             Ptr
	AType, BType, CType backend.DType
	LDA, LDB, LDC       int
	StrideA, StrideB    int64
	StrideC             int64
	Batch               int
	Compute             Compute
}

// EpilogueProduct is one product (Batch 1) with an epilogue, writing C in
// place. Bias is the bias vector, or where a bias gradient goes; Aux, with
// leading dimension AuxLD, is where GELU's input is kept or read.
type EpilogueProduct struct {
	Product
	Epilogue  Epilogue
	Bias, Aux Ptr
	AuxLD     int
}

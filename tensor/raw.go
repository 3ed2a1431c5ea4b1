package tensor

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// The ops in this file write into tensors the caller owns, outside
// autograd, reading them as flat F32 buffers: an optimizer's arithmetic
// on its own scratch (Muon's Newton–Schulz iterations), which needs
// batched, strided products and a few elementwise passes but no graph.

// Gemm is the backend's matrix product (backend.MatMul) on flat views:
// p's shapes, transposes and strides are in elements from the first
// element of a, b and c, which must hold them (p.Extents, and c's
// batch of M×N results). c may not overlap a or b. Alpha 0 is taken as
// 1, as in every product of this package.
func Gemm(p backend.MatMul, a, b, c *Tensor) {
	const op = "gemm"
	check(op, a, b, c)
	wantDType(op, F32, a, b, c)
	ea, eb := p.Extents()
	ec := p.M * p.N
	if p.Batch > 1 {
		ec += (p.Batch - 1) * p.StrideC
	}
	if p.Batch < 1 || ea > a.Numel() || eb > b.Numel() || ec > c.Numel() {
		panic(&Error{Op: op, Msg: fmt.Sprintf("a product of %d %d×%d×%d matrices (strides %d, %d, %d) does not fit operands of %d, %d and %d elements",
			p.Batch, p.M, p.K, p.N, p.StrideA, p.StrideB, p.StrideC, a.Numel(), b.Numel(), c.Numel()), Operands: []*Tensor{a, b, c}})
	}
	gemm(p, a, b, c, nil)
}

// UnaryInto writes op(src) into dst, elementwise (dst may be src).
func UnaryInto(op backend.UnaryOp, dst, src *Tensor) {
	check("unary_into", dst, src)
	wantDType("unary_into", F32, dst, src)
	sameShape("unary_into", dst, src)
	dst.be.Unary(op, dst.ref(), src.ref(), dst.Numel())
}

// BinaryInto writes a op b into dst, elementwise (dst may be a or b).
func BinaryInto(op backend.BinaryOp, dst, a, b *Tensor) {
	check("binary_into", dst, a, b)
	wantDType("binary_into", F32, dst, a, b)
	sameShape("binary_into", dst, a)
	sameShape("binary_into", dst, b)
	dst.be.Binary(op, dst.ref(), a.ref(), b.ref(), dst.Numel())
}

// ScaleInto writes s·src into dst (dst may be src).
func ScaleInto(dst, src *Tensor, s float32) {
	check("scale_into", dst, src)
	wantDType("scale_into", F32, dst, src)
	sameShape("scale_into", dst, src)
	dst.be.Scale(dst.ref(), src.ref(), s, dst.Numel())
}

// SumColsInto writes the sums of src's rows, read as a rows×cols
// matrix, into dst (rows elements).
func SumColsInto(dst, src *Tensor, rows, cols int) {
	check("sum_cols_into", dst, src)
	wantDType("sum_cols_into", F32, dst, src)
	if dst.Numel() < rows || src.Numel() < rows*cols {
		panic(&Error{Op: "sum_cols_into", Msg: fmt.Sprintf("%d×%d sums do not fit operands of %d and %d elements", rows, cols, dst.Numel(), src.Numel()), Operands: []*Tensor{dst, src}})
	}
	dst.be.SumCols(dst.ref(), src.ref(), rows, cols, 1)
}

// CopyInto copies src's elements into dst, which must have as many,
// whatever the shapes.
func CopyInto(dst, src *Tensor) {
	check("copy_into", dst, src)
	sameNumel("copy_into", dst, src)
	dst.be.Copy(dst.ref(), src.ref(), dst.Numel())
}

// AxpyInto adds alpha·x into dst elementwise (as many elements,
// whatever the shapes).
func AxpyInto(dst, x *Tensor, alpha float32) {
	check("axpy_into", dst, x)
	wantDType("axpy_into", F32, dst, x)
	sameNumel("axpy_into", dst, x)
	dst.be.Axpy(dst.ref(), x.ref(), alpha, dst.Numel())
}

func sameNumel(op string, a, b *Tensor) {
	if a.Numel() != b.Numel() {
		panic(&Error{Op: op, Msg: fmt.Sprintf("%d and %d elements", a.Numel(), b.Numel()), Operands: []*Tensor{a, b}})
	}
}

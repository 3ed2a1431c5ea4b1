package cpu

import "github.com/fleetml/fleet/backend"

// f16Operands holds an F16 product's operands widened to F32, reused
// across calls.
type f16Operands struct{ a, b Buffer }

var f16OperandPool pool[f16Operands]

// matmulF16 is MatMul for F16 A and B and F32 C. The CPU has no F16
// product, so it is emulated: the operands are widened to F32 in pooled
// scratch and the F32 product runs on them. The result is that of F16
// inputs with F32 accumulation; it is slower than F32.
func (c *CPU) matmulF16(p backend.MatMul, a, b, cc, bias backend.Ref) {
	s := f16OperandPool.get()
	s.a.dt, s.b.dt = backend.F32, backend.F32
	s.a.F32 = widenF16(s.a.F32, u16(a), operandLen(p.Batch, p.StrideA, p.M*p.K))
	s.b.F32 = widenF16(s.b.F32, u16(b), operandLen(p.Batch, p.StrideB, p.K*p.N))
	c.MatMul(p, backend.Ref{S: &s.a}, backend.Ref{S: &s.b}, cc, bias)
	f16OperandPool.put(s)
}

// operandLen is the elements a product operand of size elements per batch
// item spans with the given batch stride.
func operandLen(batch, stride, size int) int {
	if batch <= 1 {
		return size
	}
	return (batch-1)*stride + size
}

// widenF16 converts the first n F16 values of src into dst, grown to n.
func widenF16(dst []float32, src []uint16, n int) []float32 {
	dst = grow(dst, n)
	for i, h := range src[:n] {
		dst[i] = backend.F16ToF32(h)
	}
	return dst
}

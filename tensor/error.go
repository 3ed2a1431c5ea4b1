package tensor

import (
	"fmt"
	"strings"

	"github.com/fleetml/fleet/backend"
)

// Error is a programming error inside a tensor op: a shape, dtype or
// device mismatch. Ops panic with it; Catch turns it into an error. Code
// that must leave a step with an error it did not make (a failed read, a
// peer that vanished) panics with Err set and Op empty: the error then
// reads as Err does, and errors.Is and errors.As see through it.
type Error struct {
	Op       string
	Msg      string
	Operands []*Tensor
	Err      error
}

// Unwrap returns the error the panic carried, if any.
func (e *Error) Unwrap() error { return e.Err }

func (e *Error) Error() string {
	if e.Op == "" && e.Msg == "" && e.Err != nil {
		return e.Err.Error()
	}
	var b strings.Builder
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Err != nil {
		if e.Msg != "" {
			b.WriteString(": ")
		}
		b.WriteString(e.Err.Error())
	}
	if len(e.Operands) > 0 {
		b.WriteString(" (operands:")
		for _, t := range e.Operands {
			fmt.Fprintf(&b, " %v", t)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Catch runs fn and returns a tensor *Error or a *backend.DeviceError (out
// of memory, a failed launch) it panicked with as an error. Other panics
// propagate.
func Catch(fn func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if te, ok := r.(*Error); ok {
				err = te
				return
			}
			if de, ok := r.(*backend.DeviceError); ok {
				err = de
				return
			}
			panic(r)
		}
	}()
	fn()
	return nil
}

// check panics unless all operands are on one device.
func check(op string, ts ...*Tensor) {
	for _, t := range ts[1:] {
		if t.dev != ts[0].dev {
			panic(&Error{Op: op, Msg: fmt.Sprintf("tensors on %v and %v", ts[0].dev, t.dev), Operands: operands(ts)})
		}
	}
}

// operands copies an op's operand list for an Error, so the variadic
// slices of the checks stay on the caller's stack.
func operands(ts []*Tensor) []*Tensor { return append([]*Tensor(nil), ts...) }

func sameShape(op string, a, b *Tensor) {
	if !a.shape.Equal(b.shape) {
		panic(&Error{Op: op, Msg: fmt.Sprintf("shapes %v and %v differ", a.shape, b.shape), Operands: []*Tensor{a, b}})
	}
}

func wantDType(op string, dt DType, ts ...*Tensor) {
	for _, t := range ts {
		if t.dtype != dt {
			panic(&Error{Op: op, Msg: fmt.Sprintf("want %v, got %v", dt, t.dtype), Operands: operands(ts)})
		}
	}
}

// wantFloat checks that ts are activations of one float dtype: all F32,
// or all BF16 (autocast's bf16 activations).
func wantFloat(op string, ts ...*Tensor) {
	for _, t := range ts {
		if t.dtype != F32 && t.dtype != BF16 {
			panic(&Error{Op: op, Msg: fmt.Sprintf("want f32 or bf16, got %v", t.dtype), Operands: operands(ts)})
		}
		if t.dtype != ts[0].dtype {
			panic(&Error{Op: op, Msg: fmt.Sprintf("want one dtype, got %v and %v", ts[0].dtype, t.dtype), Operands: operands(ts)})
		}
	}
}

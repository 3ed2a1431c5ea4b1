package kernels

import (
	"fmt"
	"math"
)

// Args is one launch's arguments, in the kernel's parameter order: buffers
// of type B (a device pointer; an emulator buffer in tests), whose zero
// value stands for an optional one left out (a null pointer), and scalars
// of C's int, unsigned int, long long, float and double. It is a value
// with room for MaxArgs arguments, built on the caller's stack and passed
// by value, so that a launch boxes nothing and allocates nothing.
type Args[B comparable] struct {
	list [MaxArgs]Arg[B]
	n    int
}

// MaxArgs is the most arguments a launch takes.
const MaxArgs = 24

// ArgKind says how an argument is passed: as a buffer or as which scalar.
type ArgKind uint8

// The argument kinds.
const (
	ArgBuf    ArgKind = iota
	ArgInt            // C int, from int32
	ArgUint           // C unsigned int, from uint32
	ArgLong           // C long long, from int64
	ArgFloat          // C float, from float32
	ArgDouble         // C double, from float64
)

// Arg is one argument: Buf for a buffer, else the scalar's bits (Int,
// Float and the others read them).
type Arg[B comparable] struct {
	Buf  B
	Bits uint64
	Kind ArgKind
}

// Int is an ArgInt's value; Uint, Long, Float and Double read the others.
func (a Arg[B]) Int() int32        { return int32(a.Bits) }
func (a Arg[B]) Uint() uint32      { return uint32(a.Bits) }
func (a Arg[B]) Long() int64       { return int64(a.Bits) }
func (a Arg[B]) Float() float32    { return math.Float32frombits(uint32(a.Bits)) }
func (a Arg[B]) Double() float64   { return math.Float64frombits(a.Bits) }
func (a *Args[B]) add(x Arg[B])    { a.list[a.n] = x; a.n++ }
func (a *Args[B]) Len() int        { return a.n }
func (a *Args[B]) At(i int) Arg[B] { return a.list[i] }

// Buf appends buffers.
func (a *Args[B]) Buf(bufs ...B) *Args[B] {
	for _, b := range bufs {
		a.add(Arg[B]{Buf: b, Kind: ArgBuf})
	}
	return a
}

// Int appends C ints.
func (a *Args[B]) Int(vs ...int32) *Args[B] {
	for _, v := range vs {
		a.add(Arg[B]{Bits: uint64(uint32(v)), Kind: ArgInt})
	}
	return a
}

// Uint appends C unsigned ints.
func (a *Args[B]) Uint(vs ...uint32) *Args[B] {
	for _, v := range vs {
		a.add(Arg[B]{Bits: uint64(v), Kind: ArgUint})
	}
	return a
}

// Long appends a C long long.
func (a *Args[B]) Long(v int64) *Args[B] { a.add(Arg[B]{Bits: uint64(v), Kind: ArgLong}); return a }

// Float appends C floats.
func (a *Args[B]) Float(vs ...float32) *Args[B] {
	for _, v := range vs {
		a.add(Arg[B]{Bits: uint64(math.Float32bits(v)), Kind: ArgFloat})
	}
	return a
}

// Double appends a C double.
func (a *Args[B]) Double(v float64) *Args[B] {
	a.add(Arg[B]{Bits: math.Float64bits(v), Kind: ArgDouble})
	return a
}

// Values are the arguments as the emulator's launch takes them: a buffer
// as itself (nil where it is B's zero value), scalars as int32, uint32,
// int64, float32 or float64. For tests; it allocates.
func (a *Args[B]) Values() []any {
	var zero B
	out := make([]any, a.n)
	for i, x := range a.list[:a.n] {
		switch x.Kind {
		case ArgBuf:
			if x.Buf != zero {
				out[i] = x.Buf
			}
		case ArgInt:
			out[i] = x.Int()
		case ArgUint:
			out[i] = x.Uint()
		case ArgLong:
			out[i] = x.Long()
		case ArgFloat:
			out[i] = x.Float()
		case ArgDouble:
			out[i] = x.Double()
		default:
			panic(fmt.Sprintf("kernels: argument %d of kind %d", i, x.Kind))
		}
	}
	return out
}

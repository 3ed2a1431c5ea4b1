package libs

import (
	"sync"

	"github.com/ebitengine/purego"
)

// Call calls f with args: integers, or pointers converted to uintptr in the
// call expression itself (uintptr(unsafe.Pointer(&x))), so that Go keeps what
// they point to alive, and in place, until Call returns. It returns the C
// function's integer result, or f.Err() if the library lacks f. Float
// arguments cannot be passed by value this way; none of the bound functions
// take one.
//
// Call allocates once (its argument list moves to the heap). Hot paths use
// Fast.
//
//go:uintptrescapes
func (f Func) Call(args ...uintptr) (uintptr, error) {
	if f.Go != nil {
		return f.Go(args), nil
	}
	if f.Addr == 0 {
		return 0, f.Err()
	}
	r, _, _ := purego.SyscallN(f.Addr, args...)
	return r, nil
}

// argBufs holds argument lists for Fast, so that its variadic arguments stay
// on the caller's stack.
var argBufs = sync.Pool{New: func() any { return new([32]uintptr) }}

// Fast is Call without allocation, for hot calls (kernel launches, async
// copies, event records). Its arguments must be plain values or addresses
// that do not move and that the caller keeps alive until Fast returns: C or
// device memory, or Go heap objects the caller still references (use
// runtime.KeepAlive after the call). Never pass the address of a local
// variable here; use Call for that.
func (f Func) Fast(args ...uintptr) (uintptr, error) {
	if f.Addr == 0 && f.Go == nil {
		return 0, f.Err()
	}
	b := argBufs.Get().(*[32]uintptr)
	n := copy(b[:], args)
	if f.Go != nil {
		r := f.Go(b[:n])
		argBufs.Put(b)
		return r, nil
	}
	r, _, _ := purego.SyscallN(f.Addr, b[:n]...)
	argBufs.Put(b)
	return r, nil
}

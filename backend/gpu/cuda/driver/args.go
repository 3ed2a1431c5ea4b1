package driver

import (
	"math"
	"unsafe"
)

// MaxArgs is the most parameters a kernel launched through Args may take.
const MaxArgs = 32

// Args is a kernel's parameter list, built in order with the typed adders:
//
//	a.Reset().Ptr(dst).Ptr(src).Float32(alpha).Int64(n)
//	d.LaunchKernel(f, grid, block, 0, stream, a)
//
// Each parameter sits in its own 8-byte slot; the driver reads as many bytes
// as the kernel's parameter type has. Keep an Args per stream or worker and
// reuse it: it must not be shared by goroutines, and a new Args for each
// launch costs an allocation.
type Args struct {
	vals [MaxArgs]uint64
	ptrs [MaxArgs]unsafe.Pointer // ptrs[i] = &vals[i]: cuLaunchKernel's void** kernelParams
	n    int
}

// NewArgs returns an empty Args.
func NewArgs() *Args { return new(Args) }

// Reset empties a for the next launch.
func (a *Args) Reset() *Args {
	a.n = 0
	return a
}

// Len is the number of parameters added.
func (a *Args) Len() int { return a.n }

func (a *Args) add(v uint64) *Args {
	if a.n == MaxArgs {
		panic("driver: more than 32 kernel parameters")
	}
	a.vals[a.n] = v
	a.ptrs[a.n] = unsafe.Pointer(&a.vals[a.n])
	a.n++
	return a
}

// Ptr adds a device pointer parameter (T*).
func (a *Args) Ptr(p DevicePtr) *Args { return a.add(uint64(p)) }

// Int adds an int parameter.
func (a *Args) Int(v int32) *Args { return a.add(uint64(uint32(v))) }

// Uint adds an unsigned int parameter.
func (a *Args) Uint(v uint32) *Args { return a.add(uint64(v)) }

// Int64 adds a long long parameter.
func (a *Args) Int64(v int64) *Args { return a.add(uint64(v)) }

// Float64 adds a double parameter.
func (a *Args) Float64(v float64) *Args { return a.add(math.Float64bits(v)) }

// Float32 adds a float parameter.
func (a *Args) Float32(v float32) *Args { return a.add(uint64(math.Float32bits(v))) }

package backend

import (
	"errors"
	"fmt"
)

// ErrOutOfMemory is what a device error wraps when an allocation cannot be
// satisfied even after the pool returned its cached blocks: fleet's
// torch.cuda.OutOfMemoryError. Test with errors.Is.
var ErrOutOfMemory = errors.New("out of memory")

// DeviceError is a failure of the device itself (out of memory, a failed
// launch, a lost device) rather than a programming error. Backends panic
// with it, since kernels return nothing; tensor.Catch turns it into an
// ordinary error.
type DeviceError struct {
	Dev Device
	Op  string
	Err error
}

func (e *DeviceError) Error() string { return fmt.Sprintf("%v: %s: %v", e.Dev, e.Op, e.Err) }

// Unwrap gives the cause, e.g. ErrOutOfMemory.
func (e *DeviceError) Unwrap() error { return e.Err }

package tensor

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
)

// A Program is the mutable state of the tensor program that runs on a set
// of devices: the stack of scopes and the tensor headers they recycle,
// gradient recording, the autocast policy, the Backward hook and the
// working memory of graph walks, Dropout's host buffer and Recompute's
// records. Every device is driven by exactly one Program: the one
// NewProgram made for it, or else the default program, which drives every
// device no other program has claimed and which the package-level
// functions (Step, Persist, NoGrad, Autocast, ...) act on.
//
// Ops find their program from their tensors' device (ProgramOf): an op's
// output is tracked by the innermost scope of its device's program, and it
// records the tape under that program's gradient mode and autocast policy;
// Backward runs in the program of the tensor it starts from.
//
// One goroutine at a time drives a program. Two programs may run at the
// same time on different goroutines as long as each touches only tensors
// on its own devices, with one exception: a program may read a tensor of
// another program that the other no longer changes (a detached stage
// output handed over a channel, say) and copy it to its own device with To
// (or read it with Float32s, Int32s or ReadFloat32s; not Item, which
// writes a buffer inside the tensor). The tensor must stay alive, so its
// owner's step must not end, until the copy is made. A Backward must not
// reach tensors on devices of another program; it panics with an *Error
// where it finds one.
type Program struct {
	name string
	devs []Device // the devices claimed; nil for the default program

	// Scopes (scope.go).
	scopes      []*Scope    // the stack: step scopes and detached ones inside In
	spareScopes []*Scope    // step scopes, reused
	persistent  int         // >0 inside Persist: allocations are not scoped
	freeHeaders []*Tensor   // reusable
	heldHeaders [][]*Tensor // [d]: freed at the last end of a step scope d deep, not yet reusable

	gradEnabled bool
	// autocast is the storage dtype Linear, LinearT and MLP compute their
	// products in; F32 means as given. See Autocast.
	autocast DType
	// lossGrad is the gradient the next loss will be differentiated with
	// (SetLossGrad); nil: not announced.
	lossGrad *Tensor
	// gradReadyHook is called by Backward for each leaf whose gradient is
	// complete; see SetGradReadyHook.
	gradReadyHook func(leaf *Tensor)

	// Graph walks (autograd.go).
	walks     []*walk
	walkDepth int
	// sinks is set during an ordinary Backward walk (not a Recompute's
	// recomputation): backward functions may then add a leaf's gradient
	// into its Grad themselves (gradSink).
	sinks bool

	recompPool []*recomp // Recompute's records, reused
}

// defaultProgram drives every device that no other program has claimed.
var defaultProgram = &Program{name: "the default program", gradEnabled: true, autocast: F32}

// DefaultProgram returns the program that drives every device no other
// program has claimed, the one the package-level functions act on.
func DefaultProgram() *Program { return defaultProgram }

// A binding gives a device to a program other than the default one.
type binding struct {
	dev Device
	p   *Program
}

// The bindings change only in NewProgram and Close, which replace the
// whole slice, so every op reads them with one atomic load and no lock;
// nil while the default program drives every device, which is then the
// only cost of a lookup.
var (
	bindMu   sync.Mutex // serialises NewProgram and Close
	bindings atomic.Pointer[[]binding]
	programs int // programs made, for their names; under bindMu
)

// ProgramOf returns the program that drives dev.
func ProgramOf(dev Device) *Program {
	if bs := bindings.Load(); bs != nil {
		return lookup(*bs, dev)
	}
	return defaultProgram
}

// lookup finds dev's program in bs by a linear scan: a process drives a
// handful of devices.
func lookup(bs []binding, dev Device) *Program {
	for i := range bs {
		if bs[i].dev.Index == dev.Index && bs[i].dev.Kind == dev.Kind {
			return bs[i].p
		}
	}
	return defaultProgram
}

// NewProgram returns a program that drives devs, taking them from the
// default program. It fails when another program made by NewProgram holds
// one of them, or a device does not open. Claim a device before making
// tensors on it: those the default program's steps track are still freed
// when those steps end, but new ones go to the new program.
func NewProgram(devs ...Device) (*Program, error) {
	if len(devs) == 0 {
		return nil, errors.New("new program: no devices")
	}
	for i, d := range devs {
		for _, e := range devs[:i] {
			if e == d {
				return nil, fmt.Errorf("new program: %v is listed twice", d)
			}
		}
		if _, err := backend.Get(d); err != nil {
			return nil, fmt.Errorf("new program: %w", err)
		}
	}
	bindMu.Lock()
	defer bindMu.Unlock()
	var old []binding
	if bs := bindings.Load(); bs != nil {
		old = *bs
	}
	for _, d := range devs {
		if p := lookup(old, d); p != defaultProgram {
			return nil, fmt.Errorf("new program: %v is driven by %v", d, p)
		}
	}
	programs++
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.String()
	}
	p := &Program{
		name:        fmt.Sprintf("program %d (%s)", programs, strings.Join(names, ", ")),
		devs:        append([]Device(nil), devs...),
		gradEnabled: true,
		autocast:    F32,
	}
	bs := append(append(make([]binding, 0, len(old)+len(devs)), old...), make([]binding, len(devs))...)
	for i, d := range devs {
		bs[len(old)+i] = binding{dev: d, p: p}
	}
	bindings.Store(&bs)
	return p, nil
}

// Close gives p's devices back to the default program; p drives nothing
// afterwards and should not be used. It fails for the default program, and
// inside one of p's steps or Ins, whose later tensors would go to the
// default program. Closing twice does nothing. The tensors of p's detached
// scopes are freed by their Free as before.
func (p *Program) Close() error {
	if p == defaultProgram {
		return errors.New("close: the default program cannot be closed")
	}
	if len(p.scopes) > 0 {
		return fmt.Errorf("close: %v is inside a step or an In", p)
	}
	bindMu.Lock()
	defer bindMu.Unlock()
	bs := bindings.Load()
	if bs == nil {
		return nil
	}
	var kept []binding
	for _, b := range *bs {
		if b.p != p {
			kept = append(kept, b)
		}
	}
	if len(kept) == 0 {
		bindings.Store(nil)
	} else {
		bindings.Store(&kept)
	}
	return nil
}

// Devices returns the devices p claimed: nil for the default program,
// which drives whatever the others have not claimed.
func (p *Program) Devices() []Device { return append([]Device(nil), p.devs...) }

func (p *Program) String() string { return p.name }

package emu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// Schedule is the order in which the threads of a block run.
type Schedule int

const (
	// Parallel runs a block's threads at once as OS threads; the OS picks
	// the interleaving, as the hardware does.
	Parallel Schedule = iota
	// Forward runs one thread at a time: the lowest-numbered runnable
	// thread runs until it reaches a barrier or warp operation, or
	// returns. A thread that reads, without a barrier in between, what a
	// higher-numbered thread writes reads stale (or poisoned) data, every
	// time.
	Forward
	// Reverse is Forward with the highest-numbered thread first: it
	// exposes reads of what lower-numbered threads write.
	Reverse
)

// Schedules returns every schedule; a kernel test runs under each.
func Schedules() []Schedule { return []Schedule{Parallel, Forward, Reverse} }

func (s Schedule) String() string {
	switch s {
	case Parallel:
		return "parallel"
	case Forward:
		return "forward"
	case Reverse:
		return "reverse"
	}
	return fmt.Sprintf("Schedule(%d)", int(s))
}

// DefaultTimeout bounds one launch unless WithTimeout says otherwise. A
// launch that runs over it fails, and its module refuses further launches
// (its threads may still be running).
const DefaultTimeout = time.Minute

// defaultMaxShared is the dynamic shared memory a launch may ask for before
// the kernel opts in to more (cuFuncSetAttribute on a GPU).
const defaultMaxShared = 48 << 10

// Module is a kernel file built for the CPU. Its methods may be called from
// several goroutines; launches of one module run one at a time.
type Module struct {
	lib     *library
	sched   Schedule
	timeout time.Duration
}

// library is one loaded shared object, shared by the Modules made from it
// with WithSchedule and WithTimeout.
type library struct {
	name    string
	kernels map[string]*kernel
	order   []string

	mu    sync.Mutex // held for a launch; guards arena and maxShared
	arena []byte     // C-visible: the launch description, messages, arguments
}

type kernel struct {
	sig       kernelSig
	fn        uintptr
	maxShared int
}

// Arena layout (bytes).
const (
	arenaDesc   = 0
	arenaErr    = 64
	arenaErrCap = 2048
	arenaArgv   = arenaErr + arenaErrCap
	maxParams   = 128
	arenaSlots  = arenaArgv + 8*maxParams
	arenaSize   = arenaSlots + 8*maxParams
)

// launchDesc mirrors fleet_emu::Launch in prelude.h.
type launchDesc struct {
	Grid, Block    [3]int32
	SharedBytes    int64
	MaxSharedBytes int64
	Schedule       int32
	TimeoutMs      int32
	Err            uintptr
	ErrCap         int64
}

// Name is the kernel file's name.
func (m *Module) Name() string { return m.lib.name }

// Kernels lists the module's kernels in the order the source declares them.
func (m *Module) Kernels() []string { return append([]string(nil), m.lib.order...) }

// Params returns the parameters of kernel, or nil if there is no such kernel.
func (m *Module) Params(kernel string) []Param {
	k := m.lib.kernels[kernel]
	if k == nil {
		return nil
	}
	return append([]Param(nil), k.sig.Params...)
}

// Schedule is the schedule the module's launches run under.
func (m *Module) Schedule() Schedule { return m.sched }

// WithSchedule returns the module with its launches run under s.
func (m *Module) WithSchedule(s Schedule) *Module {
	c := *m
	c.sched = s
	return &c
}

// WithTimeout returns the module with each launch bounded by d (0: no
// bound).
func (m *Module) WithTimeout(d time.Duration) *Module {
	c := *m
	c.timeout = d
	return &c
}

// SetMaxDynamicShared lets kernel take up to bytes of dynamic shared memory,
// as cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
// does on a GPU. Without it a launch may ask for at most 48 KiB.
func (m *Module) SetMaxDynamicShared(kernel string, bytes int) error {
	k := m.lib.kernels[kernel]
	if k == nil {
		return m.noKernel(kernel)
	}
	m.lib.mu.Lock()
	defer m.lib.mu.Unlock()
	k.maxShared = bytes
	return nil
}

func (m *Module) noKernel(name string) error {
	return fmt.Errorf("emu: %s has no kernel %q (it has %s)", m.lib.name, name, strings.Join(m.lib.order, ", "))
}

// Dim is a launch dimension: Dim(x) is (x,1,1), Dim(x, y) is (x,y,1).
func Dim(x int, yz ...int) [3]int {
	d := [3]int{x, 1, 1}
	copy(d[1:], yz)
	return d
}

// Launch runs kernel over grid blocks of block threads with sharedBytes of
// dynamic shared memory, as cuLaunchKernel would, and returns when it is
// done. args match the kernel's parameters in order: a *Buffer (or nil) for
// a pointer, whose element type must be the pointee's (any for void*), or a
// View into one (a view of a U8 buffer fits any pointer, at an offset
// aligned for the pointee);
// int32, uint32, int64, uint64, float32 or float64 for int, unsigned int,
// long long, unsigned long long, float or double; a Go int fits any integer
// parameter it is in range of.
//
// The error says what failed: a mismatched argument (naming the parameter),
// a bad launch shape, a deadlock, or a *BoundsError for each buffer whose
// guard the kernel changed.
func (m *Module) Launch(kernel string, grid, block [3]int, sharedBytes int, args ...any) error {
	k := m.lib.kernels[kernel]
	if k == nil {
		return m.noKernel(kernel)
	}
	if len(args) != len(k.sig.Params) {
		return fmt.Errorf("emu: %s takes %d arguments (%s), got %d", kernel, len(k.sig.Params), paramList(k.sig.Params), len(args))
	}
	for i := range 3 {
		if grid[i] > math.MaxInt32 || block[i] > math.MaxInt32 {
			return fmt.Errorf("emu: %s: grid %v or block %v too large", kernel, grid, block)
		}
	}
	if sharedBytes < 0 {
		return fmt.Errorf("emu: %s: negative shared memory size %d", kernel, sharedBytes)
	}

	l := m.lib
	l.mu.Lock()
	defer l.mu.Unlock()

	a := l.arena
	var bufs []*Buffer
	var bufParams []string
	for i, p := range k.sig.Params {
		slot, b, err := encodeArg(p, args[i])
		if err != nil {
			return fmt.Errorf("emu: %s: parameter %d (%s): %v", kernel, i+1, p, err)
		}
		if b != nil {
			bufs = append(bufs, b)
			bufParams = append(bufParams, p.Name)
		}
		binary.LittleEndian.PutUint64(a[arenaSlots+8*i:], slot)
		binary.LittleEndian.PutUint64(a[arenaArgv+8*i:], uint64(addrOf(a, arenaSlots+8*i)))
	}
	maxShared := defaultMaxShared
	if k.maxShared > 0 {
		maxShared = k.maxShared
	}
	d := (*launchDesc)(unsafe.Pointer(&a[arenaDesc]))
	*d = launchDesc{
		SharedBytes:    int64(sharedBytes),
		MaxSharedBytes: int64(maxShared),
		Schedule:       int32(m.sched),
		TimeoutMs:      int32(min(m.timeout.Milliseconds(), math.MaxInt32)),
		Err:            addrOf(a, arenaErr),
		ErrCap:         arenaErrCap,
	}
	if m.timeout > 0 && d.TimeoutMs == 0 {
		d.TimeoutMs = 1
	}
	for i := range 3 {
		d.Grid[i], d.Block[i] = int32(grid[i]), int32(block[i])
	}
	clear(a[arenaErr : arenaErr+arenaErrCap])

	rc := callLaunch(k.fn, addrOf(a, arenaDesc), addrOf(a, arenaArgv))
	runtime.KeepAlive(args)

	var errs []error
	if rc != 0 {
		msg := a[arenaErr : arenaErr+arenaErrCap]
		if i := bytes.IndexByte(msg, 0); i >= 0 {
			msg = msg[:i]
		}
		errs = append(errs, fmt.Errorf("emu: %s", msg))
	}
	seen := map[*Buffer]bool{}
	for i, b := range bufs {
		if seen[b] {
			continue
		}
		seen[b] = true
		if off, changed := b.checkGuards(); changed {
			b.restoreGuards()
			errs = append(errs, &BoundsError{Kernel: kernel, Param: bufParams[i], Buffer: b.String(), Len: b.n, Offset: off, ElemSize: b.dtype.Size()})
		}
	}
	return errors.Join(errs...)
}

func addrOf(a []byte, off int) uintptr { return uintptr(unsafe.Pointer(&a[off])) }

func paramList(ps []Param) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// encodeArg returns the 8-byte argument slot for v passed as p, and the
// buffer it refers to if any.
func encodeArg(p Param, v any) (uint64, *Buffer, error) {
	if p.Elem != "" {
		switch b := v.(type) {
		case nil:
			return 0, nil, nil
		case *Buffer:
			if b == nil {
				return 0, nil, nil
			}
			if b.freed {
				return 0, nil, fmt.Errorf("buffer %v was freed", b)
			}
			if p.Elem != "void" && p.Elem != b.dtype.CType() {
				return 0, nil, fmt.Errorf("got a %v buffer (%s), want %s", b, b.dtype.CType()+"*", p.Type)
			}
			return uint64(b.addr()), b, nil
		case View:
			if b.buf == nil || b.buf.freed {
				return 0, nil, fmt.Errorf("view of a freed or nil buffer")
			}
			if b.buf.dtype != U8 && p.Elem != "void" && p.Elem != b.buf.dtype.CType() {
				return 0, nil, fmt.Errorf("got a view of a %v buffer (%s), want %s", b.buf, b.buf.dtype.CType()+"*", p.Type)
			}
			if size := elemSize[p.Elem]; size > 1 && b.off%size != 0 {
				// A GPU faults on a misaligned pointer ("misaligned address").
				return 0, nil, fmt.Errorf("view at byte %d of %v is not aligned to %d bytes for %s", b.off, b.buf, size, p.Type)
			}
			return uint64(b.buf.addr()) + uint64(b.off), b.buf, nil
		default:
			return 0, nil, fmt.Errorf("got %T, want a *emu.Buffer or an emu.View", v)
		}
	}
	bad := func() (uint64, *Buffer, error) {
		return 0, nil, fmt.Errorf("got %T(%v), want %s", v, v, goScalar[p.Type])
	}
	if n, ok := v.(int); ok {
		lo, hi := intRange(p.Type)
		if hi == 0 {
			return bad()
		}
		if int64(n) < lo || (n > 0 && uint64(n) > hi) {
			return 0, nil, fmt.Errorf("%d does not fit %s", n, p.Type)
		}
		return uint64(n), nil, nil
	}
	switch p.Type {
	case "int":
		if x, ok := v.(int32); ok {
			return uint64(uint32(x)), nil, nil
		}
	case "unsigned int":
		if x, ok := v.(uint32); ok {
			return uint64(x), nil, nil
		}
	case "long long":
		if x, ok := v.(int64); ok {
			return uint64(x), nil, nil
		}
	case "unsigned long long":
		if x, ok := v.(uint64); ok {
			return x, nil, nil
		}
	case "float":
		if x, ok := v.(float32); ok {
			return uint64(math.Float32bits(x)), nil, nil
		}
	case "double":
		if x, ok := v.(float64); ok {
			return math.Float64bits(x), nil, nil
		}
	}
	return bad()
}

// elemSize is the size of each pointee type a kernel may take (void: 0).
var elemSize = map[string]int{
	"float": 4, "unsigned short": 2, "int": 4, "unsigned int": 4, "long long": 8, "unsigned char": 1,
}

var goScalar = map[string]string{
	"int": "int32", "unsigned int": "uint32", "long long": "int64",
	"unsigned long long": "uint64", "float": "float32", "double": "float64",
}

func intRange(ctype string) (lo int64, hi uint64) {
	switch ctype {
	case "int":
		return math.MinInt32, math.MaxInt32
	case "unsigned int":
		return 0, math.MaxUint32
	case "long long":
		return math.MinInt64, math.MaxInt64
	case "unsigned long long":
		return 0, math.MaxUint64
	}
	return 0, 0
}

// BoundsError reports a kernel that wrote outside a buffer: it changed the
// canary in a guard region.
type BoundsError struct {
	Kernel string
	Param  string // the parameter the buffer was passed as
	Buffer string // its type and length, e.g. "F32[1000]"
	Len    int    // its length in elements
	// Offset is the changed byte nearest the data, in bytes from the
	// start of the data: negative before it, Len*ElemSize or more after.
	Offset   int
	ElemSize int
}

// Side is "before" or "after": which guard the kernel wrote.
func (e *BoundsError) Side() string {
	if e.Offset < 0 {
		return "before"
	}
	return "after"
}

// Elem is the element index of Offset (negative before the start).
func (e *BoundsError) Elem() int {
	if e.Offset < 0 {
		return -((-e.Offset + e.ElemSize - 1) / e.ElemSize)
	}
	return e.Offset / e.ElemSize
}

func (e *BoundsError) Error() string {
	where := "past the end"
	if e.Offset < 0 {
		where = "before the start"
	}
	return fmt.Sprintf("emu: %s wrote out of bounds of %s (%s) at element %d (byte %d), %s",
		e.Kernel, e.Param, e.Buffer, e.Elem(), e.Offset, where)
}

package tensor

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
	_ "github.com/fleetml/fleet/backend/cpu" // the CPU is always available
	"github.com/fleetml/fleet/internal/rng"
)

// DType, Device and RNG are shared with the lower layers.
type (
	DType  = backend.DType
	Device = backend.Device
	RNG    = rng.RNG
)

// Storage dtypes.
const (
	F32  = backend.F32
	BF16 = backend.BF16
	F16  = backend.F16
	I32  = backend.I32
	I64  = backend.I64
)

// CPU is the host device.
var CPU = backend.CPU

// NewRNG returns a seeded generator for Randn and dropout masks.
func NewRNG(seed uint64) *RNG { return rng.New(seed) }

// ParseDevice parses a device name such as "cpu" or "cuda:0".
func ParseDevice(s string) (Device, error) { return backend.ParseDevice(s) }

// Shape is a tensor's extent along each axis.
type Shape []int

// Numel is the number of elements.
func (s Shape) Numel() int {
	n := 1
	for _, d := range s {
		n *= d
	}
	return n
}

// Equal reports whether two shapes are the same.
func (s Shape) Equal(o Shape) bool {
	if len(s) != len(o) {
		return false
	}
	for i := range s {
		if s[i] != o[i] {
			return false
		}
	}
	return true
}

func (s Shape) String() string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// Tensor is an n-dimensional array on a device. Tensors are always
// contiguous and row-major; views (Reshape, Rows) share storage.
type Tensor struct {
	shape Shape
	dims  [4]int // storage for shape up to rank 4
	dtype DType
	dev   Device
	be    backend.Backend
	st    backend.Storage
	off   int
	owns  bool // frees st when its step scope ends
	freed bool

	requiresGrad bool
	// Grad accumulates the gradient of a leaf tensor across Backward calls.
	Grad *Tensor
	node *node // &nd once an op is recorded

	nd      node       // the op that made this tensor, when recorded
	pending *Tensor    // gradient gathered so far, during Backward
	visited uint64     // Backward's visit mark
	scope   *Scope     // the scope tracking it; nil when none does
	item    [1]float32 // Item's host buffer: a local one would escape
	half    *Tensor    // a BF16 copy of a parameter the products read (SetHalf)
}

// SetHalf gives parameter t a BF16 copy h of the same shape and device
// (nil removes it), which the products of bf16 activations read instead
// of casting t on every forward pass (see Linear). Whoever sets it keeps
// it equal to t rounded to BF16 whenever t changes: the optimizer writes
// it in the same pass as the update (backend.AdamW.Half), and refreshes
// it with RefreshHalf after anything else writes t.
func (t *Tensor) SetHalf(h *Tensor) {
	if h != nil {
		check("set_half", t, h)
		sameShape("set_half", t, h)
		wantDType("set_half", BF16, h)
		wantDType("set_half", F32, t)
	}
	t.half = h
}

// Half is t's BF16 copy (SetHalf), or nil.
func (t *Tensor) Half() *Tensor { return t.half }

// RefreshHalf writes t rounded to BF16 into its half copy, outside
// autograd; it does nothing where t has none.
func (t *Tensor) RefreshHalf() {
	if h := t.half; h != nil {
		t.be.Cast(h.ref(), t.ref(), t.Numel())
	}
}

// Shape returns the tensor's shape. Do not modify it.
func (t *Tensor) Shape() Shape { return t.shape }

// DType returns the storage dtype.
func (t *Tensor) DType() DType { return t.dtype }

// Device returns where the tensor lives.
func (t *Tensor) Device() Device { return t.dev }

// Numel is the number of elements.
func (t *Tensor) Numel() int { return t.shape.Numel() }

// Dim returns the size of axis i; negative i counts from the end.
func (t *Tensor) Dim(i int) int {
	if i < 0 {
		i += len(t.shape)
	}
	return t.shape[i]
}

func (t *Tensor) String() string {
	return fmt.Sprintf("tensor(%v %v %v)", t.shape, t.dtype, t.dev)
}

// ref is the tensor's storage position, checked for use after free.
func (t *Tensor) ref() backend.Ref {
	if t.freed {
		panic(&Error{Op: "use", Msg: "tensor was freed when its step ended", Operands: []*Tensor{t}})
	}
	return backend.Ref{S: t.st, Off: t.off}
}

// RequiresGrad reports whether gradients flow to this tensor.
func (t *Tensor) RequiresGrad() bool { return t.requiresGrad }

// SetRequiresGrad marks a leaf tensor as one whose gradient Backward
// accumulates into Grad. It returns t.
func (t *Tensor) SetRequiresGrad(v bool) *Tensor {
	if t.node != nil {
		panic(&Error{Op: "set_requires_grad", Msg: "not a leaf tensor", Operands: []*Tensor{t}})
	}
	t.requiresGrad = v
	return t
}

// getBackend returns dev's backend, opening it on first use, and panics
// with the reason where it does not open.
func getBackend(op string, dev Device) backend.Backend {
	if b := openedBackend(dev); b != nil {
		return b
	}
	b, err := backend.Get(dev)
	if err != nil {
		panic(&Error{Op: op, Msg: err.Error()})
	}
	backendsMu.Lock()
	defer backendsMu.Unlock()
	if openedBackend(dev) == nil { // another goroutine may have added it
		var bs []openBackend
		if old := backends.Load(); old != nil {
			bs = append(bs, *old...)
		}
		bs = append(bs, openBackend{dev, b})
		backends.Store(&bs)
	}
	return b
}

// openedBackend returns dev's backend from the list of those used, or nil.
func openedBackend(dev Device) backend.Backend {
	if bs := backends.Load(); bs != nil {
		for i := range *bs {
			if (*bs)[i].dev.Index == dev.Index && (*bs)[i].dev.Kind == dev.Kind {
				return (*bs)[i].be
			}
		}
	}
	return nil
}

// The backends ops have used, by device. backend.Get takes a process-wide
// lock, which every op would take, and which programs running at the same
// time on other goroutines would contend for; an opened backend never
// changes, so this copy-on-write list is read with one atomic load.
var (
	backendsMu sync.Mutex // serialises additions
	backends   atomic.Pointer[[]openBackend]
)

type openBackend struct {
	dev Device
	be  backend.Backend
}

// alloc makes an uninitialised tensor owned by the current step scope of
// dev's program.
func alloc(op string, dev Device, dt DType, shape Shape) *Tensor {
	for _, d := range shape {
		if d < 0 {
			panic(&Error{Op: op, Msg: fmt.Sprintf("negative dimension in shape %v", append(Shape(nil), shape...))})
		}
	}
	be := getBackend(op, dev)
	p := ProgramOf(dev)
	t := p.newHeader()
	t.dtype, t.dev, t.be, t.owns = dt, dev, be, true
	t.setShape(shape)
	t.st = be.Alloc(dt, shape.Numel())
	p.track(t)
	return t
}

// view makes a tensor sharing t's storage, owned by the current step scope
// of its device's program.
func (t *Tensor) view(shape Shape, off int) *Tensor {
	p := ProgramOf(t.dev)
	v := p.newHeader()
	v.dtype, v.dev, v.be, v.st, v.off, v.freed = t.dtype, t.dev, t.be, t.st, t.off, t.freed
	v.off = off
	v.setShape(shape)
	p.track(v)
	return v
}

// setShape stores a copy of shape, inside the tensor itself when the rank
// is small, so a tensor costs one heap allocation.
func (t *Tensor) setShape(shape Shape) {
	if len(shape) <= len(t.dims) {
		t.shape = t.dims[:len(shape):len(shape)]
		copy(t.shape, shape)
		return
	}
	t.shape = append(Shape(nil), shape...)
}

// Empty returns an uninitialised tensor.
func Empty(dev Device, dt DType, shape ...int) *Tensor { return alloc("empty", dev, dt, shape) }

// Full returns a float tensor with every element v.
func Full(dev Device, v float32, shape ...int) *Tensor {
	t := alloc("full", dev, F32, shape)
	t.be.Fill(t.ref(), v, t.Numel())
	return t
}

// Zeros returns an F32 tensor of zeros.
func Zeros(dev Device, shape ...int) *Tensor { return Full(dev, 0, shape...) }

// Ones returns an F32 tensor of ones.
func Ones(dev Device, shape ...int) *Tensor { return Full(dev, 1, shape...) }

// ZerosLike returns zeros with t's shape, dtype and device.
func ZerosLike(t *Tensor) *Tensor {
	z := alloc("zeros_like", t.dev, t.dtype, t.shape)
	z.be.Fill(z.ref(), 0, z.Numel())
	return z
}

// Randn returns F32 values drawn from N(0, std²) with r.
func Randn(dev Device, r *RNG, std float32, shape ...int) *Tensor {
	data := make([]float32, Shape(shape).Numel())
	for i := range data {
		data[i] = float32(r.Norm()) * std
	}
	return FromFloat32s(dev, data, shape...)
}

// FromFloat32s copies host data into a new F32 tensor on dev.
func FromFloat32s(dev Device, data []float32, shape ...int) *Tensor {
	if Shape(shape).Numel() != len(data) {
		panic(&Error{Op: "from_float32s", Msg: fmt.Sprintf("%d values for shape %v", len(data), append(Shape(nil), shape...))})
	}
	t := alloc("from_float32s", dev, F32, shape)
	t.be.Upload(t.ref(), backend.AsBytes(data))
	return t
}

// FromInt32s copies host data into a new I32 tensor on dev.
func FromInt32s(dev Device, data []int32, shape ...int) *Tensor {
	if Shape(shape).Numel() != len(data) {
		panic(&Error{Op: "from_int32s", Msg: fmt.Sprintf("%d values for shape %v", len(data), append(Shape(nil), shape...))})
	}
	t := alloc("from_int32s", dev, I32, shape)
	t.be.Upload(t.ref(), backend.AsBytes(data))
	return t
}

// Float32s copies the tensor to a new host slice, widening BF16 and F16.
func (t *Tensor) Float32s() []float32 {
	out := make([]float32, t.Numel())
	switch t.dtype {
	case F32:
		t.download(backend.AsBytes(out))
	case BF16, F16:
		h := make([]uint16, len(out))
		t.download(backend.AsBytes(h))
		for i, v := range h {
			if t.dtype == BF16 {
				out[i] = backend.BF16ToF32(v)
			} else {
				out[i] = backend.F16ToF32(v)
			}
		}
	case I32:
		for i, v := range t.Int32s() {
			out[i] = float32(v)
		}
	default:
		panic(&Error{Op: "float32s", Msg: "unsupported dtype", Operands: []*Tensor{t}})
	}
	return out
}

// Int32s copies an I32 tensor to a new host slice.
func (t *Tensor) Int32s() []int32 {
	if t.dtype != I32 {
		panic(&Error{Op: "int32s", Msg: "want an i32 tensor", Operands: []*Tensor{t}})
	}
	out := make([]int32, t.Numel())
	t.download(backend.AsBytes(out))
	return out
}

// Item returns the value of a one-element tensor: the only thing that
// crosses to the host in a training step.
func (t *Tensor) Item() float32 {
	if t.Numel() != 1 {
		panic(&Error{Op: "item", Msg: "tensor has more than one element", Operands: []*Tensor{t}})
	}
	if t.dtype != F32 {
		return t.Float32s()[0]
	}
	t.download(backend.AsBytes(t.item[:]))
	return t.item[0]
}

// CopyFrom overwrites t's elements with src's (same shape, dtype, device),
// outside autograd.
func (t *Tensor) CopyFrom(src *Tensor) {
	check("copy_from", t, src)
	sameShape("copy_from", t, src)
	t.be.Copy(t.ref(), src.ref(), t.Numel())
}

// SetFloat32s overwrites an F32 tensor's elements from host data.
func (t *Tensor) SetFloat32s(data []float32) {
	if t.dtype != F32 || len(data) != t.Numel() {
		panic(&Error{Op: "set_float32s", Msg: fmt.Sprintf("%d values", len(data)), Operands: []*Tensor{t}})
	}
	t.be.Upload(t.ref(), backend.AsBytes(data))
}

// UploadAsync overwrites t's elements with src, host bytes in t's dtype
// (backend.AsBytes gives them), outside autograd. Where the backend copies
// asynchronously (a GPU, from page-locked memory that PinnedAlloc returns)
// it returns at once and the copy overlaps the work issued next; call the
// Upload's Ready before issuing ops that read t, and its Wait before
// changing src. Other backends copy before returning.
func (t *Tensor) UploadAsync(src []byte) backend.Upload {
	if len(src) != t.Numel()*t.dtype.Size() {
		panic(&Error{Op: "upload_async", Msg: fmt.Sprintf("%d bytes for %d elements", len(src), t.Numel()), Operands: []*Tensor{t}})
	}
	if a, ok := t.be.(backend.AsyncUploader); ok {
		return a.UploadAsync(t.ref(), src)
	}
	t.be.Upload(t.ref(), src)
	return backend.DoneUpload{}
}

// PinnedAlloc returns n bytes of host memory that dev copies from without
// waiting (page-locked on a GPU), and a function that frees it; on other
// devices it is ordinary memory.
func PinnedAlloc(dev Device, n int) ([]byte, func() error, error) {
	if a, ok := getBackend("pinned_alloc", dev).(backend.AsyncUploader); ok {
		b, err := a.PinnedAlloc(n)
		if err != nil {
			return nil, nil, err
		}
		return b, func() error { return a.PinnedFree(b) }, nil
	}
	return make([]byte, n), func() error { return nil }, nil
}

// To returns the tensor on dev: t itself if it is already there, else a
// copy (outside autograd), made in dev's program: the way a program takes
// a tensor another program hands it (see Program). Between devices that
// copy from each other (backend.PeerCopier: GPUs of one machine) the
// copy goes device to device; from host memory it goes straight from it;
// otherwise through the host. Host<->device bytes are counted by the
// backend.
func (t *Tensor) To(dev Device) *Tensor {
	if t.dev == dev {
		return t
	}
	out := alloc("to", dev, t.dtype, t.shape)
	if p, ok := out.be.(backend.PeerCopier); ok && p.CopyFrom(out.ref(), t.be, t.ref(), t.Numel()) {
		return out // device to device (GPUs of one machine)
	}
	if h, ok := t.be.(backend.HostMemory); ok && t.dtype == F32 {
		// A tensor in host memory goes straight from it: one copy (between
		// two CPU devices, pipeline stages, the only one), no staging
		// buffer and no read back from a device.
		out.be.Upload(out.ref(), backend.AsBytes(h.HostFloat32s(t.ref(), t.Numel())))
		return out
	}
	switch t.dtype {
	case F32:
		out.be.Upload(out.ref(), backend.AsBytes(t.Float32s()))
	case I32:
		out.be.Upload(out.ref(), backend.AsBytes(t.Int32s()))
	default:
		h := make([]uint16, t.Numel())
		t.download(backend.AsBytes(h))
		out.be.Upload(out.ref(), backend.AsBytes(h))
	}
	return out
}

// Detach returns a view of t's data that is not part of the graph.
func (t *Tensor) Detach() *Tensor { return t.view(t.shape, t.off) }

// Clone returns a copy of t in new storage (outside autograd).
func (t *Tensor) Clone() *Tensor {
	out := alloc("clone", t.dev, t.dtype, t.shape)
	out.be.Copy(out.ref(), t.ref(), t.Numel())
	return out
}

// Reshape returns a view with a new shape of the same size. One dimension
// may be -1, to be inferred.
func (t *Tensor) Reshape(shape ...int) *Tensor {
	var buf [maxInlineRank]int
	s := Shape(append(buf[:0], shape...))
	infer, known := -1, 1
	for i, d := range s {
		if d == -1 && infer < 0 {
			infer = i
		} else {
			known *= d
		}
	}
	if infer >= 0 && known > 0 {
		s[infer] = t.Numel() / known
	}
	negative := false
	for _, d := range s {
		negative = negative || d < 0
	}
	if negative || s.Numel() != t.Numel() {
		panic(&Error{Op: "reshape", Msg: fmt.Sprintf("cannot reshape to %v", append(Shape(nil), shape...)), Operands: []*Tensor{t}})
	}
	v := t.view(s, t.off)
	if t.requiresGrad && ProgramOf(t.dev).gradEnabled {
		record(v, "reshape", reshapeBackward, t)
	}
	return v
}

func reshapeBackward(n *node, g *Tensor) { n.gin[0] = g.Reshape(n.in[0].shape...) }

// Rows returns a view of rows [lo, hi) along axis 0.
func (t *Tensor) Rows(lo, hi int) *Tensor {
	if len(t.shape) == 0 || lo < 0 || hi > t.shape[0] || lo > hi {
		panic(&Error{Op: "rows", Msg: fmt.Sprintf("rows [%d, %d) out of range", lo, hi), Operands: []*Tensor{t}})
	}
	var buf [maxInlineRank]int
	s := append(buf[:0], t.shape...)
	s[0] = hi - lo
	inner := Shape(t.shape[1:]).Numel()
	v := t.view(s, t.off+lo*inner)
	if t.requiresGrad && ProgramOf(t.dev).gradEnabled {
		if n := record(v, "rows", rowsBackward, t); n != nil {
			n.i[0] = lo * inner
		}
	}
	return v
}

// rowsBackward places g at its rows of a zero gradient of the full shape.
func rowsBackward(n *node, g *Tensor) {
	z := alloc("rows_backward", g.dev, g.dtype, n.in[0].shape)
	z.be.Fill(z.ref(), 0, z.Numel())
	z.be.Copy(backend.Ref{S: z.st, Off: n.i[0]}, g.ref(), g.Numel())
	n.gin[0] = z
}

// Free returns a persistent tensor's storage to its device pool now. The
// tensor, and views of it, must not be used afterwards.
func (t *Tensor) Free() {
	if t.owns && !t.freed {
		t.be.Free(t.st)
	}
	t.freed = true
}

// MemStats reports the memory pool of dev.
func MemStats(dev Device) backend.MemStats { return getBackend("mem_stats", dev).MemStats() }

// ResetPeakMemory restarts dev's MemStats peak from the memory allocated
// now, where its backend can (see backend.PeakResetter).
func ResetPeakMemory(dev Device) {
	if r, ok := getBackend("reset_peak", dev).(backend.PeakResetter); ok {
		r.ResetPeak()
	}
}

package cpu

import (
	"unsafe"

	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
)

func init() {
	backend.Register("cpu", func(index int) (backend.Backend, error) {
		return New(backend.Device{Kind: "cpu", Index: index}), nil
	})
}

// Buffer is CPU storage: exactly one of the slices is set, by dtype.
type Buffer struct {
	dev backend.Device
	dt  backend.DType
	F32 []float32
	U16 []uint16 // BF16 and F16 bits
	I32 []int32
	I64 []int64
}

// Device implements backend.Storage.
func (b *Buffer) Device() backend.Device { return b.dev }

// DType implements backend.Storage.
func (b *Buffer) DType() backend.DType { return b.dt }

// Len implements backend.Storage.
func (b *Buffer) Len() int {
	switch b.dt {
	case backend.F32:
		return len(b.F32)
	case backend.BF16, backend.F16:
		return len(b.U16)
	case backend.I32:
		return len(b.I32)
	case backend.I64:
		return len(b.I64)
	}
	return 0
}

// CPU is the CPU backend for one logical device.
type CPU struct {
	dev     backend.Device
	threads int
	once    sync.Once
	work    chan *job // jobs for the helper goroutines

	mu        sync.Mutex
	free      map[poolKey][]*Buffer
	allocated int64
	reserved  int64
	peak      int64
	copied    atomic.Int64
}

type poolKey struct {
	dt backend.DType
	n  int
}

// New returns a CPU backend. The number of worker goroutines is
// $FLEET_THREADS if set, else GOMAXPROCS.
func New(dev backend.Device) *CPU {
	t := runtime.GOMAXPROCS(0)
	if s := os.Getenv("FLEET_THREADS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			t = n
		}
	}
	return &CPU{dev: dev, threads: t, free: map[poolKey][]*Buffer{}}
}

// Threads is the number of worker goroutines kernels use.
func (c *CPU) Threads() int { return c.threads }

// SetThreads changes the number of worker goroutines (at least 1). Call
// it before the backend runs its first kernel.
func (c *CPU) SetThreads(n int) {
	if n < 1 {
		n = 1
	}
	c.threads = n
}

// Device implements backend.Backend.
func (c *CPU) Device() backend.Device { return c.dev }

// Alloc takes a buffer of exactly n elements from the pool, or makes one.
// Steady-state training asks for the same sizes every step, so exact-size
// bins reuse every buffer after the first step.
func (c *CPU) Alloc(dt backend.DType, n int) backend.Storage {
	if n < 0 {
		panic(fmt.Sprintf("cpu: alloc of %d elements", n))
	}
	bytes := int64(n * dt.Size())
	c.mu.Lock()
	k := poolKey{dt, n}
	if l := c.free[k]; len(l) > 0 {
		b := l[len(l)-1]
		c.free[k] = l[:len(l)-1]
		c.allocated += bytes
		c.peak = max(c.peak, c.allocated)
		c.mu.Unlock()
		return b
	}
	c.allocated += bytes
	c.reserved += bytes
	c.peak = max(c.peak, c.allocated)
	c.mu.Unlock()
	b := &Buffer{dev: c.dev, dt: dt}
	switch dt {
	case backend.F32:
		b.F32 = make([]float32, n)
	case backend.BF16, backend.F16:
		b.U16 = make([]uint16, n)
	case backend.I32:
		b.I32 = make([]int32, n)
	case backend.I64:
		b.I64 = make([]int64, n)
	default:
		panic(fmt.Sprintf("cpu: alloc of dtype %v", dt))
	}
	return b
}

// Free returns a buffer to its bin.
func (c *CPU) Free(s backend.Storage) {
	b := s.(*Buffer)
	c.mu.Lock()
	k := poolKey{b.dt, b.Len()}
	c.free[k] = append(c.free[k], b)
	c.allocated -= int64(b.Len() * b.dt.Size())
	c.mu.Unlock()
}

// ResetPeak implements backend.PeakResetter.
func (c *CPU) ResetPeak() {
	c.mu.Lock()
	c.peak = c.allocated
	c.mu.Unlock()
}

// MemStats implements backend.Backend.
func (c *CPU) MemStats() backend.MemStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return backend.MemStats{Allocated: c.allocated, Reserved: c.reserved, Peak: c.peak, Copied: c.copied.Load(), Total: physicalMemory()}
}

// f32 returns the float32 elements of r from its offset on.
func f32(r backend.Ref) []float32 { return r.S.(*Buffer).F32[r.Off:] }

// i32 returns the int32 elements of r from its offset on.
func i32(r backend.Ref) []int32 { return r.S.(*Buffer).I32[r.Off:] }

// ranger is one kernel call's work over an index range: do handles
// [lo, hi). Kernels pass a pointer to a pooled task struct (see taskPool),
// which converts to a ranger without allocating, where a closure capturing
// the call's operands would be a heap allocation on every call.
type ranger interface{ do(lo, hi int) }

// pool keeps idle *T for reuse: get returns one (a new zero T when none
// is idle) and put gives it back. Unlike a sync.Pool it never drops what it
// holds, so once it has held as many as were ever in use at once, get and
// put do not allocate, however goroutines move between Ps and whenever the
// garbage collector runs. What kernels pool (task structs, per-goroutine
// scratch) is bounded by the number of concurrent calls and workers.
type pool[T any] struct {
	mu   sync.Mutex
	idle []*T
}

func (p *pool[T]) get() *T {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		t := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return t
	}
	p.mu.Unlock()
	return new(T)
}

func (p *pool[T]) put(t *T) {
	p.mu.Lock()
	p.idle = append(p.idle, t)
	p.mu.Unlock()
}

// taskPool recycles one kernel's task structs across calls. put clears a
// task, so the pool keeps no operands alive.
type taskPool[T any] struct{ p pool[T] }

func (tp *taskPool[T]) get() *T { return tp.p.get() }

func (tp *taskPool[T]) put(t *T) {
	var zero T
	*t = zero
	tp.p.put(t)
}

// runTask runs args over [0, n) with parallelFor, from a pooled copy of
// args, so the call does not allocate once the pool holds a task.
func runTask[T any, P interface {
	*T
	ranger
}](c *CPU, tp *taskPool[T], n, grain int, args T) {
	t := tp.get()
	*t = args
	c.parallelFor(n, grain, P(t))
	tp.put(t)
}

// job is one parallelFor call shared with the worker goroutines.
type job struct {
	r            ranger
	n, size, chk int
	next         atomic.Int64
	wg           sync.WaitGroup
}

var jobPool pool[job]

// run takes chunks until none are left.
func (j *job) run() {
	for {
		i := int(j.next.Add(1)) - 1
		if i >= j.chk {
			return
		}
		lo := i * j.size
		j.r.do(lo, min(lo+j.size, j.n))
	}
}

// startWorkers launches the backend's threads-1 helper goroutines; the
// calling goroutine is always the last worker of its own job.
func (c *CPU) startWorkers() {
	c.work = make(chan *job, 64)
	for w := 1; w < c.threads; w++ {
		go func() {
			for j := range c.work {
				j.run()
				j.wg.Done()
			}
		}()
	}
}

// parallelFor runs r over [0, n) split into chunks of at least grain
// elements. Each index is handled by exactly one call, and the split
// depends only on n, grain and the thread count, so kernels whose outputs
// are written by one chunk each are deterministic. Kernels must not call
// parallelFor from inside r.
func (c *CPU) parallelFor(n, grain int, r ranger) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	chunks := (n + grain - 1) / grain
	if chunks > 4*c.threads {
		chunks = 4 * c.threads
	}
	if chunks <= 1 || c.threads == 1 {
		r.do(0, n)
		return
	}
	c.once.Do(c.startWorkers)
	size := (n + chunks - 1) / chunks
	j := jobPool.get()
	j.r, j.n, j.size, j.chk = r, n, size, (n+size-1)/size
	j.next.Store(0)
	helpers := min(c.threads, j.chk) - 1
	j.wg.Add(helpers)
	for h := 0; h < helpers; h++ {
		c.work <- j
	}
	j.run()
	j.wg.Wait()
	j.r = nil
	jobPool.put(j)
}

// HostFloat32s implements backend.HostMemory.
func (c *CPU) HostFloat32s(r backend.Ref, n int) []float32 { return f32(r)[:n:n] }

// Address implements backend.Queue: the host address of r's element
// (the storage stays alive while its tensor does).
func (c *CPU) Address(r backend.Ref) uintptr {
	b := r.S.(*Buffer)
	switch {
	case b.F32 != nil:
		return uintptr(unsafe.Pointer(&b.F32[r.Off]))
	case b.U16 != nil:
		return uintptr(unsafe.Pointer(&b.U16[r.Off]))
	case b.I32 != nil:
		return uintptr(unsafe.Pointer(&b.I32[r.Off]))
	case b.I64 != nil:
		return uintptr(unsafe.Pointer(&b.I64[r.Off]))
	}
	return 0
}

// OnQueue implements backend.Queue: the CPU's work is synchronous, so fn
// runs at once, with no stream (0).
func (c *CPU) OnQueue(fn func(stream uintptr) error) error { return fn(0) }

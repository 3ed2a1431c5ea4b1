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
	threads atomic.Int64
	budget  sync.RWMutex         // held for reading by parallel calls, for writing by SetThreads
	crewMu  sync.Mutex           // serialises starting helpers
	crew    atomic.Pointer[crew] // the running helpers; nil until a kernel needs them

	mu        sync.Mutex
	free      map[poolKey][]*Buffer
	allocated int64
	reserved  int64
	peak      int64
	limit     int64 // bytes Allocated may reach (0: the machine's memory)
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
	c := &CPU{dev: dev, free: map[poolKey][]*Buffer{}}
	c.threads.Store(int64(t))
	return c
}

var _ backend.ThreadBudget = (*CPU)(nil)

// Threads implements backend.ThreadBudget: the number of goroutines
// kernels use (the calling one and Threads()-1 helpers).
func (c *CPU) Threads() int { return int(c.threads.Load()) }

// SetThreads implements backend.ThreadBudget: it changes the number of
// goroutines kernels use (at least 1), before or after kernels have run.
// It waits for parallel work of this backend in flight (other goroutines'
// kernels) to finish, stops the old budget's helper goroutines and waits
// for them to exit; the next kernel that splits its work starts as many as
// the new budget needs. Results do not depend on the budget (see
// parallelFor).
func (c *CPU) SetThreads(n int) {
	n = max(n, 1)
	c.budget.Lock()
	defer c.budget.Unlock()
	if int64(n) == c.threads.Load() {
		return
	}
	c.threads.Store(int64(n))
	if w := c.crew.Swap(nil); w != nil {
		w.stop()
	}
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
	if c.limit > 0 && c.allocated+bytes > c.limit {
		held := c.allocated
		c.mu.Unlock()
		panic(&backend.DeviceError{Dev: c.dev, Op: "alloc", Err: fmt.Errorf("%w: %d bytes asked for, %d of the %d-byte limit in use",
			backend.ErrOutOfMemory, bytes, held, c.limit)})
	}
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

// SetMemoryLimit implements backend.MemoryLimiter: allocations that would
// take the memory held by tensors past bytes fail with
// backend.ErrOutOfMemory, as on a GPU (0 lifts the limit). MemStats'
// Total reports the limit.
func (c *CPU) SetMemoryLimit(bytes int64) {
	c.mu.Lock()
	c.limit = max(bytes, 0)
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
	total := physicalMemory()
	if c.limit > 0 {
		total = c.limit
	}
	return backend.MemStats{Allocated: c.allocated, Reserved: c.reserved, Peak: c.peak, Copied: c.copied.Load(), Total: total}
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
	runPooled[T, P](c, tp, n, grain, args, false)
}

// runChunks is runTask with parallelForChunks, for kernels whose results
// depend on where a range starts.
func runChunks[T any, P interface {
	*T
	ranger
}](c *CPU, tp *taskPool[T], n, grain int, args T) {
	runPooled[T, P](c, tp, n, grain, args, true)
}

// runPooled is runTask (chunks false) and runChunks (chunks true).
func runPooled[T any, P interface {
	*T
	ranger
}](c *CPU, tp *taskPool[T], n, grain int, args T, chunks bool) {
	t := tp.get()
	*t = args
	if chunks {
		c.parallelForChunks(n, grain, P(t))
	} else {
		c.parallelFor(n, grain, P(t))
	}
	tp.put(t)
}

// job is one parallel call shared with the helper goroutines: n indices
// in chunks of size (the last may be shorter), each chunk cut into per
// pieces of piece indices (the last piece of a chunk may be shorter or
// empty), total = chunks·per pieces in all.
type job struct {
	r              ranger
	n, size, piece int
	per, total     int
	next           atomic.Int64
	wg             sync.WaitGroup
}

var jobPool pool[job]

// run takes pieces until none are left.
func (j *job) run() {
	for {
		i := int(j.next.Add(1)) - 1
		if i >= j.total {
			return
		}
		ch, k := i, 0
		if j.per > 1 {
			ch, k = i/j.per, i%j.per
		}
		lo := ch*j.size + k*j.piece
		hi := min(lo+j.piece, (ch+1)*j.size, j.n)
		if lo < hi {
			j.r.do(lo, hi)
		}
	}
}

// crew is a set of helper goroutines taking jobs from one channel; the
// goroutine that calls parallelFor is always the last worker of its own
// job.
type crew struct {
	work chan *job
	size int // helpers
	done sync.WaitGroup
}

// helpers returns a running crew of n helpers, starting one if need be.
// The caller holds c.budget for reading, so the crew, if any, has
// Threads()-1 = n helpers, or is nil.
func (c *CPU) helpers(n int) *crew {
	if w := c.crew.Load(); w != nil && w.size == n {
		return w
	}
	c.crewMu.Lock()
	defer c.crewMu.Unlock()
	if w := c.crew.Load(); w != nil {
		return w
	}
	w := &crew{work: make(chan *job, 64), size: n}
	w.done.Add(n)
	for range n {
		go w.serve()
	}
	c.crew.Store(w)
	return w
}

// serve runs jobs until the crew is stopped.
func (w *crew) serve() {
	defer w.done.Done()
	for j := range w.work {
		j.run()
		j.wg.Done()
	}
}

// stop ends the crew's goroutines and waits for them. No job may be
// running (every job is waited for before its parallelFor returns, so
// none is queued either).
func (w *crew) stop() {
	close(w.work)
	w.done.Wait()
}

// chunkCap is the most chunks parallelForChunks splits a range into: the
// cap parallelFor has with 2 threads (4 per thread), so that the chunk
// kernels give exactly what they gave with 2 threads before the split
// stopped depending on the thread count.
const chunkCap = 8

// pieceAlign is what parallelForChunks cuts chunks at multiples of: a
// multiple of every SIMD block (16 floats at most) and of a cache line.
const pieceAlign = 64

// parallelFor runs r over [0, n) split into chunks of at least grain
// indices, at most 4 per thread. Each index is handled by exactly one
// call, but the split depends on the thread count, so r must compute each
// output from indices alone, whatever range they arrive in: a row, a tile
// or a column of output computed whole, in a fixed order, by one call.
// Kernels whose outputs depend on where a range starts or ends (a SIMD
// body with a portable tail) use parallelForChunks. Kernels must not call
// parallelFor from inside r.
func (c *CPU) parallelFor(n, grain int, r ranger) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	c.budget.RLock()
	defer c.budget.RUnlock()
	t := c.Threads()
	chunks := min((n+grain-1)/grain, 4*t)
	if chunks <= 1 || t == 1 {
		r.do(0, n)
		return
	}
	size := (n + chunks - 1) / chunks
	c.runJob(r, n, size, size, 1, (n+size-1)/size, t)
}

// parallelForChunks runs r over [0, n) cut into the same chunks whatever
// the thread count: min(⌈n/grain⌉, chunkCap) of them, of equal size but
// the last. With more threads than that keeps busy, each chunk is cut
// further into pieces that start at multiples of pieceAlign from its
// start. So a chunk kernel (elementwise, whose SIMD body runs over blocks
// from the start of its range and whose portable tail does the rest)
// computes every element the same way with any thread count: the
// elements its tail handles are those of the chunk's tail.
func (c *CPU) parallelForChunks(n, grain int, r ranger) {
	if n <= 0 {
		return
	}
	grain = max(grain, 1)
	c.budget.RLock()
	defer c.budget.RUnlock()
	t := c.Threads()
	grains := (n + grain - 1) / grain
	chunks := min(grains, chunkCap)
	size := (n + chunks - 1) / chunks
	chunks = (n + size - 1) / size
	piece, per := size, 1
	if want := min(grains, 4*t); want > chunks {
		cuts := (want + chunks - 1) / chunks
		piece = roundUp((size+cuts-1)/cuts, pieceAlign)
		per = (size + piece - 1) / piece
	}
	if t == 1 || chunks*per == 1 {
		for lo := 0; lo < n; lo += size {
			r.do(lo, min(lo+size, n))
		}
		return
	}
	c.runJob(r, n, size, piece, per, chunks*per, t)
}

// runJob runs a job's pieces on the calling goroutine and up to t-1
// helpers. The caller holds c.budget for reading.
func (c *CPU) runJob(r ranger, n, size, piece, per, total, t int) {
	w := c.helpers(t - 1)
	j := jobPool.get()
	j.r, j.n, j.size, j.piece, j.per, j.total = r, n, size, piece, per, total
	j.next.Store(0)
	helpers := min(t, total) - 1
	j.wg.Add(helpers)
	for h := 0; h < helpers; h++ {
		w.work <- j
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

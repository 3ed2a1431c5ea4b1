package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu"
	"github.com/fleetml/fleet/backend/gpu/cuda/cublas"
	"github.com/fleetml/fleet/backend/gpu/cuda/driver"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/cuda/nvrtc"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/backend/gpu/kcache"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// The CUDA devices, cuda:N, numbered as the driver numbers them.
func init() {
	gpu.Register("cuda", func(index int) (gpu.Driver, error) { return openDriverGPU(index) })
}

// driverGPU is a real device through the CUDA driver API. Calls run on the
// caller's goroutine, one at a time (mu), locked to its OS thread for the
// call with the device's primary context made current there: no hand-off
// to another thread, so a kernel launch costs the driver call itself.
type driverGPU struct {
	d       *driver.Driver
	info    driver.Info
	dev     driver.Device
	ctx     driver.Context
	compute driver.Stream
	copies  driver.Stream // host-to-device copies that overlap compute
	comm    driver.Stream // collectives that overlap compute; made on first use
	blas    *cublas.Handle
	lt      *cublas.Lt // nil: no cuBLASLt, products have no epilogues
	ltH     cublas.LtHandle
	ltWS    driver.DevicePtr // cuBLASLt's workspace, LtWorkspaceBytes (0: none)
	nv      *nvrtc.NVRTC
	cache   *kcache.Cache // nil: compile every process
	// prebuilt holds cubins compiled ahead of time on another machine
	// ($FLEET_KERNEL_PREBUILT, kcache.PrebuiltKey), tried before NVRTC:
	// an image the driver will not load is compiled instead. nil: none.
	prebuilt *kcache.Cache

	arch, target string // device arch (sm_90) and what NVRTC builds for it
	fns          map[string]driver.Function
	fnShared     map[string]int // dynamic shared memory each kernel is allowed
	// queued names the work queued since the host last waited for the
	// device without an error (the newest nqueued, up to its size, in a
	// ring), so that an error a wait reports, which the driver does not
	// tie to the launch that caused it, names what may have: the launches
	// return before the device runs them.
	queued  [16]string
	nqueued int
	file    map[string]cudakernels.File
	args    *driver.Args
	pinned  map[uintptr]int // page-locked host blocks: base -> bytes
	events  []driver.Event  // released marks, for reuse (inside do)

	sim *sim.Device // the simulated device behind the libraries; nil for a GPU

	mu sync.Mutex // one call at a time
}

// openDriverGPU opens device ordinal with everything training needs: the
// driver, NVRTC and cuBLAS (each missing one is an error saying which), and
// cuBLASLt where it is found (without it, products have no epilogues).
func openDriverGPU(ordinal int) (*driverGPU, error) {
	d, err := driver.Open()
	if err != nil {
		return nil, err
	}
	if err := d.Init(); err != nil {
		return nil, fmt.Errorf("cuda: driver init: %w", err)
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal >= n {
		return nil, fmt.Errorf("cuda: no device %d (%d found)", ordinal, n)
	}
	nv, err := nvrtc.Open()
	if err != nil {
		return nil, fmt.Errorf("cuda: kernels need NVRTC: %w", err)
	}
	blas, err := cublas.Open()
	if err != nil {
		return nil, fmt.Errorf("cuda: matrix products need cuBLAS: %w", err)
	}
	lt, err := cublas.OpenLt()
	if err != nil {
		lt = nil // products without epilogues: GELU gets kernels of its own
	}
	cache, err := kcache.Open("")
	if err != nil {
		cache = nil // compile in every process
	}
	g, err := startDriverGPU(d, nv, blas, lt, ordinal, cache)
	if err == nil && os.Getenv("FLEET_KERNEL_PREBUILT") != "" {
		if g.prebuilt, err = kcache.Open(os.Getenv("FLEET_KERNEL_PREBUILT")); err != nil {
			g.prebuilt, err = nil, nil // compile them here
		}
	}
	return g, err
}

// startDriverGPU sets up device ordinal of an initialised driver, with
// NVRTC, cuBLAS, cuBLASLt (nil: none) and a kernel cache (nil: none).
func startDriverGPU(d *driver.Driver, nv *nvrtc.NVRTC, blas *cublas.CUBLAS, lt *cublas.Lt, ordinal int, cache *kcache.Cache) (*driverGPU, error) {
	info, err := d.DeviceInfo(ordinal)
	if err != nil {
		return nil, err
	}
	g := &driverGPU{d: d, info: info, nv: nv, arch: info.Arch(), cache: cache,
		fns: map[string]driver.Function{}, fnShared: map[string]int{}, file: map[string]cudakernels.File{},
		args: driver.NewArgs(), pinned: map[uintptr]int{}}
	g.target, err = nvrtcTarget(nv, info.Major*10+info.Minor)
	if err != nil {
		return nil, err
	}
	for _, f := range cudakernels.Files() {
		for _, k := range cudakernels.Kernels(f.Source) {
			g.file[k] = f
		}
	}
	if err := g.setup(ordinal, blas); err != nil {
		return nil, fmt.Errorf("cuda: set up device %d: %w", ordinal, err)
	}
	if lt != nil {
		if err := g.do(func() (err error) { g.ltH, err = lt.Create(); return err }); err == nil {
			g.lt = lt
			// Without the workspace cuBLASLt runs, with fewer algorithms.
			g.do(func() (err error) { g.ltWS, err = g.d.MemAlloc(LtWorkspaceBytes); return err })
		}
	}
	return g, nil
}

// LtWorkspaceBytes is the device memory each device gives cuBLASLt to work
// in: 32 MiB, what PyTorch gives it on Hopper (its default
// CUBLASLT_WORKSPACE_SIZE). With none, the heuristic may find no
// algorithm for an epilogue, and the products fall back to kernels.
const LtWorkspaceBytes = 32 << 20

// nvrtcTarget picks what NVRTC builds for a device of compute capability
// cc (86 for 8.6): a cubin (sm_XY) when NVRTC knows the architecture, else
// PTX for the newest virtual architecture it knows (compute_XY), which the
// driver compiles for the device when it loads the module.
func nvrtcTarget(nv *nvrtc.NVRTC, cc int) (string, error) {
	archs, err := nv.SupportedArchs()
	if err != nil {
		return fmt.Sprintf("sm_%d", cc), nil // old NVRTC: ask for the device's own
	}
	best := 0
	for _, a := range archs {
		if a == cc {
			return fmt.Sprintf("sm_%d", cc), nil
		}
		if a < cc && a > best {
			best = a
		}
	}
	if best == 0 {
		return "", fmt.Errorf("cuda: NVRTC %s builds none of the architectures up to sm_%d", nv.Version(), cc)
	}
	return fmt.Sprintf("compute_%d", best), nil
}

// setup retains the device's primary context, creates its streams and
// binds cuBLAS to the compute stream.
func (g *driverGPU) setup(ordinal int, blas *cublas.CUBLAS) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var err error
	if g.dev, err = g.d.Device(ordinal); err != nil {
		return err
	}
	if g.ctx, err = g.d.PrimaryCtxRetain(g.dev); err != nil {
		return err
	}
	return g.do(func() error {
		var err error
		if g.compute, err = g.d.StreamCreate(driver.StreamNonBlocking); err != nil {
			return err
		}
		if g.copies, err = g.d.StreamCreate(driver.StreamNonBlocking); err != nil {
			return err
		}
		if g.blas, err = blas.Create(); err != nil {
			return err
		}
		return g.blas.SetStream(uintptr(g.compute))
	})
}

// do runs f with the device's context current on the calling goroutine's
// thread, which stays locked to it for the call, and no other call of the
// device running. A context is per thread in the driver, and Go moves
// goroutines between threads, hence the lock and the set on every call
// (a write to the driver's thread-local state).
func (g *driverGPU) do(f func() error) error {
	g.mu.Lock()
	runtime.LockOSThread()
	err := g.d.CtxSetCurrent(g.ctx)
	if err == nil {
		err = f()
	}
	runtime.UnlockOSThread()
	g.mu.Unlock()
	return err
}

func (g *driverGPU) MemAlloc(bytes int) (gpu.Ptr, error) {
	var p driver.DevicePtr
	err := g.do(func() (err error) { p, err = g.d.MemAlloc(uint64(bytes)); return })
	if errors.Is(err, driver.ErrOutOfMemory) {
		err = fmt.Errorf("%w (%v)", backend.ErrOutOfMemory, err)
	}
	return gpu.Ptr{Block: uint64(p)}, err
}

func (g *driverGPU) MemFree(p gpu.Ptr) error {
	if p.Off != 0 {
		return fmt.Errorf("cuda: freeing %#x+%d, inside a block", p.Block, p.Off)
	}
	return g.do(func() error { return g.d.MemFree(driver.DevicePtr(p.Block)) })
}

// addr is p as a device address: the CUDA driver's blocks are their
// addresses.
func addr(p gpu.Ptr) driver.DevicePtr { return driver.DevicePtr(p.Block + uint64(p.Off)) }

// Address is p's device address.
func (g *driverGPU) Address(p gpu.Ptr) (uintptr, error) { return uintptr(addr(p)), nil }

func (g *driverGPU) Mark() (uintptr, error) {
	var e driver.Event
	err := g.do(func() (err error) {
		if n := len(g.events); n > 0 {
			e, g.events = g.events[n-1], g.events[:n-1]
		} else if e, err = g.d.EventCreate(driver.EventDefault); err != nil {
			return err
		}
		return g.d.EventRecord(e, g.compute)
	})
	return uintptr(e), err
}

func (g *driverGPU) Elapsed(from, to uintptr) (float64, error) {
	var ms float32
	err := g.do(func() (err error) {
		if err = g.d.EventSynchronize(driver.Event(to)); err != nil {
			return g.waited(err) // (a clean wait for one event leaves the work queued after it listed)
		}
		ms, err = g.d.EventElapsedTime(driver.Event(from), driver.Event(to))
		return err
	})
	return float64(ms), err
}

func (g *driverGPU) ReleaseMark(m uintptr) {
	g.do(func() error { g.events = append(g.events, driver.Event(m)); return nil })
}

func (g *driverGPU) MemInfo() (free, total uint64, err error) {
	err = g.do(func() (err error) { free, total, err = g.d.MemGetInfo(); return })
	return
}

func (g *driverGPU) HtoD(dst gpu.Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.do(func() error {
		// From pageable memory the call returns once src is staged; from
		// page-locked memory it returns at once, so wait for the copy.
		err := g.d.MemcpyHtoDAsync(addr(dst), unsafe.Pointer(&src[0]), uint64(len(src)), g.compute)
		if err == nil && g.isPinned(src) {
			err = g.d.StreamSynchronize(g.compute)
		}
		runtime.KeepAlive(src)
		return err
	})
}

// isPinned reports whether b lies in page-locked memory from hostAlloc.
// Called inside do.
func (g *driverGPU) isPinned(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	for base, n := range g.pinned {
		if p >= base && p+uintptr(len(b)) <= base+uintptr(n) {
			return true
		}
	}
	return false
}

func (g *driverGPU) DtoH(dst []byte, src gpu.Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return g.do(func() error {
		if err := g.d.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), addr(src), uint64(len(dst)), g.compute); err != nil {
			return err
		}
		err := g.waited(g.d.StreamSynchronize(g.compute))
		runtime.KeepAlive(dst)
		return err
	})
}

func (g *driverGPU) HostAlloc(bytes int) ([]byte, error) {
	var b []byte
	err := g.do(func() error {
		n := max(bytes, 1)
		p, err := g.d.MemHostAlloc(uint64(n), driver.HostAllocPortable)
		if err == nil {
			b = unsafe.Slice((*byte)(p), n)[:bytes]
			g.pinned[uintptr(p)] = n
		}
		return err
	})
	return b, err
}

func (g *driverGPU) HostFree(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(b[:cap(b)]))
	return g.do(func() error {
		if _, ok := g.pinned[uintptr(p)]; !ok {
			return fmt.Errorf("free of host memory that PinnedAlloc did not return")
		}
		delete(g.pinned, uintptr(p))
		return g.d.MemFreeHost(p)
	})
}

func (g *driverGPU) HtoDAsync(dst gpu.Ptr, src []byte) (backend.Upload, error) {
	c := &asyncCopy{g: g}
	err := g.do(func() error {
		if len(src) > 0 && !g.isPinned(src) {
			// From pageable memory the driver would first wait for the
			// copy stream, i.e. for the compute work queued so far.
			return fmt.Errorf("an asynchronous upload needs page-locked memory from PinnedAlloc")
		}
		mark, err := g.d.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return err
		}
		// Destroying an event that a stream waits on is allowed: the wait
		// keeps what it needs.
		defer g.d.EventDestroy(mark)
		if err := g.d.EventRecord(mark, g.compute); err != nil {
			return err
		}
		if err := g.d.StreamWaitEvent(g.copies, mark); err != nil {
			return err
		}
		if len(src) > 0 {
			if err := g.d.MemcpyHtoDAsync(addr(dst), unsafe.Pointer(&src[0]), uint64(len(src)), g.copies); err != nil {
				return err
			}
		}
		if c.done, err = g.d.EventCreate(driver.EventDisableTiming); err != nil {
			return err
		}
		return g.d.EventRecord(c.done, g.copies)
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

// asyncCopy is a copy queued on the copy stream. Wait destroys its event
// (a stream that waits on it keeps what it needs); a Ready after Wait has
// nothing left to wait for.
type asyncCopy struct {
	g               *driverGPU
	done            driver.Event
	readied, waited bool
}

// Ready implements backend.Upload: the compute stream waits for the copy.
func (c *asyncCopy) Ready() error {
	return c.g.do(func() error {
		if c.readied || c.waited {
			return nil
		}
		c.readied = true
		return c.g.d.StreamWaitEvent(c.g.compute, c.done)
	})
}

// Wait implements backend.Upload: the host waits for the copy, unless it
// is already done (a query first: the staging slots' copies usually
// finished a step ago, and a blocking call would cost a host wait).
func (c *asyncCopy) Wait() error {
	return c.g.do(func() error {
		if c.waited {
			return nil
		}
		c.waited = true
		if done, err := c.g.d.EventQuery(c.done); err != nil || !done {
			if err := c.g.d.EventSynchronize(c.done); err != nil {
				return errors.Join(err, c.g.d.EventDestroy(c.done))
			}
		}
		return c.g.d.EventDestroy(c.done)
	})
}

func (g *driverGPU) DtoD(dst, src gpu.Ptr, bytes int) error {
	if bytes == 0 {
		return nil
	}
	return g.do(func() error {
		return g.d.MemcpyDtoDAsync(addr(dst), addr(src), uint64(bytes), g.compute)
	})
}

// peerCopy queues the copy on this device's compute stream, ordered
// against from's compute stream by events and no host wait: this stream
// waits for an event recorded on from's after its work so far (src is
// written), and from's stream waits for one recorded here after the copy
// (src's block may be recycled by from's pool and written at once).
func (g *driverGPU) PeerCopy(dst gpu.Ptr, from gpu.Driver, src gpu.Ptr, bytes int) error {
	f, ok := from.(*driverGPU)
	if !ok || f.d != g.d { // events and contexts are one driver's (a GPU's, or a simulator's)
		return gpu.ErrNoPeer
	}
	if bytes == 0 {
		return nil
	}
	written, err := f.Mark()
	if err != nil {
		return err
	}
	defer f.ReleaseMark(written)
	err = g.do(func() error {
		if err := g.d.StreamWaitEvent(g.compute, driver.Event(written)); err != nil {
			return err
		}
		return g.d.MemcpyPeerAsync(addr(dst), g.ctx, addr(src), f.ctx, uint64(bytes), g.compute)
	})
	if err != nil {
		return err
	}
	copied, err := g.Mark()
	if err != nil {
		return err
	}
	defer g.ReleaseMark(copied)
	return f.do(func() error { return f.d.StreamWaitEvent(f.compute, driver.Event(copied)) })
}

func (g *driverGPU) Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[gpu.Ptr]) error {
	return g.do(func() error {
		fn, err := g.function(kernel)
		if err != nil {
			return err
		}
		if shared > 48<<10 && g.fnShared[kernel] < shared {
			if err := g.d.FuncSetAttribute(fn, driver.FuncAttrMaxDynamicSharedSizeBytes, shared); err != nil {
				return fmt.Errorf("%s: %d bytes of shared memory: %w", kernel, shared, err)
			}
			g.fnShared[kernel] = shared
		}
		a := g.args.Reset()
		for i := range args.Len() {
			switch v := args.At(i); v.Kind {
			case kernels.ArgBuf:
				a.Ptr(addr(v.Buf))
			case kernels.ArgInt:
				a.Int(v.Int())
			case kernels.ArgUint:
				a.Uint(v.Uint())
			case kernels.ArgLong:
				a.Int64(v.Long())
			case kernels.ArgFloat:
				a.Float32(v.Float())
			case kernels.ArgDouble:
				a.Float64(v.Double())
			default:
				return fmt.Errorf("%s: argument %d of kind %d", kernel, i, v.Kind)
			}
		}
		err = g.d.LaunchKernel(fn, dim3(grid), dim3(block), uint32(shared), g.compute, a)
		if err != nil {
			return fmt.Errorf("%s grid %v block %v: %w", kernel, grid, block, err)
		}
		g.queue(kernel)
		return nil
	})
}

func dim3(d [3]int) driver.Dim3 {
	return driver.Dim3{X: uint32(d[0]), Y: uint32(d[1]), Z: uint32(d[2])}
}

// function returns a kernel, compiling and loading its file on first use.
// Called inside do.
func (g *driverGPU) function(kernel string) (driver.Function, error) {
	if fn, ok := g.fns[kernel]; ok {
		return fn, nil
	}
	f, ok := g.file[kernel]
	if !ok {
		return 0, fmt.Errorf("no kernel %s in the embedded sources", kernel)
	}
	src := cudakernels.NVRTCSource(f)
	if g.prebuilt != nil {
		if img, err := g.prebuilt.Get(kcache.PrebuiltKey(src, g.arch, nvrtc.KernelOptions)); err == nil {
			if mod, err := g.d.ModuleLoadData(img); err == nil {
				return g.bind(mod, f, kernel)
			}
		}
	}
	compile := func() ([]byte, error) {
		img, log, err := g.nv.Compile(src, f.Name, g.target, nvrtc.KernelOptions...)
		if err != nil {
			return nil, fmt.Errorf("compile %s for %s: %w\n%s", f.Name, g.target, err, strings.TrimSpace(log))
		}
		return img, nil
	}
	var img []byte
	var err error
	if g.cache != nil {
		img, _, err = g.cache.Load(kcache.Key(src, g.target, g.nv.Version(), nvrtc.KernelOptions), compile)
	} else {
		img, err = compile()
	}
	if err != nil {
		return 0, err
	}
	mod, err := g.d.ModuleLoadData(img)
	if err != nil {
		return 0, fmt.Errorf("load %s (%s): %w", f.Name, g.target, err)
	}
	return g.bind(mod, f, kernel)
}

// bind records the kernels of f's loaded module and returns kernel.
func (g *driverGPU) bind(mod driver.Module, f cudakernels.File, kernel string) (driver.Function, error) {
	for _, k := range cudakernels.Kernels(f.Source) {
		fn, err := g.d.ModuleGetFunction(mod, k)
		if err != nil {
			return 0, err
		}
		g.fns[k] = fn
	}
	return g.fns[kernel], nil
}

// gemm and ltMatmul take their descriptions by value: a pointer passed
// through the gpu interface would make each product a heap allocation.
func (g *driverGPU) Gemm(p gpu.Product) error {
	b := cublasGemm(p)
	return g.do(func() error { g.queue("cublasGemmStridedBatchedEx"); return g.blas.GemmStridedBatchedEx(&b) })
}

// cublasGemm is p in cuBLAS's terms.
func cublasGemm(p gpu.Product) cublas.Gemm {
	return cublas.Gemm{
		TransA: cublasOp(p.TransA), TransB: cublasOp(p.TransB), M: p.M, N: p.N, K: p.K, Alpha: p.Alpha, Beta: p.Beta,
		A: uint64(addr(p.A)), B: uint64(addr(p.B)), C: uint64(addr(p.C)),
		AType: cublasType(p.AType), BType: cublasType(p.BType), CType: cublasType(p.CType),
		LDA: p.LDA, LDB: p.LDB, LDC: p.LDC, StrideA: p.StrideA, StrideB: p.StrideB, StrideC: p.StrideC,
		Batch: p.Batch, Compute: cublasCompute(p.Compute), Algo: cublas.AlgoDefault,
	}
}

// cublasLtMatmul is m in cuBLASLt's terms: D is C.
func cublasLtMatmul(m gpu.EpilogueProduct) cublas.LtMatmul {
	g := cublasGemm(m.Product)
	return cublas.LtMatmul{
		TransA: g.TransA, TransB: g.TransB, M: g.M, N: g.N, K: g.K, Alpha: g.Alpha, Beta: g.Beta,
		A: g.A, B: g.B, C: g.C, D: g.C, AType: g.AType, BType: g.BType, CType: g.CType,
		LDA: g.LDA, LDB: g.LDB, LDC: g.LDC, Batch: g.Batch, StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC,
		Compute: g.Compute, Epilogue: cublasEpilogue[m.Epilogue], Bias: uint64(addr(m.Bias)), Aux: uint64(addr(m.Aux)), AuxLD: m.AuxLD,
	}
}

func cublasOp(t gpu.Transpose) cublas.Op {
	if t == gpu.Transposed {
		return cublas.OpT
	}
	return cublas.OpN
}

func cublasType(dt backend.DType) cublas.DataType {
	switch dt {
	case backend.BF16:
		return cublas.R16BF
	case backend.F16:
		return cublas.R16F
	}
	return cublas.R32F
}

func cublasCompute(c gpu.Compute) cublas.ComputeType {
	switch c {
	case gpu.ComputeRoundBF16:
		return cublas.Compute32FFast16BF
	case gpu.ComputeRoundF16:
		return cublas.Compute32FFast16F
	case gpu.ComputeTF32:
		return cublas.Compute32FFastTF32
	}
	return cublas.Compute32F
}

var cublasEpilogue = [...]cublas.Epilogue{
	gpu.EpilogueNone:        cublas.EpilogueDefault,
	gpu.EpilogueBias:        cublas.EpilogueBias,
	gpu.EpilogueGELUAux:     cublas.EpilogueGELUAux,
	gpu.EpilogueGELUAuxBias: cublas.EpilogueGELUAuxBias,
	gpu.EpilogueDGELU:       cublas.EpilogueDGELU,
	gpu.EpilogueBGradA:      cublas.EpilogueBGradA,
}

// queue notes work queued on the compute stream. Called inside do.
func (g *driverGPU) queue(name string) {
	g.queued[g.nqueued%len(g.queued)] = name
	g.nqueued++
}

// waited is what a wait for the device returned, err, with the work
// queued since the last clean wait named where it failed; a clean wait
// starts the list anew. Called inside do.
func (g *driverGPU) waited(err error) error {
	n := g.nqueued
	g.nqueued = 0
	if err == nil || n == 0 {
		return err
	}
	k := min(n, len(g.queued))
	names := make([]string, k)
	for i := range k {
		names[i] = g.queued[(n-k+i)%len(g.queued)]
	}
	what := "the work queued since the host last waited"
	if n > k {
		what = fmt.Sprintf("the last %d of the %d launches queued since the host last waited", k, n)
	}
	return fmt.Errorf("%w; the device failed in %s: %s", err, what, strings.Join(names, ", "))
}

func (g *driverGPU) GemmEpilogue(p gpu.EpilogueProduct) error {
	if g.lt == nil {
		return gpu.ErrNoEpilogues
	}
	m := cublasLtMatmul(p)
	if g.ltWS != 0 {
		m.Workspace, m.WorkspaceBytes = uint64(g.ltWS), LtWorkspaceBytes
	}
	err := g.do(func() error {
		m.Stream = uintptr(g.compute)
		g.queue("cublasLtMatmul")
		return g.lt.Matmul(g.ltH, &m)
	})
	if status := (*cublas.Error)(nil); errors.As(err, &status) {
		return fmt.Errorf("%w: %w", gpu.ErrRefused, err)
	}
	return err
}

func (g *driverGPU) Sync() error {
	return g.do(func() error {
		return g.waited(errors.Join(g.d.StreamSynchronize(g.copies), g.d.StreamSynchronize(g.compute)))
	})
}

func (g *driverGPU) OnStream(fn func(stream uintptr) error) error {
	return g.do(func() error { return fn(uintptr(g.compute)) })
}

// onCommStream: see gpu. The communication stream is made on first use.
func (g *driverGPU) OnCommStream(fn func(stream uintptr) error) error {
	return g.do(func() error {
		if g.comm == 0 {
			s, err := g.d.StreamCreate(driver.StreamNonBlocking)
			if err != nil {
				return err
			}
			g.comm = s
		}
		if err := g.order(g.comm, g.compute); err != nil {
			return err
		}
		return fn(uintptr(g.comm))
	})
}

// joinComm: see gpu. Without a communication stream there is nothing to
// join, and the probe is done.
func (g *driverGPU) JoinComm() (backend.CommProbe, error) {
	p := &commProbe{g: g}
	err := g.do(func() error {
		if g.comm == 0 {
			return nil
		}
		e, err := g.d.EventCreate(driver.EventDisableTiming)
		if err != nil {
			return err
		}
		if err := g.d.EventRecord(e, g.comm); err != nil {
			g.d.EventDestroy(e)
			return err
		}
		if err := g.d.StreamWaitEvent(g.compute, e); err != nil {
			g.d.EventDestroy(e)
			return err
		}
		p.e = e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// order makes stream after wait, on the device, for the work queued so
// far on stream before. Called inside do.
func (g *driverGPU) order(after, before driver.Stream) error {
	e, err := g.d.EventCreate(driver.EventDisableTiming)
	if err != nil {
		return err
	}
	// Destroying an event a stream waits on is allowed: the wait keeps
	// what it needs.
	defer g.d.EventDestroy(e)
	if err := g.d.EventRecord(e, before); err != nil {
		return err
	}
	return g.d.StreamWaitEvent(after, e)
}

// commProbe is an event recorded on the communication stream. Done and
// Release make the context current on the caller's thread themselves,
// without the device's lock, so that a watchdog can query while another
// goroutine waits for the device inside do (the driver's calls are
// thread-safe; the lock only keeps fleet's own state consistent).
type commProbe struct {
	g *driverGPU
	e driver.Event // 0: nothing to wait for
}

func (p *commProbe) Done() (bool, error) {
	if p.e == 0 {
		return true, nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := p.g.d.CtxSetCurrent(p.g.ctx); err != nil {
		return false, err
	}
	return p.g.d.EventQuery(p.e)
}

func (p *commProbe) Release() {
	if p.e == 0 {
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if p.g.d.CtxSetCurrent(p.g.ctx) == nil {
		p.g.d.EventDestroy(p.e)
	}
	p.e = 0
}

// beginCapture starts recording the compute stream's work (relaxed mode:
// the allocator and the watchdog call the driver from other threads).
func (g *driverGPU) BeginCapture() error {
	return g.do(func() error { return g.d.StreamBeginCapture(g.compute, driver.CaptureRelaxed) })
}

// endCapture ends the recording and makes the graph launchable.
func (g *driverGPU) EndCapture() (backend.Graph, error) {
	gr := &cudaGraph{g: g}
	err := g.do(func() error {
		graph, err := g.d.StreamEndCapture(g.compute)
		if err != nil {
			return err
		}
		gr.graph = graph
		if gr.exec, err = g.d.GraphInstantiate(graph); err != nil {
			g.d.GraphDestroy(graph)
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return gr, nil
}

// cudaGraph is a captured graph and its launchable form.
type cudaGraph struct {
	g     *driverGPU
	graph driver.Graph
	exec  driver.GraphExec
}

// Launch implements backend.Graph.
func (c *cudaGraph) Launch() error {
	return c.g.do(func() error { c.g.queue("cuGraphLaunch"); return c.g.d.GraphLaunch(c.exec, c.g.compute) })
}

// Free implements backend.Graph.
func (c *cudaGraph) Free() error {
	return c.g.do(func() error { return errors.Join(c.g.d.GraphExecDestroy(c.exec), c.g.d.GraphDestroy(c.graph)) })
}

func (g *driverGPU) SMCount() int { return g.info.SMs }

func (g *driverGPU) TensorCores() bool { return g.info.Major >= 8 }

func (g *driverGPU) Name() string { return g.info.Name }

func (g *driverGPU) Close() error {
	err := g.do(func() error {
		e1 := errors.Join(g.d.StreamSynchronize(g.compute), g.d.StreamSynchronize(g.copies))
		if g.comm != 0 {
			e1 = errors.Join(e1, g.d.StreamSynchronize(g.comm), g.d.StreamDestroy(g.comm))
			g.comm = 0
		}
		e2 := g.blas.Destroy()
		if g.lt != nil {
			e2 = errors.Join(e2, g.lt.Destroy(g.ltH))
		}
		if g.ltWS != 0 {
			e2 = errors.Join(e2, g.d.MemFree(g.ltWS))
			g.ltWS = 0
		}
		for _, e := range g.events {
			e2 = errors.Join(e2, g.d.EventDestroy(e))
		}
		g.events = nil
		e3 := errors.Join(g.d.StreamDestroy(g.compute), g.d.StreamDestroy(g.copies))
		e4 := g.d.PrimaryCtxRelease(g.dev)
		return errors.Join(e1, e2, e3, e4)
	})
	return err
}

package opencl

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu"
	"github.com/fleetml/fleet/backend/gpu/kcache"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// OpenCL devices run the GPU runtime (package gpu) on a driver of their
// own (clGPU): the same allocator, the same op functions (package
// kernels) and the same checks, with the kernels' OpenCL C twins
// (kernels/*.cl) and CLBlast's products. They register as "opencl",
// numbered as Devices lists them.
func init() {
	gpu.Register("opencl", func(index int) (gpu.Driver, error) { return openCLGPU(index) })
}

// clGPU is an OpenCL device. OpenCL buffers are handles, not addresses: a
// gpu.Ptr's Block is the buffer's cl_mem, its Off the byte offset in it,
// and a launch passes a buffer argument as the two (the kernels' BUF and
// AT parameters).
type clGPU struct {
	ctx   *Context
	cache *kcache.Cache // nil: compile every process

	mu        sync.Mutex         // one call at a time (kernel arguments are set on shared kernel objects)
	blocks    map[uint64]*Buffer // by cl_mem
	allocated int64

	file    map[string]File // kernel -> its file
	kernels map[string]*clKernel
	failed  map[string]error // files that did not build, and why
	pinned  map[uintptr]*HostBuffer
	marks   map[uintptr]Event // Timer marks, by number
	nmarks  uintptr

	// scratch holds the F32 copies a product makes of operands that are
	// not F32, or that it rounds (index 0 A, 1 B, 2 C): blocks like
	// memAlloc's, outside the pool.
	scratch [3]gpu.Ptr
}

type clKernel struct {
	k *Kernel
	// nargs is its number of parameters: one more than a launch's
	// arguments make is the __local memory the launch's shared bytes
	// size.
	nargs int
}

// openCLGPU opens OpenCL device index.
func openCLGPU(index int) (*clGPU, error) {
	ds, err := Devices()
	if err != nil {
		return nil, err
	}
	if index < 0 || index >= len(ds) {
		return nil, fmt.Errorf("opencl: no device %d (%d found)", index, len(ds))
	}
	if wg := ds[index].MaxWorkGroupSize; wg < MinWorkGroupSize {
		return nil, fmt.Errorf("opencl: device %d (%s) runs work-groups of at most %d; fleet's kernels need %d", index, ds[index].Name, wg, MinWorkGroupSize)
	}
	ctx, err := Open(ds[index])
	if err != nil {
		return nil, err
	}
	cache, err := kcache.Open("")
	if err != nil {
		cache = nil
	}
	g := &clGPU{ctx: ctx, cache: cache, blocks: map[uint64]*Buffer{},
		file: map[string]File{}, kernels: map[string]*clKernel{}, failed: map[string]error{}, pinned: map[uintptr]*HostBuffer{},
		marks: map[uintptr]Event{}}
	for _, f := range Files() {
		for _, k := range Kernels(f.Source) {
			g.file[k] = f
		}
	}
	return g, nil
}

// at resolves p to its buffer and the byte offset in it.
func (g *clGPU) at(p gpu.Ptr) (*Buffer, int, error) {
	b, ok := g.blocks[p.Block]
	if !ok {
		return nil, 0, fmt.Errorf("opencl: buffer %#x is not one of this device's", p.Block)
	}
	if p.Off < 0 || p.Off > b.Bytes {
		return nil, 0, fmt.Errorf("opencl: offset %d is outside its buffer of %d bytes", p.Off, b.Bytes)
	}
	return b, p.Off, nil
}

// Address refuses: OpenCL's buffers are handles, with no device address
// for a library to take (NCCL runs on CUDA devices only).
func (g *clGPU) Address(gpu.Ptr) (uintptr, error) {
	return 0, errors.New("opencl: buffers have no device address")
}

func (g *clGPU) MemAlloc(bytes int) (gpu.Ptr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.allocBlock(bytes)
}

func (g *clGPU) MemFree(p gpu.Ptr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.freeBlock(p)
}

// allocBlock makes a buffer of bytes. OpenCL
// allocates lazily, so the device's memory is accounted here: a request
// past it, or past the largest buffer the device allows, fails as
// backend.ErrOutOfMemory, as does a refusal by the driver. Called under
// mu.
func (g *clGPU) allocBlock(bytes int) (gpu.Ptr, error) {
	d := g.ctx.Device
	if int64(bytes) > d.MaxAllocBytes || g.allocated+int64(bytes) > d.GlobalMemBytes {
		return gpu.Ptr{}, fmt.Errorf("%w (opencl: %d bytes asked, %d allocated, %d in all, %d at most in one buffer)",
			backend.ErrOutOfMemory, bytes, g.allocated, d.GlobalMemBytes, d.MaxAllocBytes)
	}
	b, err := g.ctx.Alloc(bytes)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && e.OutOfMemory() {
			return gpu.Ptr{}, fmt.Errorf("%w (%v)", backend.ErrOutOfMemory, err)
		}
		return gpu.Ptr{}, err
	}
	g.blocks[uint64(b.mem)] = b
	g.allocated += int64(bytes)
	return gpu.Ptr{Block: uint64(b.mem)}, nil
}

// freeBlock releases p's buffer. Called under mu.
func (g *clGPU) freeBlock(p gpu.Ptr) error {
	b, off, err := g.at(p)
	if err != nil {
		return err
	}
	if off != 0 {
		return fmt.Errorf("opencl: freeing %#x at offset %d, inside its buffer", p.Block, off)
	}
	delete(g.blocks, p.Block)
	g.allocated -= int64(b.Bytes)
	return b.Free()
}

func (g *clGPU) MemInfo() (free, total uint64, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	t := g.ctx.Device.GlobalMemBytes
	return uint64(max(t-g.allocated, 0)), uint64(t), nil
}

func (g *clGPU) HtoD(dst gpu.Ptr, src []byte) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, off, err := g.at(dst)
	if err != nil {
		return err
	}
	return g.ctx.WriteAt(b, off, src)
}

func (g *clGPU) DtoH(dst []byte, src gpu.Ptr) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	b, off, err := g.at(src)
	if err != nil {
		return err
	}
	return g.ctx.ReadAt(dst, b, off)
}

func (g *clGPU) DtoD(dst, src gpu.Ptr, bytes int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	db, doff, err := g.at(dst)
	if err != nil {
		return err
	}
	sb, soff, err := g.at(src)
	if err != nil {
		return err
	}
	return g.ctx.CopyBuffer(db, doff, sb, soff, bytes)
}

func (g *clGPU) PeerCopy(gpu.Ptr, gpu.Driver, gpu.Ptr, int) error { return gpu.ErrNoPeer }

func (g *clGPU) HostAlloc(bytes int) ([]byte, error) {
	if bytes == 0 {
		return []byte{}, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h, err := g.ctx.AllocHost(bytes)
	if err != nil {
		return nil, err
	}
	g.pinned[uintptr(unsafe.Pointer(&h.Bytes[0]))] = h
	return h.Bytes, nil
}

func (g *clGPU) HostFree(b []byte) error {
	if cap(b) == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b[:cap(b)])))
	h, ok := g.pinned[p]
	if !ok {
		return fmt.Errorf("free of host memory that PinnedAlloc did not return")
	}
	delete(g.pinned, p)
	return h.Free()
}

// isPinned reports whether b lies in memory from hostAlloc.
func (g *clGPU) isPinned(b []byte) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	for base, h := range g.pinned {
		if p >= base && p+uintptr(len(b)) <= base+uintptr(len(h.Bytes)) {
			return true
		}
	}
	return false
}

func (g *clGPU) HtoDAsync(dst gpu.Ptr, src []byte) (backend.Upload, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(src) == 0 {
		return backend.DoneUpload{}, nil
	}
	if !g.isPinned(src) {
		return nil, fmt.Errorf("an asynchronous upload needs host memory from PinnedAlloc")
	}
	b, off, err := g.at(dst)
	if err != nil {
		return nil, err
	}
	ev, err := g.ctx.UploadAsync(b, off, src)
	if err != nil {
		return nil, err
	}
	return &clUpload{g: g, ev: ev}, nil
}

// clUpload is a copy queued on the upload queue.
type clUpload struct {
	g               *clGPU
	ev              Event
	readied, waited bool
}

// Ready implements backend.Upload: the compute queue waits for the copy.
func (u *clUpload) Ready() error {
	u.g.mu.Lock()
	defer u.g.mu.Unlock()
	if u.readied || u.waited {
		return nil
	}
	u.readied = true
	return u.g.ctx.After(u.ev)
}

// Wait implements backend.Upload.
func (u *clUpload) Wait() error {
	u.g.mu.Lock()
	defer u.g.mu.Unlock()
	if u.waited {
		return nil
	}
	u.waited = true
	return errors.Join(u.ev.Wait(), u.ev.Release())
}

func (g *clGPU) Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[gpu.Ptr]) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.launchLocked(kernel, grid, block, shared, args)
}

// launchLocked is launch, called under mu: each buffer argument goes as
// its block's handle and the byte offset in it, and a kernel with one
// parameter more than the arguments make gets shared bytes of __local
// memory there.
func (g *clGPU) launchLocked(kernel string, grid, block [3]int, shared int, args kernels.Args[gpu.Ptr]) error {
	k, err := g.kernel(kernel)
	if err != nil {
		return err
	}
	i := 0 // the kernel's parameter
	for a := range args.Len() {
		switch v := args.At(a); v.Kind {
		case kernels.ArgBuf:
			var b *Buffer
			off := 0
			if !v.Buf.IsNil() {
				if b, off, err = g.at(v.Buf); err != nil {
					return fmt.Errorf("%s argument %d: %w", kernel, a, err)
				}
			}
			err = k.k.SetArgBuffer(i, b)
			if err == nil {
				err = k.k.SetArgBytes(i+1, uint64(off), 8)
			}
			i += 2
		case kernels.ArgInt, kernels.ArgUint, kernels.ArgFloat:
			err = k.k.SetArgBytes(i, v.Bits, 4)
			i++
		case kernels.ArgLong, kernels.ArgDouble:
			err = k.k.SetArgBytes(i, v.Bits, 8)
			i++
		default:
			err = fmt.Errorf("argument of kind %d", v.Kind)
		}
		if err != nil {
			return fmt.Errorf("%s argument %d: %w", kernel, a, err)
		}
	}
	if k.nargs != i && k.nargs != i+1 {
		return fmt.Errorf("%s: %d arguments for %d parameters", kernel, i, k.nargs)
	}
	if k.nargs == i+1 {
		if err := k.k.SetArgLocal(i, max(shared, 16)); err != nil {
			return fmt.Errorf("%s local memory: %w", kernel, err)
		}
	}
	if err := g.ctx.LaunchGrid(k.k, grid, block); err != nil {
		return fmt.Errorf("%s grid %v block %v: %w", kernel, grid, block, err)
	}
	return nil
}

// kernel returns a kernel, building its file on first use (or loading
// the device's binary from the cache). Called under mu.
func (g *clGPU) kernel(name string) (*clKernel, error) {
	if k, ok := g.kernels[name]; ok {
		return k, nil
	}
	f, ok := g.file[name]
	if !ok {
		return nil, fmt.Errorf("no OpenCL kernel %s in the embedded sources", name)
	}
	if err := g.failed[f.Name]; err != nil {
		return nil, err
	}
	var p *Program
	var err error
	options := BuildOptions(g.ctx.Device)
	if g.cache != nil {
		p, _, err = g.ctx.BuildCached(g.cache, Source(f), options)
	} else {
		p, err = g.ctx.Build(Source(f), options)
	}
	if err != nil {
		err = fmt.Errorf("build %s: %w", f.Name, err)
		g.failed[f.Name] = err
		return nil, err
	}
	defer p.Release()
	made := map[string]*clKernel{}
	for _, kn := range Kernels(f.Source) {
		k, err := p.Kernel(kn)
		if err == nil {
			var n int
			if n, err = k.NumArgs(); err == nil {
				made[kn] = &clKernel{k: k, nargs: n}
				continue
			}
			k.Release()
		}
		for _, m := range made {
			m.k.Release()
		}
		err = fmt.Errorf("build %s: %w", f.Name, err)
		g.failed[f.Name] = err
		return nil, err
	}
	for kn, k := range made {
		g.kernels[kn] = k
	}
	return g.kernels[name], nil
}

// gemm runs one product through CLBlast's SGEMM. Operands stored in 16
// bits, and F32 operands the product rounds (cuBLAS's FAST_16BF and
// FAST_16F modes), are first made F32 in scratch buffers; a 16-bit output
// is computed in F32 scratch and rounded into place.
func (g *clGPU) Gemm(p gpu.Product) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	rows := func(op gpu.Transpose, m, k int) (int, int) { // a stored matrix's rows and columns, column-major
		if op == gpu.Transposed {
			return k, m
		}
		return m, k
	}
	ar, ac := rows(p.TransA, p.M, p.K)
	br, bc := rows(p.TransB, p.K, p.N)
	span := func(r, c, ld int, stride int64) int {
		n := ld*(c-1) + r
		if p.Batch > 1 {
			n += int(stride) * (p.Batch - 1)
		}
		return n
	}
	round := p.Compute.Rounds() // F32: none
	a, err := g.operand(0, p.A, p.AType, round, span(ar, ac, p.LDA, p.StrideA))
	if err != nil {
		return err
	}
	b, err := g.operand(1, p.B, p.BType, round, span(br, bc, p.LDB, p.StrideB))
	if err != nil {
		return err
	}
	cn := span(p.M, p.N, p.LDC, p.StrideC)
	c := p.C
	if p.CType != backend.F32 {
		// C is read into scratch where beta reads it, and where the
		// product leaves parts of its span alone (gaps between batch
		// items, or rows longer than M), which the cast back must keep.
		gaps := p.LDC != p.M || (p.Batch > 1 && p.StrideC != int64(p.LDC*p.N))
		if p.Beta != 0 || gaps {
			c, err = g.operand(2, c, p.CType, backend.F32, cn)
		} else {
			c, err = g.scratchBlock(2, cn*4)
		}
		if err != nil {
			return err
		}
	}
	ab, aoff, err := g.at(a)
	if err != nil {
		return err
	}
	bb, boff, err := g.at(b)
	if err != nil {
		return err
	}
	cb, coff, err := g.at(c)
	if err != nil {
		return err
	}
	err = g.ctx.Sgemm(GEMM{
		Batch: p.Batch, M: p.M, N: p.N, K: p.K, TransA: p.TransA == gpu.Transposed, TransB: p.TransB == gpu.Transposed,
		Alpha: p.Alpha, Beta: p.Beta, OffA: aoff / 4, OffB: boff / 4, OffC: coff / 4,
		StrideA: int(p.StrideA), StrideB: int(p.StrideB), StrideC: int(p.StrideC),
		ColMajor: true, LDA: p.LDA, LDB: p.LDB, LDC: p.LDC,
	}, ab, bb, cb)
	if err != nil || p.CType == backend.F32 {
		return err
	}
	return g.convert(convertKernel(backend.F32, p.CType, false), p.C, c, cn)
}

// operand returns the place of n F32 elements holding those of type dt
// at p: p itself where they are F32 and not to be rounded, else scratch
// slot i with them converted (round R16BF or R16F rounds F32 values to
// that type and back; F32 rounds nothing). Called under mu.
func (g *clGPU) operand(i int, p gpu.Ptr, dt, round backend.DType, n int) (gpu.Ptr, error) {
	if dt == backend.F32 && round == backend.F32 {
		return p, nil
	}
	s, err := g.scratchBlock(i, n*4)
	if err != nil {
		return gpu.Ptr{}, err
	}
	kernel := convertKernel(dt, backend.F32, false)
	if dt == backend.F32 {
		kernel = convertKernel(dt, round, true)
	}
	return s, g.convert(kernel, s, p, n)
}

// convert launches a one-to-one conversion kernel (dst, src, n) over n
// elements. Called under mu.
func (g *clGPU) convert(kernel string, dst, src gpu.Ptr, n int) error {
	grid := min((n+kernels.BlockSize-1)/kernels.BlockSize, 1024)
	return g.launchLocked(kernel, [3]int{grid, 1, 1}, [3]int{kernels.BlockSize, 1, 1}, 0, *new(kernels.Args[gpu.Ptr]).Buf(dst, src).Long(int64(n)))
}

// scratchBlock returns scratch slot i with at least bytes, growing it
// (counted against the device's memory with the pool's blocks). The queue
// is in order, so a slot is free again once the work using it is queued;
// one that grows waits for that work first. Called under mu.
func (g *clGPU) scratchBlock(i, bytes int) (gpu.Ptr, error) {
	if s := g.scratch[i]; !s.IsNil() {
		if g.blocks[s.Block].Bytes >= bytes {
			return s, nil
		}
		if err := g.ctx.Finish(); err != nil {
			return gpu.Ptr{}, err
		}
		if err := g.freeBlock(s); err != nil {
			return gpu.Ptr{}, err
		}
		g.scratch[i] = gpu.Ptr{}
	}
	s, err := g.allocBlock(max(bytes, 4096))
	if err != nil {
		return gpu.Ptr{}, fmt.Errorf("opencl: product scratch: %w", err)
	}
	g.scratch[i] = s
	return s, nil
}

// convertKernel names the OpenCL kernel that converts elements from one
// of F32, BF16 and F16 to another (fleet_cast_<from>_<to>), or, with
// round, rounds F32 to to and widens it back (fleet_round_<to>). The names
// are constants: a product names its kernels without building strings.
func convertKernel(from, to backend.DType, round bool) string {
	switch {
	case round && to == backend.BF16:
		return "fleet_round_bf16"
	case round && to == backend.F16:
		return "fleet_round_f16"
	case from == backend.BF16:
		return "fleet_cast_bf16_f32"
	case from == backend.F16:
		return "fleet_cast_f16_f32"
	case to == backend.BF16:
		return "fleet_cast_f32_bf16"
	case to == backend.F16:
		return "fleet_cast_f32_f16"
	}
	return "fleet_cast_f32_f32"
}

func (g *clGPU) GemmEpilogue(gpu.EpilogueProduct) error { return gpu.ErrNoEpilogues }

func (g *clGPU) Sync() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ctx.Finish()
}

var errNoCUDAStream = errors.New("opencl: no CUDA stream (NCCL and CUDA graphs need a CUDA device)")

func (g *clGPU) OnStream(func(stream uintptr) error) error     { return errNoCUDAStream }
func (g *clGPU) OnCommStream(func(stream uintptr) error) error { return errNoCUDAStream }
func (g *clGPU) JoinComm() (backend.CommProbe, error)          { return nil, errNoCUDAStream }
func (g *clGPU) BeginCapture() error                           { return errNoCUDAStream }
func (g *clGPU) EndCapture() (backend.Graph, error)            { return nil, errNoCUDAStream }

func (g *clGPU) Mark() (uintptr, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e, err := g.ctx.Marker()
	if err != nil {
		return 0, err
	}
	g.nmarks++
	g.marks[g.nmarks] = e
	return g.nmarks, nil
}

func (g *clGPU) Elapsed(from, to uintptr) (float64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f, ok1 := g.marks[from]
	t, ok2 := g.marks[to]
	if !ok1 || !ok2 {
		return 0, fmt.Errorf("opencl: elapsed between unknown marks")
	}
	if err := t.Wait(); err != nil {
		return 0, err
	}
	if err := f.Wait(); err != nil {
		return 0, err
	}
	t0, err := f.End()
	if err != nil {
		return 0, err
	}
	t1, err := t.End()
	if err != nil {
		return 0, err
	}
	return float64(int64(t1-t0)) / 1e6, nil
}

func (g *clGPU) ReleaseMark(m uintptr) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.marks[m]; ok {
		e.Release()
		delete(g.marks, m)
	}
}

func (g *clGPU) SMCount() int      { return g.ctx.Device.ComputeUnits }
func (g *clGPU) TensorCores() bool { return false }
func (g *clGPU) Name() string      { return g.ctx.Device.Name }

func (g *clGPU) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, k := range g.kernels {
		errs = append(errs, k.k.Release())
	}
	for _, e := range g.marks {
		errs = append(errs, e.Release())
	}
	for _, s := range g.scratch {
		if !s.IsNil() {
			errs = append(errs, g.freeBlock(s))
		}
	}
	return errors.Join(append(errs, g.ctx.Close())...)
}

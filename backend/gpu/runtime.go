package gpu

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// Opener opens device number index of a driver's kind.
type Opener func(index int) (Driver, error)

// Register makes a device kind available (backend.Register) whose devices
// a driver opens, each run by this runtime.
func Register(kind string, open Opener) {
	backend.Register(kind, opener(kind, open))
}

// RegisterNamed is Register for a kind of named devices
// (backend.RegisterNamed): names[i] is the device of index i.
func RegisterNamed(kind string, names []string, open Opener) {
	backend.RegisterNamed(kind, names, opener(kind, open))
}

func opener(kind string, open Opener) backend.Opener {
	return func(index int) (backend.Backend, error) {
		g, err := openDriver(kind, index, open)
		if err != nil {
			return nil, err
		}
		return New(backend.Device{Kind: kind, Index: index}, g), nil
	}
}

// openDriver opens device index of kind with open; tests put an emulated
// device in its place.
var openDriver = func(kind string, index int, open Opener) (Driver, error) { return open(index) }

// Buffer is a block of device memory holding n elements of one dtype.
type Buffer struct {
	dev   backend.Device
	dt    backend.DType
	n     int
	ptr   Ptr
	class int // the pool's size class of the block
}

// Device implements backend.Storage.
func (b *Buffer) Device() backend.Device { return b.dev }

// DType implements backend.Storage.
func (b *Buffer) DType() backend.DType { return b.dt }

// Len implements backend.Storage.
func (b *Buffer) Len() int { return b.n }

// Backend is one device's backend: the runtime over its driver.
type Backend struct {
	dev  backend.Device
	g    Driver
	mu   sync.Mutex // guards pool
	pool *pool
	tf32 atomic.Bool
	noLt atomic.Bool // cuBLASLt is absent or refused a product: no epilogues
	// noBGrad: cuBLASLt refused its bias-gradient epilogue (the others
	// may still serve).
	noBGrad atomic.Bool
	// noMMA turns the tensor-core attention kernels off (a test's switch,
	// to time their predecessors on the same device).
	noMMA atomic.Bool

	copied atomic.Int64
	total  atomic.Int64 // the device's memory size, once read

	// lnDone holds LayerNormBackward's counters, zero between launches
	// (kernels.LayerNormBackwardCounters); lnMu guards it.
	lnMu   sync.Mutex
	lnDone backend.Storage
}

// New runs the device dev on driver g.
func New(dev backend.Device, g Driver) *Backend {
	return &Backend{dev: dev, g: g, pool: newPool(g)}
}

// SetTF32 lets F32 matrix products use TF32 tensor cores (10-bit
// mantissas, F32 accumulation): much faster, slightly less exact. Off by
// default.
func (c *Backend) SetTF32(on bool) { c.tf32.Store(on) }

// SMCount implements kernels.SMCounter.
func (c *Backend) SMCount() int { return c.g.SMCount() }

// TensorCores implements kernels.TensorCorer.
func (c *Backend) TensorCores() bool { return c.g.TensorCores() && !c.noMMA.Load() }

// Device implements backend.Backend.
func (c *Backend) Device() backend.Device { return c.dev }

// fail panics with a device error; kernels return nothing, and tensor.Catch
// turns the panic back into an error.
func (c *Backend) fail(op string, err error) {
	panic(&backend.DeviceError{Dev: c.dev, Op: op, Err: err})
}

func (c *Backend) check(op string, err error) {
	if err != nil {
		c.fail(op, err)
	}
}

// Alloc implements backend.Backend.
func (c *Backend) Alloc(dt backend.DType, n int) backend.Storage {
	if n < 0 {
		c.fail("alloc", fmt.Errorf("%d elements", n))
	}
	c.mu.Lock()
	ptr, class, err := c.pool.alloc(n * dt.Size())
	c.mu.Unlock()
	c.check("alloc", err)
	return &Buffer{dev: c.dev, dt: dt, n: n, ptr: ptr, class: class}
}

// Free implements backend.Backend.
func (c *Backend) Free(s backend.Storage) {
	b := c.buf(s)
	c.mu.Lock()
	c.pool.free(b.ptr, b.class)
	c.mu.Unlock()
}

// ResetPeak implements backend.PeakResetter.
func (c *Backend) ResetPeak() {
	c.mu.Lock()
	c.pool.peak = c.pool.allocated
	c.mu.Unlock()
}

// MemStats implements backend.Backend.
func (c *Backend) MemStats() backend.MemStats {
	total := c.total.Load()
	if total == 0 {
		if _, t, err := c.g.MemInfo(); err == nil {
			total = int64(t)
			c.total.Store(total)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return backend.MemStats{Allocated: c.pool.allocated, Reserved: c.pool.reserved, Peak: c.pool.peak, Copied: c.copied.Load(), Total: total}
}

// EmptyCache returns the pool's cached blocks to the driver.
func (c *Backend) EmptyCache() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pool.release()
}

// Synchronize waits for every queued kernel and copy.
func (c *Backend) Synchronize() error { return c.g.Sync() }

func (c *Backend) buf(s backend.Storage) *Buffer {
	b, ok := s.(*Buffer)
	if !ok || b.dev != c.dev {
		c.fail("storage", fmt.Errorf("storage of %v used on %v", s.Device(), c.dev))
	}
	return b
}

// ptr is a Ref's place in device memory, or nil for an operand left out.
func (c *Backend) ptr(r backend.Ref) Ptr {
	if r.Nil() {
		return Ptr{}
	}
	b := c.buf(r.S)
	return b.ptr.Add(r.Off * b.dt.Size())
}

func (c *Backend) dt(r backend.Ref) backend.DType { return c.buf(r.S).dt }

// Launch implements kernels.Launcher.
func (c *Backend) Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[Ptr]) error {
	return c.g.Launch(kernel, grid, block, shared, args)
}

// scratch runs fn with a temporary F32 buffer of n elements. Work is queued
// in order on one stream, so the block can go back to the pool as soon as
// fn has queued its kernels.
func (c *Backend) scratch(n int, fn func(Ptr) error) error {
	s := c.Alloc(backend.F32, max(n, 1))
	defer c.Free(s)
	return fn(c.ptr(backend.Ref{S: s}))
}

// Upload implements backend.Backend.
func (c *Backend) Upload(dst backend.Ref, src []byte) {
	b := c.buf(dst.S)
	if len(src)%b.dt.Size() != 0 || dst.Off+len(src)/b.dt.Size() > b.n {
		c.fail("upload", fmt.Errorf("%d bytes at element %d of a %v buffer of %d", len(src), dst.Off, b.dt, b.n))
	}
	c.check("upload", c.g.HtoD(c.ptr(dst), src))
	c.copied.Add(int64(len(src)))
}

// CopyFrom implements backend.PeerCopier: from another CUDA device, the
// elements go device to device (MemStats.Copied counts host<->device
// bytes only, so it does not count them).
func (c *Backend) CopyFrom(dst backend.Ref, from backend.Backend, src backend.Ref, n int) bool {
	f, ok := from.(*Backend)
	if !ok || f == c {
		return false
	}
	d, s := c.buf(dst.S), f.buf(src.S)
	if d.dt != s.dt || n < 0 || dst.Off+n > d.n || src.Off+n > s.n {
		c.fail("copy_from", fmt.Errorf("%d elements from %v %v at %d of %d into %v at %d of %d", n, f.dev, s.dt, src.Off, s.n, d.dt, dst.Off, d.n))
	}
	err := c.g.PeerCopy(c.ptr(dst), f.g, f.ptr(src), n*d.dt.Size())
	if errors.Is(err, ErrNoPeer) {
		return false
	}
	c.check("copy_from", err)
	return true
}

// PinnedAlloc returns n bytes of page-locked host memory for UploadAsync.
// Free it with PinnedFree.
func (c *Backend) PinnedAlloc(n int) ([]byte, error) {
	b, err := c.g.HostAlloc(n)
	if err != nil {
		return nil, &backend.DeviceError{Dev: c.dev, Op: "pinned_alloc", Err: err}
	}
	return b, nil
}

// PinnedFree releases memory from PinnedAlloc.
func (c *Backend) PinnedFree(b []byte) error { return c.g.HostFree(b) }

// UploadAsync implements backend.AsyncUploader: it queues a copy of src,
// page-locked memory from PinnedAlloc, into dst on the copy stream, after
// the kernels already queued (dst may be a block they still read), and
// returns at once, so the copy overlaps the kernels queued next. Call the
// Upload's Ready before queuing kernels that read dst, and its Wait before
// changing src.
func (c *Backend) UploadAsync(dst backend.Ref, src []byte) backend.Upload {
	b := c.buf(dst.S)
	if len(src)%b.dt.Size() != 0 || dst.Off+len(src)/b.dt.Size() > b.n {
		c.fail("upload_async", fmt.Errorf("%d bytes at element %d of a %v buffer of %d", len(src), dst.Off, b.dt, b.n))
	}
	u, err := c.g.HtoDAsync(c.ptr(dst), src)
	c.check("upload_async", err)
	c.copied.Add(int64(len(src)))
	return u
}

// Download implements backend.Backend.
func (c *Backend) Download(dst []byte, src backend.Ref) {
	b := c.buf(src.S)
	if len(dst)%b.dt.Size() != 0 || src.Off+len(dst)/b.dt.Size() > b.n {
		c.fail("download", fmt.Errorf("%d bytes at element %d of a %v buffer of %d", len(dst), src.Off, b.dt, b.n))
	}
	c.check("download", c.g.DtoH(dst, c.ptr(src)))
	c.copied.Add(int64(len(dst)))
}

// Copy implements backend.Backend.
func (c *Backend) Copy(dst, src backend.Ref, n int) {
	d, s := c.buf(dst.S), c.buf(src.S)
	if d.dt != s.dt {
		c.fail("copy", fmt.Errorf("from %v to %v", s.dt, d.dt))
	}
	if n == 0 {
		return
	}
	c.check("copy", c.g.DtoD(c.ptr(dst), c.ptr(src), n*d.dt.Size()))
}

// Cast implements backend.Backend.
func (c *Backend) Cast(dst, src backend.Ref, n int) {
	if c.dt(dst) == c.dt(src) {
		c.Copy(dst, src, n)
		return
	}
	c.check("cast", kernels.Cast(c, c.dt(dst), c.dt(src), c.ptr(dst), c.ptr(src), n))
}

// Fill implements backend.Backend.
func (c *Backend) Fill(dst backend.Ref, v float32, n int) {
	c.check("fill", kernels.Fill(c, c.dt(dst), c.ptr(dst), v, n))
}

// MatMul implements backend.Backend through the driver's GEMM (cuBLAS's,
// CLBlast's); a bias is first
// broadcast into C (scaled by beta), then the product is added. F32
// operands to be rounded (p.Round) use cuBLAS's fast compute modes
// (ComputeRoundBF16, ComputeRoundF16: cuBLAS's CUBLAS_COMPUTE_32F_FAST_16BF,
// _16F), which round them to the 16-bit type
// as they are loaded onto the tensor cores: no cast kernel, and half the
// traffic of a cast followed by a 16-bit product.
func (c *Backend) MatMul(p backend.MatMul, a, b, cc, bias backend.Ref) {
	if p.Batch == 0 || p.M == 0 || p.N == 0 {
		return
	}
	at, bt, ct := c.dt(a), c.dt(b), c.dt(cc)
	if !productTypes(at, bt, ct) {
		c.fail("matmul", fmt.Errorf("operands %v @ %v into %v", at, bt, ct))
	}
	if !bias.Nil() {
		if p.StrideC != p.M*p.N && p.Batch > 1 {
			c.fail("matmul", fmt.Errorf("a bias needs contiguous outputs (stride %d, %d×%d)", p.StrideC, p.M, p.N))
		}
		if c.dt(bias) != ct {
			c.fail("matmul", fmt.Errorf("a %v bias for a %v output (want the output's dtype)", c.dt(bias), ct))
		}
		// One product with cuBLASLt's bias epilogue where it takes it
		// (a Linear's forward: one matrix, C overwritten).
		if p.Batch == 1 && p.Beta == 0 && p.Alpha == 1 && p.K > 0 && p.M > 0 &&
			c.ltProduct("matmul", p, a, b, cc, backend.Ref{}, bias, EpilogueBias) {
			return
		}
		c.check("matmul bias", kernels.BiasRows(c, ct, c.ptr(cc), c.ptr(bias), p.Beta, p.Batch*p.M, p.N))
		p.Beta = 1
	}
	if p.K == 0 { // an empty product: C = beta*C
		if bias.Nil() {
			c.check("matmul", kernels.Scale(c, ct, c.ptr(cc), c.ptr(cc), p.Beta, p.Batch*p.M*p.N))
		}
		return
	}
	for _, v := range []int{p.M, p.N, p.K, p.Batch, p.StrideA, p.StrideB, p.StrideC} {
		if v > math.MaxInt32 { // cuBLAS takes C ints
			c.fail("matmul", fmt.Errorf("size %d exceeds cuBLAS's 32-bit limits (%+v)", v, p))
		}
	}
	g := productFor(p, c.ptr(a), c.ptr(b), c.ptr(cc), at, ct, c.compute(p, at))
	c.check("matmul", c.g.Gemm(g))
}

// productTypes reports whether a product takes operands stored as at and
// bt into an output stored as ct: one operand type among F32, BF16 and
// F16, into F32, or into BF16 from BF16 operands (bf16 activations).
func productTypes(at, bt, ct backend.DType) bool {
	if at != bt || (at != backend.F32 && at != backend.BF16 && at != backend.F16) {
		return false
	}
	return ct == backend.F32 || (ct == backend.BF16 && at == backend.BF16)
}

// MatMulBiasGrad implements backend.BiasGradProducts with cuBLASLt's
// BGRADA epilogue: in the column-major product cuBLAS computes, fleet's B
// is the A operand, and the epilogue sums it over K into the bias.
func (c *Backend) MatMulBiasGrad(p backend.MatMul, a, b, cc, dbias backend.Ref) bool {
	if c.noLt.Load() || c.noBGrad.Load() || p.Batch != 1 || p.Alpha != 1 || p.TransB || p.M == 0 || p.N == 0 || p.K == 0 {
		return false
	}
	at, bt := c.dt(a), c.dt(b)
	if at != bt || c.dt(cc) != backend.F32 || c.dt(dbias) != backend.F32 {
		return false
	}
	for _, v := range []int{p.M, p.N, p.K} {
		if v > math.MaxInt32 {
			return false
		}
	}
	m := c.epilogueProduct(p, a, b, cc, at, EpilogueBGradA)
	m.Bias = c.ptr(dbias)
	if err := c.g.GemmEpilogue(m); err != nil {
		if ltRefused(err) {
			c.noBGrad.Store(true) // kernels sum the bias gradient from now on
			return false
		}
		c.fail("matmul_bias_grad", err)
	}
	return true
}

// GELUEpilogues implements backend.GELUProducts: no product has found
// cuBLASLt missing or unwilling yet (a device without it finds out on its
// first MLP, which then falls back).
func (c *Backend) GELUEpilogues() bool { return !c.noLt.Load() }

// MatMulGELU implements backend.GELUProducts with cuBLASLt's GELU_AUX(_BIAS)
// epilogue. Where cuBLASLt refuses the product, it falls back to a product
// and a GELU kernel, and GELUEpilogues then reports false.
func (c *Backend) MatMulGELU(p backend.MatMul, a, b, out, pre, bias backend.Ref) {
	ep := EpilogueGELUAux
	if !bias.Nil() {
		ep = EpilogueGELUAuxBias
	}
	if c.ltProduct("matmul_gelu", p, a, b, out, pre, bias, ep) {
		return
	}
	c.MatMul(p, a, b, pre, bias)
	c.GELU(out, pre, p.M*p.N)
}

// MatMulGELUGrad implements backend.GELUProducts with cuBLASLt's DGELU
// epilogue, falling back as MatMulGELU does.
func (c *Backend) MatMulGELUGrad(p backend.MatMul, a, b, out, pre backend.Ref) {
	if c.ltProduct("matmul_gelu_grad", p, a, b, out, pre, backend.Ref{}, EpilogueDGELU) {
		return
	}
	c.MatMul(p, a, b, out, backend.Ref{})
	c.GELUBackward(out, pre, out, p.M*p.N)
}

// ltProduct queues a product with epilogue ep through the driver (cuBLASLt
// on CUDA), mapped onto its column-major form as productFor maps MatMul
// (aux is pre, with the output's leading dimension; the bias runs along
// the output's columns, which are the column-major product's rows). It
// reports false, having queued nothing, where the driver has no
// epilogues or refuses the product (ErrRefused); it fails on other
// errors.
func (c *Backend) ltProduct(op string, p backend.MatMul, a, b, out, aux, bias backend.Ref, ep Epilogue) bool {
	if c.noLt.Load() {
		return false
	}
	at, bt, ot := c.dt(a), c.dt(b), c.dt(out)
	if p.Batch != 1 || p.Beta != 0 || p.Alpha != 1 || !productTypes(at, bt, ot) || (!aux.Nil() && c.dt(aux) != ot) || (!bias.Nil() && c.dt(bias) != ot) {
		c.fail(op, fmt.Errorf("want one product, alpha 1, beta 0, one operand type, and aux and bias of the output's type (%+v, %v @ %v into %v)", p, at, bt, ot))
	}
	if p.M == 0 || p.N == 0 {
		return true
	}
	for _, v := range []int{p.M, p.N, p.K} {
		if v > math.MaxInt32 {
			c.fail(op, fmt.Errorf("size %d exceeds cuBLAS's 32-bit limits (%+v)", v, p))
		}
	}
	m := c.epilogueProduct(p, a, b, out, at, ep)
	if !aux.Nil() {
		m.Aux, m.AuxLD = c.ptr(aux), p.N
	}
	if !bias.Nil() {
		m.Bias = c.ptr(bias)
	}
	if err := c.g.GemmEpilogue(m); err != nil {
		if ltRefused(err) { // the kernels do it instead
			c.noLt.Store(true)
			return false
		}
		c.fail(op, err)
	}
	return true
}

// epilogueProduct is product p (one matrix, alpha 1, C overwritten) of
// operands stored as at with epilogue ep: mapped onto its column-major
// form as productFor maps MatMul.
func (c *Backend) epilogueProduct(p backend.MatMul, a, b, out backend.Ref, at backend.DType, ep Epilogue) EpilogueProduct {
	g := productFor(p, c.ptr(a), c.ptr(b), c.ptr(out), at, c.dt(out), c.compute(p, at))
	g.Alpha, g.Batch, g.StrideA, g.StrideB, g.StrideC = 1, 1, 0, 0, 0
	return EpilogueProduct{Product: g, Epilogue: ep}
}

// ltRefused reports whether err is the driver saying no to an epilogue
// product: it has none, or refused this one before queuing anything (not
// supported, or a layout it will not take, such as an aux leading
// dimension it wants aligned).
func ltRefused(err error) bool {
	return errors.Is(err, ErrNoEpilogues) || errors.Is(err, ErrRefused)
}

// compute is the compute mode of product p of operands stored as at.
func (c *Backend) compute(p backend.MatMul, at backend.DType) Compute {
	switch {
	case at == backend.F32 && p.Rounds() == backend.BF16:
		return ComputeRoundBF16
	case at == backend.F32 && p.Rounds() == backend.F16:
		return ComputeRoundF16
	case at == backend.F32 && c.tf32.Load():
		return ComputeTF32
	}
	return ComputeF32
}

// productFor maps a row-major product onto the BLAS libraries'
// column-major one: a row-major matrix read column-major is its
// transpose, so row-major C = op(A)·op(B) is computed as column-major
// Cᵀ = op(B)ᵀ·op(A)ᵀ, with A and B (and M and N) swapped.
func productFor(p backend.MatMul, a, b, c Ptr, dt, ct backend.DType, compute Compute) Product {
	g := Product{
		M: p.N, N: p.M, K: p.K, Alpha: p.Alpha, Beta: p.Beta,
		A: b, B: a, C: c, AType: dt, BType: dt, CType: ct, LDC: p.N,
		StrideA: int64(p.StrideB), StrideB: int64(p.StrideA), StrideC: int64(p.StrideC),
		Batch: p.Batch, Compute: compute,
	}
	if p.TransB { // B is stored N×K: read column-major it is op(B) (K×N)
		g.TransA, g.LDA = Transposed, p.K
	} else { // B is stored K×N: read column-major it is op(B)ᵀ
		g.TransA, g.LDA = NoTranspose, p.N
	}
	if p.TransA { // A is stored K×M: read column-major it is op(A)
		g.TransB, g.LDB = Transposed, p.M
	} else { // A is stored M×K: read column-major it is op(A)ᵀ
		g.TransB, g.LDB = NoTranspose, p.K
	}
	return g
}

// Binary implements backend.Backend.
func (c *Backend) Binary(op backend.BinaryOp, dst, a, b backend.Ref, n int) {
	c.check("binary", kernels.Binary(c, c.dt(dst), op, c.ptr(dst), c.ptr(a), c.ptr(b), n))
}

// Axpy implements backend.Backend.
func (c *Backend) Axpy(dst, x backend.Ref, alpha float32, n int) {
	c.check("axpy", kernels.Axpy(c, c.dt(dst), c.ptr(dst), c.ptr(x), alpha, n))
}

// Scale implements backend.Backend.
func (c *Backend) Scale(dst, src backend.Ref, alpha float32, n int) {
	c.check("scale", kernels.Scale(c, c.dt(dst), c.ptr(dst), c.ptr(src), alpha, n))
}

// Unary implements backend.Backend.
func (c *Backend) Unary(op backend.UnaryOp, dst, src backend.Ref, n int) {
	c.check("unary", kernels.Unary(c, c.dt(dst), op, c.ptr(dst), c.ptr(src), n))
}

// SumRows implements backend.Backend.
func (c *Backend) SumRows(dst, src backend.Ref, rows, cols int, beta float32) {
	c.check("sum_rows", c.scratch(kernels.SumRowsScratch(rows, cols), func(s Ptr) error {
		return kernels.SumRows(c, c.dt(src), c.ptr(dst), c.ptr(src), s, rows, cols, beta)
	}))
}

// SumCols implements backend.Backend.
func (c *Backend) SumCols(dst, src backend.Ref, rows, cols int, alpha float32) {
	c.check("sum_cols", kernels.SumCols(c, c.dt(src), c.ptr(dst), c.ptr(src), rows, cols, alpha))
}

// SumSquares implements backend.Backend.
func (c *Backend) SumSquares(dst, src backend.Ref, n int, beta float32) {
	c.check("sum_squares", c.scratch(kernels.SumSquaresScratch(n), func(s Ptr) error {
		return kernels.SumSquares(c, c.dt(src), c.ptr(dst), c.ptr(src), s, n, beta)
	}))
}

// Softmax implements backend.Backend.
func (c *Backend) Softmax(dst, src backend.Ref, rows, cols int) {
	c.check("softmax", kernels.Softmax(c, c.dt(src), c.ptr(dst), c.ptr(src), rows, cols))
}

// SoftmaxBackward implements backend.Backend.
func (c *Backend) SoftmaxBackward(dx, y, dy backend.Ref, rows, cols int) {
	c.check("softmax_backward", kernels.SoftmaxBackward(c, c.dt(y), c.ptr(dx), c.ptr(y), c.ptr(dy), rows, cols))
}

// LayerNorm implements backend.Backend.
func (c *Backend) LayerNorm(out, mean, rstd, x, w, b backend.Ref, rows, cols int, eps float32) {
	c.check("layer_norm", kernels.LayerNorm(c, c.dt(x), c.ptr(out), c.ptr(mean), c.ptr(rstd), c.ptr(x), c.ptr(w), c.ptr(b), rows, cols, eps))
}

// LayerNormBackward implements backend.Backend: one launch, with the
// device's counters (lnCounters).
func (c *Backend) LayerNormBackward(dx, dres, dw, db, dout, x, mean, rstd, w backend.Ref, rows, cols int, drop backend.DropoutOut) {
	done := c.lnCounters(kernels.LayerNormBackwardCounters(cols))
	c.check("layer_norm_backward", c.scratch(kernels.LayerNormBackwardScratch(rows, cols), func(s Ptr) error {
		return kernels.LayerNormBackward(c, c.dt(x), c.ptr(dx), c.ptr(dres), c.ptr(dw), c.ptr(db), c.ptr(dout), c.ptr(x), c.ptr(mean), c.ptr(rstd), c.ptr(w), s, done, rows, cols,
			c.ptr(drop.Dst), drop.Mask, c.ptr(drop.Mask.Base))
	}))
}

// lnCounters returns at least n of LayerNormBackward's counters, zero:
// made (zeroed by a fill) the first time, and again, larger, for wider
// rows; every launch leaves them zero for the next.
func (c *Backend) lnCounters(n int) Ptr {
	c.lnMu.Lock()
	defer c.lnMu.Unlock()
	if c.lnDone == nil || c.lnDone.Len() < n {
		if c.lnDone != nil {
			c.Free(c.lnDone)
		}
		c.lnDone = c.Alloc(backend.I32, n)
		c.Fill(backend.Ref{S: c.lnDone}, 0, n)
	}
	return c.ptr(backend.Ref{S: c.lnDone})
}

// DropoutAdd implements backend.Backend: the mask is drawn on the device.
func (c *Backend) DropoutAdd(out, x, y backend.Ref, n int, m backend.DropoutMask) {
	c.check("dropout_add", kernels.DropoutAdd(c, c.dt(y), c.ptr(out), c.ptr(x), c.ptr(y), n, m, c.ptr(m.Base)))
}

// AddLayerNorm implements backend.Backend.
func (c *Backend) AddLayerNorm(sum, out, mean, rstd, x, y, w, b backend.Ref, rows, cols int, eps float32, m backend.DropoutMask) {
	c.check("add_layer_norm", kernels.AddLayerNorm(c, c.dt(y), c.ptr(sum), c.ptr(out), c.ptr(mean), c.ptr(rstd), c.ptr(x), c.ptr(y), c.ptr(w), c.ptr(b),
		rows, cols, eps, m, c.ptr(m.Base)))
}

// StepDropoutKey implements backend.Backend.
func (c *Backend) StepDropoutKey(key, stats backend.Ref, seed uint64) {
	c.check("step_dropout_key", kernels.StepDropoutKey(c, c.ptr(key), c.ptr(stats), seed))
}

// GELU implements backend.Backend.
func (c *Backend) GELU(dst, src backend.Ref, n int) {
	c.check("gelu", kernels.GELU(c, c.dt(src), c.ptr(dst), c.ptr(src), n))
}

// BiasGELU implements backend.BiasGELUer: the MLP's bias and GELU where
// cuBLASLt's epilogue cannot take them.
func (c *Backend) BiasGELU(pre, h, bias backend.Ref, rows, cols int) {
	c.check("bias_gelu", kernels.BiasGELU(c, c.dt(pre), c.ptr(pre), c.ptr(h), c.ptr(bias), rows, cols))
}

// GELUBackward implements backend.Backend.
func (c *Backend) GELUBackward(dx, x, dy backend.Ref, n int) {
	c.check("gelu_backward", kernels.GELUBackward(c, c.dt(x), c.ptr(dx), c.ptr(x), c.ptr(dy), n))
}

// Attention implements backend.Backend.
func (c *Backend) Attention(p backend.Attention, out, saved, qkv backend.Ref) {
	c.check("attention", kernels.AttentionAt(c, c.dt(qkv), p, c.ptr(out), c.ptr(saved), c.ptr(qkv), c.ptr(p.Drop.Base)))
}

// AttentionBackward implements backend.Backend.
func (c *Backend) AttentionBackward(p backend.Attention, dqkv, dout, out, saved, qkv backend.Ref) {
	c.check("attention_backward", c.scratch(kernels.AttentionBackwardScratch(p), func(s Ptr) error {
		return kernels.AttentionBackwardAt(c, c.dt(qkv), p, c.ptr(dqkv), c.ptr(dout), c.ptr(out), c.ptr(saved), c.ptr(qkv), s, c.ptr(p.Drop.Base))
	}))
}

// AttentionKV implements backend.Backend.
func (c *Backend) AttentionKV(p backend.AttentionKV, out, qkv, kc, vc backend.Ref) {
	c.check("attention_kv", kernels.AttentionKV(c, c.dt(qkv), p, c.ptr(out), c.ptr(qkv), c.ptr(kc), c.ptr(vc)))
}

// CrossEntropy implements backend.Backend.
func (c *Backend) CrossEntropy(losses, lse, logits, targets backend.Ref, n, v int) {
	c.check("cross_entropy", kernels.CrossEntropy(c, c.dt(logits), c.ptr(losses), c.ptr(lse), c.ptr(logits), c.ptr(targets), n, v))
}

// CrossEntropyFused implements backend.Backend.
func (c *Backend) CrossEntropyFused(losses, dlogits, logits, targets, dloss backend.Ref, scale float32, n, v int) {
	c.check("cross_entropy_fused", kernels.CrossEntropyFused(c, c.dt(logits), c.ptr(losses), c.ptr(dlogits), c.ptr(logits), c.ptr(targets), c.ptr(dloss), scale, n, v))
}

// CrossEntropyBackward implements backend.Backend.
func (c *Backend) CrossEntropyBackward(dlogits, logits, lse, targets, dloss backend.Ref, scale float32, n, v int) {
	c.check("cross_entropy_backward", kernels.CrossEntropyBackward(c, c.dt(logits), c.ptr(dlogits), c.ptr(logits), c.ptr(lse), c.ptr(targets), c.ptr(dloss), scale, n, v))
}

// Embedding implements backend.Backend. Ids outside the table give zero rows.
func (c *Backend) Embedding(out, table, ids backend.Ref, n, dim int) {
	if c.dt(table) != backend.F32 {
		c.fail("embedding", fmt.Errorf("a %v table (the kernels read F32 tables)", c.dt(table)))
	}
	c.check("embedding", kernels.Embedding(c, c.dt(out), c.ptr(out), c.ptr(table), c.ptr(ids), n, dim, c.rowsOf(table, dim)))
}

// EmbeddingBackward implements backend.Backend.
func (c *Backend) EmbeddingBackward(dtable, dout, ids backend.Ref, n, dim int) {
	if c.dt(dtable) != backend.F32 {
		c.fail("embedding_backward", fmt.Errorf("a %v table gradient (the kernels accumulate in F32)", c.dt(dtable)))
	}
	c.check("embedding_backward", kernels.EmbeddingBackward(c, c.dt(dout), c.ptr(dtable), c.ptr(dout), c.ptr(ids), n, dim, c.rowsOf(dtable, dim)))
}

// rowsOf is how many rows of dim elements a table holds from its offset on.
func (c *Backend) rowsOf(r backend.Ref, dim int) int {
	if dim == 0 {
		return 0
	}
	return (c.buf(r.S).n - r.Off) / dim
}

// AdamW implements backend.Backend.
func (c *Backend) AdamW(p backend.AdamW, param, grad, m, v backend.Ref, n int) {
	c.check("adamw", kernels.AdamWSched(c, p, c.ptr(param), c.ptr(grad), c.ptr(m), c.ptr(v), c.ptr(p.GradScale), c.ptr(p.Sched), c.ptr(p.Half), n))
}

// StepClock implements backend.Backend.
func (c *Backend) StepClock(stats, sched, lrs backend.Ref, nlr int, beta1, beta2 float32) {
	c.check("step_clock", kernels.StepClock(c, c.ptr(stats), c.ptr(sched), c.ptr(lrs), nlr, beta1, beta2))
}

// ScalerCoef implements backend.Backend.
func (c *Backend) ScalerCoef(coef, stats, sumsq backend.Ref, maxNorm float64, step int, s backend.Scaler) {
	c.check("scaler_coef", kernels.ScalerCoef(c, c.ptr(coef), c.ptr(stats), c.ptr(sumsq), c.ptr(s.State), c.ptr(s.LRs), maxNorm, step, s))
}

// TrackLoss implements backend.Backend.
func (c *Backend) TrackLoss(stats, x backend.Ref, scale float32, step int) {
	c.check("track_loss", kernels.TrackLoss(c, c.ptr(stats), c.ptr(x), scale, step))
}

// ClipCoef implements backend.Backend.
func (c *Backend) ClipCoef(coef, stats, sumsq backend.Ref, maxNorm float64, step int) {
	c.check("clip_coef", kernels.ClipCoef(c, c.ptr(coef), c.ptr(stats), c.ptr(sumsq), maxNorm, step))
}

var _ backend.Backend = (*Backend)(nil)

// Mark implements backend.Timer: an event on the compute stream.
func (c *Backend) Mark() (backend.Mark, error) {
	m, err := c.g.Mark()
	return backend.Mark(m), err
}

// Elapsed implements backend.Timer.
func (c *Backend) Elapsed(from, to backend.Mark) (float64, error) {
	return c.g.Elapsed(uintptr(from), uintptr(to))
}

// ReleaseMark implements backend.Timer.
func (c *Backend) ReleaseMark(m backend.Mark) { c.g.ReleaseMark(uintptr(m)) }

// Address implements backend.Queue: the device address of r's element.
// The driver says what the address is; a device without addresses
// (OpenCL) fails as any device call does.
func (c *Backend) Address(r backend.Ref) uintptr {
	b := c.buf(r.S)
	a, err := c.g.Address(b.ptr.Add(r.Off * b.dt.Size()))
	c.check("address", err)
	return a
}

// OnQueue implements backend.Queue: fn runs with the device's context
// current on the calling thread and the compute stream, after the work
// queued so far, while no other call of the device runs.
func (c *Backend) OnQueue(fn func(stream uintptr) error) error { return c.g.OnStream(fn) }

// OnCommQueue implements backend.CommQueue.
func (c *Backend) OnCommQueue(fn func(stream uintptr) error) error { return c.g.OnCommStream(fn) }

// BeginCapture implements backend.Grapher. The blocks the pool hands out
// until EndCapture belong to the graphs from then on (see pool).
func (c *Backend) BeginCapture() error {
	if err := c.g.BeginCapture(); err != nil {
		return err
	}
	c.mu.Lock()
	c.pool.capture(true)
	c.mu.Unlock()
	return nil
}

// EndCapture implements backend.Grapher.
func (c *Backend) EndCapture() (backend.Graph, error) {
	c.mu.Lock()
	c.pool.capture(false)
	c.mu.Unlock()
	g, err := c.g.EndCapture()
	if err != nil {
		c.mu.Lock()
		c.pool.unclaimed() // no graph uses what the failed capture was handed
		c.mu.Unlock()
		return nil, err
	}
	c.mu.Lock()
	c.pool.graphMade()
	c.mu.Unlock()
	return &graph{Graph: g, c: c}, nil
}

// graph is a captured graph of c's; freeing the last of them returns
// their memory to the pool.
type graph struct {
	backend.Graph
	c *Backend
}

func (g *graph) Free() error {
	err := g.Graph.Free()
	g.c.mu.Lock()
	g.c.pool.graphFreed()
	g.c.mu.Unlock()
	return err
}

// JoinComm implements backend.CommQueue.
func (c *Backend) JoinComm() (backend.CommProbe, error) { return c.g.JoinComm() }

// Driver is the driver the device runs on.
func (c *Backend) Driver() Driver { return c.g }

// RoundsOperands implements backend.OperandRounder: the drivers' products
// round F32 operands in their rounding compute modes (see MatMul).
func (c *Backend) RoundsOperands() bool { return true }

// Simulated implements backend.Simulated: whether the driver is a
// simulated device's.
func (c *Backend) Simulated() bool {
	s, ok := c.g.(interface{ Simulated() bool })
	return ok && s.Simulated()
}

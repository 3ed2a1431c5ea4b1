package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/emu"
	cudakernels "github.com/fleetml/fleet/backend/gpu/cuda/kernels"
	"github.com/fleetml/fleet/backend/gpu/kernels"
)

// fakeGPU is a device made of host memory: one Go byte slice per block,
// numbered by its own handles, cuBLAS's column-major GEMM written out in
// Go, and kernel launches handed to launchFn (the emulation harness, when
// the test has one). It checks what a real device would refuse: unknown
// or freed blocks and accesses past a block's end.
type fakeGPU struct {
	limit    int // bytes the device can hold
	used     int
	next     uint64 // the next block's handle
	blocks   map[uint64]*emu.Buffer
	launchFn func(kernel string, grid, block [3]int, shared int, args []any) error
	launches []string
	allocs   int
	// hostCopies counts copies between the host and the device, and
	// peerCopies copies into it from another device.
	hostCopies, peerCopies int
	gemms                  int  // cuBLAS products
	ltMatmuls              int  // cuBLASLt products, tried
	noLt                   bool // no cuBLASLt: ltMatmul fails with ErrNoEpilogues
	noTensorCores          bool // a device before compute capability 8.0
	marks                  []time.Time
	capture                *[]func() error // while capturing: the work recorded, not run
}

func newFakeGPU(limit int) *fakeGPU {
	return &fakeGPU{limit: limit, next: 1, blocks: map[uint64]*emu.Buffer{}}
}

// block adds a block of bytes, uninitialised (it reads as NaN).
func (f *fakeGPU) block(bytes int) Ptr {
	p := Ptr{Block: f.next}
	f.next++
	f.blocks[p.Block] = emu.Poison(emu.U8, bytes)
	return p
}

func (f *fakeGPU) MemAlloc(bytes int) (Ptr, error) {
	if f.used+bytes > f.limit {
		return Ptr{}, fmt.Errorf("%w (fake device: %d of %d bytes used)", backend.ErrOutOfMemory, f.used, f.limit)
	}
	p := f.block(bytes)
	f.used += bytes
	f.allocs++
	return p, nil
}

func (f *fakeGPU) MemFree(p Ptr) error {
	b, ok := f.blocks[p.Block]
	if !ok || p.Off != 0 {
		return fmt.Errorf("fake device: free of %+v, not a block", p)
	}
	f.used -= b.Len()
	b.Free()
	delete(f.blocks, p.Block)
	return nil
}

func (f *fakeGPU) MemInfo() (uint64, uint64, error) {
	return uint64(f.limit - f.used), uint64(f.limit), nil
}

// mem returns n bytes at p, which must lie inside its block.
func (f *fakeGPU) mem(p Ptr, n int) ([]byte, error) {
	blk, ok := f.blocks[p.Block]
	if !ok {
		return nil, fmt.Errorf("fake device: %+v is in no block", p)
	}
	b := blk.Bytes()
	if p.Off < 0 || p.Off+n > len(b) {
		return nil, fmt.Errorf("fake device: %d bytes at offset %d run past block %d of %d bytes", n, p.Off, p.Block, len(b))
	}
	return b[p.Off : p.Off+n], nil
}

// view turns p into the emulator's view of its block.
func (f *fakeGPU) view(p Ptr) (emu.View, error) {
	blk, ok := f.blocks[p.Block]
	if !ok || p.Off < 0 || p.Off > blk.Len() {
		return emu.View{}, fmt.Errorf("fake device: %+v is in no block", p)
	}
	return blk.At(p.Off), nil
}

// Address is p as a made-up address: no test hands it to a library.
func (f *fakeGPU) Address(p Ptr) (uintptr, error) { return uintptr(p.Block<<32) + uintptr(p.Off), nil }

// withEmulator makes f run kernels under the emulation harness, building
// every kernel file; it skips the test where the harness cannot build.
func (f *fakeGPU) withEmulator(t testing.TB) *fakeGPU {
	mods := map[string]*emu.Module{}
	for _, file := range cudakernels.Files() {
		m := emu.MustBuild(t, file)
		for _, k := range m.Kernels() {
			mods[k] = m
		}
	}
	f.launchFn = func(kernel string, grid, block [3]int, shared int, args []any) error {
		m := mods[kernel]
		if m == nil {
			return fmt.Errorf("fake device: no kernel %s", kernel)
		}
		conv := make([]any, len(args))
		for i, a := range args {
			conv[i] = a
			if p, ok := a.(Ptr); ok {
				v, err := f.view(p)
				if err != nil {
					return fmt.Errorf("%s argument %d: %w", kernel, i, err)
				}
				conv[i] = v
			}
		}
		return m.Launch(kernel, grid, block, shared, conv...)
	}
	return f
}

func (f *fakeGPU) HtoD(dst Ptr, src []byte) error {
	f.hostCopies++
	m, err := f.mem(dst, len(src))
	if err == nil {
		copy(m, src)
	}
	return err
}

func (f *fakeGPU) DtoH(dst []byte, src Ptr) error {
	f.hostCopies++
	m, err := f.mem(src, len(dst))
	if err == nil {
		copy(dst, m)
	}
	return err
}

func (f *fakeGPU) DtoD(dst, src Ptr, n int) error {
	if f.capture != nil { // captured, as a device-to-device copy is on a GPU
		*f.capture = append(*f.capture, func() error { return f.DtoD(dst, src, n) })
		return nil
	}
	d, err := f.mem(dst, n)
	if err != nil {
		return err
	}
	s, err := f.mem(src, n)
	if err == nil {
		copy(d, s)
	}
	return err
}

// peerCopy copies at once from another fake device: the fake devices run
// everything as it is queued, so stream order holds.
func (f *fakeGPU) PeerCopy(dst Ptr, from Driver, src Ptr, n int) error {
	o, ok := from.(*fakeGPU)
	if !ok {
		return ErrNoPeer
	}
	d, err := f.mem(dst, n)
	if err != nil {
		return err
	}
	s, err := o.mem(src, n)
	if err != nil {
		return fmt.Errorf("the source device: %w", err)
	}
	copy(d, s)
	f.peerCopies++
	return nil
}

func (f *fakeGPU) Launch(kernel string, grid, block [3]int, shared int, args kernels.Args[Ptr]) error {
	if f.capture != nil {
		*f.capture = append(*f.capture, func() error { return f.Launch(kernel, grid, block, shared, args) })
		return nil
	}
	f.launches = append(f.launches, kernel)
	if f.launchFn == nil {
		return fmt.Errorf("fake device: cannot run kernel %s", kernel)
	}
	return f.launchFn(kernel, grid, block, shared, args.Values())
}

// gemm is cublasGemmStridedBatchedEx's definition, column-major:
// C[i + j·ldc] = α·Σ_l op(A)(i,l)·op(B)(l,j) + β·C[i + j·ldc] (C unread
// when β = 0), for each matrix of the batch.
func (f *fakeGPU) Gemm(g Product) error {
	if f.capture != nil {
		*f.capture = append(*f.capture, func() error { return f.Gemm(g) })
		return nil
	}
	f.gemms++
	switch g.Compute {
	case ComputeF32, ComputeTF32, ComputeRoundBF16, ComputeRoundF16:
	default:
		return fmt.Errorf("fake device: compute type %d", g.Compute)
	}
	if (g.CType != backend.F32 && (g.CType != backend.BF16 || g.AType != backend.BF16)) || g.AType != g.BType {
		return fmt.Errorf("fake device: types %d %d -> %d", g.AType, g.BType, g.CType)
	}
	csize := 4 // C is F32, or BF16 (bf16 activations: read widened, the sum rounded once)
	if g.CType == backend.BF16 {
		csize = 2
	}
	size := 4
	if g.AType == backend.BF16 {
		size = 2
	}
	// Extents each operand must have, as cuBLAS reads them.
	rowsA, colsA := g.M, g.K
	if g.TransA == Transposed {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB == Transposed {
		rowsB, colsB = g.N, g.K
	}
	if g.LDA < max(1, rowsA) || g.LDB < max(1, rowsB) || g.LDC < max(1, g.M) {
		return fmt.Errorf("fake device: leading dimensions %d %d %d too small for %d, %d, %d rows", g.LDA, g.LDB, g.LDC, rowsA, rowsB, g.M)
	}
	span := func(ld, cols int) int { return (ld*(cols-1) + ld) }
	for bi := 0; bi < g.Batch; bi++ {
		a, err := f.mem(g.A.Add(bi*int(g.StrideA)*size), span(g.LDA, colsA)*size)
		if err != nil {
			return fmt.Errorf("A: %w", err)
		}
		b, err := f.mem(g.B.Add(bi*int(g.StrideB)*size), span(g.LDB, colsB)*size)
		if err != nil {
			return fmt.Errorf("B: %w", err)
		}
		c, err := f.mem(g.C.Add(bi*int(g.StrideC)*csize), span(g.LDC, g.N)*csize)
		if err != nil {
			return fmt.Errorf("C: %w", err)
		}
		at := func(m []byte, k int) float64 {
			if size == 2 {
				return float64(backend.BF16ToF32(binary.LittleEndian.Uint16(m[2*k:])))
			}
			v := math.Float32frombits(binary.LittleEndian.Uint32(m[4*k:]))
			switch g.Compute { // F32 operands rounded as they are read
			case ComputeRoundBF16:
				v = backend.BF16ToF32(backend.F32ToBF16(v))
			case ComputeRoundF16:
				v = backend.F16ToF32(backend.F32ToF16(v))
			}
			return float64(v)
		}
		for j := 0; j < g.N; j++ {
			for i := 0; i < g.M; i++ {
				var s float64
				for l := 0; l < g.K; l++ {
					ai := i + l*g.LDA
					if g.TransA == Transposed {
						ai = l + i*g.LDA
					}
					bi := l + j*g.LDB
					if g.TransB == Transposed {
						bi = j + l*g.LDB
					}
					s += at(a, ai) * at(b, bi)
				}
				v := float64(g.Alpha) * s
				k := i + j*g.LDC
				if csize == 2 {
					if g.Beta != 0 {
						v += float64(g.Beta) * float64(backend.BF16ToF32(binary.LittleEndian.Uint16(c[2*k:])))
					}
					binary.LittleEndian.PutUint16(c[2*k:], backend.F32ToBF16(float32(v)))
					continue
				}
				if g.Beta != 0 {
					v += float64(g.Beta) * float64(math.Float32frombits(binary.LittleEndian.Uint32(c[4*k:])))
				}
				binary.LittleEndian.PutUint32(c[4*k:], math.Float32bits(float32(v)))
			}
		}
	}
	return nil
}

// ltMatmul is cublasLtMatmul's definition for the epilogues fleet uses:
// the product as gemm computes it (D is C), then GELU_AUX(_BIAS) (aux gets
// the product plus the bias, D its tanh-GELU) or DGELU (D times GELU's
// derivative at aux), column-major with the bias along D's rows.
func (f *fakeGPU) GemmEpilogue(m EpilogueProduct) error {
	if f.capture != nil && !f.noLt {
		*f.capture = append(*f.capture, func() error { return f.GemmEpilogue(m) })
		return nil
	}
	f.ltMatmuls++
	if f.noLt {
		return ErrNoEpilogues
	}
	if m.Batch > 1 || (m.CType != backend.F32 && m.CType != backend.BF16) {
		return fmt.Errorf("fake device: cuBLASLt product %+v", m)
	}
	// D, aux and the bias have D's type (cuBLASLt's default; a bias
	// gradient is F32 here): F32, or BF16 for bf16 activations, whose
	// epilogue computes in F32 from the product and rounds what it stores.
	dsize := 4
	if m.CType == backend.BF16 {
		dsize = 2
	}
	dn := m.LDC*(m.N-1) + m.M
	g := Product{TransA: m.TransA, TransB: m.TransB, M: m.M, N: m.N, K: m.K, Alpha: m.Alpha, Beta: m.Beta,
		A: m.A, B: m.B, C: m.C, AType: m.AType, BType: m.BType, CType: backend.F32, LDA: m.LDA, LDB: m.LDB, LDC: m.LDC,
		Batch: 1, Compute: m.Compute}
	if dsize == 2 { // the product in F32 scratch first
		if m.Beta != 0 {
			return fmt.Errorf("fake device: a bf16 cuBLASLt product with beta %v", m.Beta)
		}
		tmp := f.block(dn * 4)
		defer func() {
			f.blocks[tmp.Block].Free()
			delete(f.blocks, tmp.Block)
		}()
		g.C = tmp
	}
	if err := f.Gemm(g); err != nil {
		return err
	}
	f.gemms--
	acc, err := f.mem(g.C, dn*4)
	if err != nil {
		return fmt.Errorf("product: %w", err)
	}
	d, err := f.mem(m.C, dn*dsize)
	if err != nil {
		return fmt.Errorf("D: %w", err)
	}
	var aux []byte
	if !m.Aux.IsNil() {
		if aux, err = f.mem(m.Aux, (m.AuxLD*(m.N-1)+m.M)*dsize); err != nil {
			return fmt.Errorf("aux: %w", err)
		}
	}
	var bias []byte
	bsize := dsize
	if m.Epilogue == EpilogueBGradA {
		bsize = 4
	}
	if !m.Bias.IsNil() {
		if bias, err = f.mem(m.Bias, m.M*bsize); err != nil {
			return fmt.Errorf("bias: %w", err)
		}
	}
	get := func(b []byte, size, i int) float64 {
		if size == 2 {
			return float64(backend.BF16ToF32(binary.LittleEndian.Uint16(b[2*i:])))
		}
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	}
	put := func(b []byte, size, i int, v float64) {
		if size == 2 {
			binary.LittleEndian.PutUint16(b[2*i:], backend.F32ToBF16(float32(v)))
			return
		}
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	}
	const k = 0.7978845608028654 // sqrt(2/pi)
	for j := 0; j < m.N; j++ {
		for i := 0; i < m.M; i++ {
			o, a := i+j*m.LDC, i+j*m.AuxLD
			v := get(acc, 4, o)
			switch m.Epilogue {
			case EpilogueBGradA: // the bias gradient, below
				put(d, dsize, o, v)
			case EpilogueBias:
				put(d, dsize, o, v+get(bias, bsize, i))
			case EpilogueGELUAux, EpilogueGELUAuxBias:
				if bias != nil {
					v = float64(float32(v + get(bias, bsize, i)))
				}
				put(aux, dsize, a, v)
				put(d, dsize, o, 0.5*v*(1+math.Tanh(k*(v+0.044715*v*v*v))))
			case EpilogueDGELU:
				x := get(aux, dsize, a)
				t := math.Tanh(k * (x + 0.044715*x*x*x))
				put(d, dsize, o, v*(0.5*(1+t)+0.5*x*(1-t*t)*k*(1+3*0.044715*x*x)))
			default:
				return fmt.Errorf("fake device: epilogue %d", m.Epilogue)
			}
		}
	}
	if m.Epilogue == EpilogueBGradA { // op(A) is M×K (A not transposed): its rows' sums
		if m.TransA != NoTranspose {
			return fmt.Errorf("fake device: BGRADA with A transposed")
		}
		size := 4
		if m.AType == backend.BF16 {
			size = 2
		}
		a, err := f.mem(m.A, (m.LDA*(m.K-1)+m.M)*size)
		if err != nil {
			return fmt.Errorf("A: %w", err)
		}
		for i := 0; i < m.M; i++ {
			var s float64
			for k := 0; k < m.K; k++ {
				s += get(a, size, i+k*m.LDA)
			}
			put(bias, 4, i, s)
		}
	}
	return nil
}

func (f *fakeGPU) Sync() error { return nil }

// Marks are host times: the fake device runs each call at once.
func (f *fakeGPU) Mark() (uintptr, error) {
	f.marks = append(f.marks, time.Now())
	return uintptr(len(f.marks) - 1), nil
}

func (f *fakeGPU) Elapsed(from, to uintptr) (float64, error) {
	return float64(f.marks[to].Sub(f.marks[from]).Nanoseconds()) / 1e6, nil
}

func (f *fakeGPU) ReleaseMark(uintptr) {}

func (f *fakeGPU) OnStream(fn func(stream uintptr) error) error { return fn(0) }

// The fake device runs each call at once: the communication stream is the
// compute stream, and its work is always done.
func (f *fakeGPU) OnCommStream(fn func(stream uintptr) error) error { return fn(0) }
func (f *fakeGPU) JoinComm() (backend.CommProbe, error)             { return doneProbe{}, nil }

// Capture records launches, products and device-to-device copies as
// closures that the graph's launch runs in order. (Host copies are not
// captured: the fake runs them at once.)
func (f *fakeGPU) BeginCapture() error {
	if f.capture != nil {
		return fmt.Errorf("fake device: already capturing")
	}
	f.capture = &[]func() error{}
	return nil
}

func (f *fakeGPU) EndCapture() (backend.Graph, error) {
	if f.capture == nil {
		return nil, fmt.Errorf("fake device: not capturing")
	}
	g := fakeGraph(*f.capture)
	f.capture = nil
	return g, nil
}

type fakeGraph []func() error

func (g fakeGraph) Launch() error {
	for _, op := range g {
		if err := op(); err != nil {
			return err
		}
	}
	return nil
}
func (g fakeGraph) Free() error { return nil }

type doneProbe struct{}

func (doneProbe) Done() (bool, error) { return true, nil }
func (doneProbe) Release()            {}
func (f *fakeGPU) SMCount() int       { return 2 }
func (f *fakeGPU) TensorCores() bool  { return !f.noTensorCores }
func (f *fakeGPU) Name() string       { return "fake H200 (host memory)" }
func (f *fakeGPU) Close() error       { return nil }

func (f *fakeGPU) HostAlloc(bytes int) ([]byte, error) { return make([]byte, bytes), nil }
func (f *fakeGPU) HostFree([]byte) error               { return nil }

// htodAsync copies at once: the fake device has no streams to overlap.
func (f *fakeGPU) HtoDAsync(dst Ptr, src []byte) (backend.Upload, error) {
	if err := f.HtoD(dst, src); err != nil {
		return nil, err
	}
	return backend.DoneUpload{}, nil
}

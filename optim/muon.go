package optim

import (
	"fmt"
	"math"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// MuonConfig holds Muon's settings for the blocks' matrices.
type MuonConfig struct {
	// LR is the matrices' peak learning rate. The schedule scales it by
	// the factor it scales AdamW's by: a step at AdamW rate lr takes
	// LR·lr/peak, peak being AdamWConfig.LR.
	LR float32
	// Momentum is the Nesterov momentum's coefficient μ.
	Momentum float32
	// WeightDecay is decoupled: each step multiplies a matrix by
	// 1 - rate·WeightDecay.
	WeightDecay float32
	// Round is the type the Newton–Schulz products round their F32
	// operands to (backend.MatMul.Round): tensor.BF16, or 0 for none.
	Round tensor.DType
}

// Newton–Schulz: the quintic's coefficients, its iterations, and the
// epsilon of the Frobenius normalisation before them.
const (
	nsA, nsB, nsC = 3.4445, -4.7750, 2.0315
	nsSteps       = 5
	nsEps         = 1e-7
)

// Muon is momentum orthogonalised by Newton–Schulz for the blocks'
// weight matrices (parameters with Parts), AdamW for every other
// parameter. For a matrix W with gradient g, the clip coefficient c and
// momentum buffer m (its State's first tensor):
//
//	g' = c·g
//	m  = μ·m + (1-μ)·g'             the momentum, an exponential average
//	u  = (1-μ)·g' + μ·m             Nesterov's look-ahead
//	O  = NS(u_p) for each part p    (see below)
//	W  = W·(1 - r·wd) - r·s_p·O
//
// where r is the step's Muon rate and s_p = max(1, rows/cols)^0.5 for a
// part of rows×cols in PyTorch's [out, in] orientation (an orthogonal
// tall matrix has a smaller RMS per element; see docs/optimizers.md). NS normalises
// X = u_p/(‖u_p‖_F + 1e-7), transposed where it is tall, and iterates
// five times X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ and (a, b, c) =
// (3.4445, -4.7750, 2.0315): X's singular values are driven towards 1.
//
// Every step runs on the parameters' device as backend products and
// elementwise passes, batched: the matrices go into one buffer per shape
// (a one-part weight as it is stored, since NS(Mᵀ) = NS(M)ᵀ; a fused
// one's parts transposed by a product with the identity, exact in F32),
// and each Newton–Schulz product is one batched launch over all the
// matrices of that shape. A step whose clip coefficient is not finite moves Muon's
// matrices to NaN (AdamW leaves its parameters as they were); the run
// stops at its next read point either way.
type Muon struct {
	*AdamW
	Muon MuonConfig
	peak float32 // AdamW's configured rate: SetLR's rate over it scales Muon's
	// mats are the matrices this optimizer updates: all of them, or a
	// shard's (Shard); n counts all of them.
	mats   []*muonMat
	n      int
	work   []*muonWork // one per device, made at the first step
	opened bool
}

// muonMat is a matrix Muon updates: parameter i, stored [in, out], made
// of parts of the widths in parts along out.
type muonMat struct {
	i       int
	in, out int
	parts   []int
	scales  []float32 // each part's s_p
	slots   []muonSlot
	// plain: one part, orthogonalised as stored ([in, out]: NS(Mᵀ) is
	// NS(M)ᵀ), copied into its slot and added back, no transposes.
	// direct: parts of one shape, at consecutive slots of their group,
	// so the whole matrix transposes straight into them and back.
	// Otherwise it goes through tmp ([out, in]) and a copy per part.
	plain, direct bool
	// inRun: a plain matrix that a muonRun copies in and adds back.
	inRun bool
	tmp   *tensor.Tensor
	u     *tensor.Tensor // its look-ahead: its span's u, or a view of it
}

// muonRun is n one-part matrices of a packed optimizer whose look-aheads
// lie at one stride in u, their weights at the same stride in the flat
// parameters, and their slots at one stride in their group (a kind of
// matrix, one per block): one batched product by a 1×1 one copies them
// in, and one adds their updates back.
type muonRun struct {
	g                   *nsGroup
	n, slot, slotStride int
	stride              int
	scale               float32
	u, w                *tensor.Tensor // views from the first matrix's place
}

// muonSlot is where a part lies: matrix k of group g.
type muonSlot struct {
	g *nsGroup
	k int
}

// nsGroup is the n matrices of one device of rows×cols (a fused
// weight's part as [out, in], a one-part weight as stored, [in, out])
// that Newton–Schulz iterates together: x and y hold them (the
// iterate and the next), a and b the Gram matrices (s×s, s = min(rows,
// cols)), sq their norms, eps and one constants.
type nsGroup struct {
	rows, cols, n int
	x, y, a, b    *tensor.Tensor
	sq, eps, one  *tensor.Tensor
	out           *tensor.Tensor // after a step: x or y, whichever holds r·O
}

// muonWork is one device's scratch: the groups, the identity matrices
// the transposes multiply by, the step's rate (a device scalar), and the
// spans of momentum updated by one elementwise pass each (the packed
// optimizer's whole stretch of matrices, or a matrix at a time), with u,
// the look-ahead, beside each.
type muonWork struct {
	dev    tensor.Device
	groups []*nsGroup
	eye    map[int]*tensor.Tensor
	rate   *tensor.Tensor
	spans  []muonSpan
	runs   []*muonRun
	one    *tensor.Tensor // 1, the 1×1 matrix runs multiply by
}

type muonSpan struct {
	p, g, m, u *tensor.Tensor
	i          int // a matrix's own span: its parameter, whose Grad g is re-read each step; -1: the packed stretch
}

// NewMuon makes Muon over params: its rule for those with Parts, each a
// 2-D weight whose parts' widths add up to its second dimension, and
// AdamW (adam) for the others.
func NewMuon(params []*nn.Parameter, adam AdamWConfig, cfg MuonConfig) (*Muon, error) {
	if cfg.LR <= 0 || cfg.Momentum < 0 || cfg.Momentum >= 1 || cfg.WeightDecay < 0 {
		return nil, fmt.Errorf("muon: want a positive learning rate, momentum in [0, 1) and a weight decay not negative; got %v, %v and %v",
			cfg.LR, cfg.Momentum, cfg.WeightDecay)
	}
	if adam.LR <= 0 {
		return nil, fmt.Errorf("muon: AdamW's learning rate %v must be positive (it is the schedule's peak, which scales Muon's)", adam.LR)
	}
	o := &Muon{AdamW: NewAdamW(params, adam), Muon: cfg, peak: adam.LR}
	o.others = make([]bool, len(params))
	for i, p := range params {
		if p.Parts == nil {
			continue
		}
		s := p.T.Shape()
		if len(s) != 2 {
			o.AdamW.Free()
			return nil, fmt.Errorf("muon: %s has parts but is not a matrix (shape %v)", p.Name, s)
		}
		sum := 0
		for _, w := range p.Parts {
			if w <= 0 {
				sum = -1
				break
			}
			sum += w
		}
		if sum != s[1] {
			o.AdamW.Free()
			return nil, fmt.Errorf("muon: %s's parts %v do not add up to its %d columns", p.Name, p.Parts, s[1])
		}
		m := &muonMat{i: i, in: s[0], out: s[1], parts: p.Parts}
		for _, w := range p.Parts {
			m.scales = append(m.scales, float32(math.Sqrt(max(1, float64(w)/float64(s[0])))))
		}
		o.mats = append(o.mats, m)
		o.others[i] = true
	}
	if len(o.mats) == 0 {
		o.AdamW.Free()
		return nil, fmt.Errorf("muon: the model marks no block matrices (nn.Parameter.Parts) for Muon")
	}
	o.n = len(o.mats)
	return o, nil
}

// Matrices is the number of parameters Muon's own rule updates (on all
// the shards together, where sharded).
func (o *Muon) Matrices() int { return o.n }

// Step updates every parameter that has a gradient.
func (o *Muon) Step() { o.StepSched(nil, nil) }

// StepScaled is Step with every gradient multiplied by gradScale first.
func (o *Muon) StepScaled(gradScale *tensor.Tensor) { o.StepSched(gradScale, nil) }

// StepSched is AdamW's StepSched for AdamW's parameters, and Muon's
// rule for the matrices, at the rate sched's first element (the step's
// AdamW rate) sets where sched is given: Muon.LR times it over the peak.
func (o *Muon) StepSched(gradScale, sched *tensor.Tensor) {
	o.AdamW.StepSched(gradScale, sched)
	if !o.opened {
		o.open()
	}
	for _, w := range o.work {
		o.stepOn(w, gradScale, sched)
	}
}

// stepOn is a step of the matrices on one device.
func (o *Muon) stepOn(w *muonWork, gradScale, sched *tensor.Tensor) {
	ratio := o.Muon.LR / o.peak
	if sched != nil {
		tensor.ScaleInto(w.rate, sched.Rows(0, 1), ratio)
	} else {
		tensor.Fill(w.rate, ratio*o.Config.LR)
	}
	mu := o.Muon.Momentum
	for _, s := range w.spans {
		if s.i >= 0 {
			s.g = o.Params[s.i].T.Grad
			if s.g == nil {
				panic(fmt.Sprintf("muon: %s has no gradient", o.Params[s.i].Name))
			}
		}
		if gradScale != nil { // u = c·g: the coefficient is on the device
			n := s.u.Numel()
			tensor.Gemm(backend.MatMul{Batch: 1, M: n, N: 1, K: 1}, s.g, gradScale, s.u)
		} else {
			s.u.CopyFrom(s.g)
		}
		tensor.ScaleInPlace(s.m, mu)
		tensor.AddInPlace(s.m, s.u, 1-mu)
		tensor.ScaleInPlace(s.u, 1-mu)
		tensor.AddInPlace(s.u, s.m, mu)
	}
	for _, run := range w.runs {
		rc := run.g.rows * run.g.cols
		tensor.Gemm(backend.MatMul{Batch: run.n, M: rc, N: 1, K: 1, StrideA: run.stride, StrideC: run.slotStride * rc},
			run.u, w.one, run.g.x.Rows(run.slot*rc, run.g.n*rc))
	}
	for _, m := range o.mats {
		if o.Params[m.i].T.Device() == w.dev && !m.inRun {
			m.gather(w)
		}
	}
	for _, g := range w.groups {
		g.iterate(o.Muon.Round)
		// r·O, into the buffer the iterate is not in.
		dst := g.x
		if g.out == g.x {
			dst = g.y
		}
		tensor.Gemm(backend.MatMul{Batch: 1, M: g.n * g.rows * g.cols, N: 1, K: 1}, g.out, w.rate, dst)
		g.out = dst
	}
	if wd := o.Muon.WeightDecay; wd != 0 { // W -= wd·r·W, with u free again as scratch
		for _, s := range w.spans {
			tensor.Gemm(backend.MatMul{Batch: 1, M: s.p.Numel(), N: 1, K: 1}, s.p, w.rate, s.u)
			tensor.AddInPlace(s.p, s.u, -wd)
		}
	}
	for _, run := range w.runs {
		rc := run.g.rows * run.g.cols
		tensor.Gemm(backend.MatMul{Batch: run.n, M: rc, N: 1, K: 1, StrideA: run.slotStride * rc, StrideC: run.stride, Alpha: -run.scale, Beta: 1},
			run.g.out.Rows(run.slot*rc, run.g.n*rc), w.one, run.w)
	}
	for _, m := range o.mats {
		if p := o.Params[m.i].T; p.Device() == w.dev && !m.inRun {
			m.scatter(w, p)
		}
	}
	// The matrices' bf16 copies, where KeepHalf gave them some: packed,
	// one cast over their stretch of the flat copy.
	if k := o.packed; k != nil && k.done && k.half != nil {
		s := &w.spans[0]
		if s.p.Half() == nil {
			lo, hi, _ := k.others()
			tensor.ProgramOf(w.dev).Persist(func() { s.p.SetHalf(k.half.Rows(lo, hi)) })
		}
		s.p.RefreshHalf()
		return
	}
	for _, m := range o.mats {
		if p := o.Params[m.i].T; p.Device() == w.dev {
			p.RefreshHalf()
		}
	}
}

// open makes the scratch: the groups by device and shape, each matrix's
// slots, the identities, and the momentum spans (the packed stretch of
// matrices, or one per matrix).
func (o *Muon) open() {
	o.opened = true
	byDev := map[tensor.Device]*muonWork{}
	for _, m := range o.mats {
		p := o.Params[m.i].T
		dev := p.Device()
		w := byDev[dev]
		if w == nil {
			w = &muonWork{dev: dev, eye: map[int]*tensor.Tensor{}}
			byDev[dev] = w
			o.work = append(o.work, w)
		}
		groupOf := func(rows, cols int) *nsGroup {
			for _, g := range w.groups {
				if g.rows == rows && g.cols == cols {
					return g
				}
			}
			g := &nsGroup{rows: rows, cols: cols}
			w.groups = append(w.groups, g)
			return g
		}
		m.plain, m.direct = len(m.parts) == 1, true
		for _, pw := range m.parts {
			if pw != m.parts[0] {
				m.direct = false
			}
		}
		if m.plain {
			g := groupOf(m.in, m.out)
			m.slots = append(m.slots, muonSlot{g: g, k: g.n})
			g.n++
			continue
		}
		for _, pw := range m.parts {
			g := groupOf(pw, m.in)
			m.slots = append(m.slots, muonSlot{g: g, k: g.n})
			g.n++
		}
	}
	for _, w := range o.work {
		prog := tensor.ProgramOf(w.dev)
		prog.NoGrad(func() { prog.Persist(func() { o.openOn(w) }) })
	}
}

// openOn allocates device w's scratch.
func (o *Muon) openOn(w *muonWork) {
	w.rate = tensor.Zeros(w.dev, 1) // [1], as the schedule's rate it is scaled from
	w.one = tensor.Ones(w.dev)
	for _, g := range w.groups {
		s := min(g.rows, g.cols)
		g.x = tensor.Zeros(w.dev, g.n*g.rows*g.cols)
		g.y = tensor.Zeros(w.dev, g.n*g.rows*g.cols)
		g.a = tensor.Zeros(w.dev, g.n*s*s)
		g.b = tensor.Zeros(w.dev, g.n*s*s)
		g.sq = tensor.Zeros(w.dev, g.n)
		g.eps = tensor.Full(w.dev, nsEps, g.n)
		g.one = tensor.Ones(w.dev, g.n)
	}
	for _, m := range o.mats {
		if o.Params[m.i].T.Device() != w.dev {
			continue
		}
		if n := min(m.in, m.out); !m.plain && w.eye[n] == nil {
			w.eye[n] = identity(w.dev, n)
		}
		if !m.direct {
			m.tmp = tensor.Zeros(w.dev, m.out*m.in)
		}
	}
	if k := o.packed; k != nil && k.done {
		lo, hi, mOff := k.others()
		u := tensor.Zeros(w.dev, hi-lo)
		w.spans = []muonSpan{{p: k.params.Rows(lo, hi), g: k.grads.Rows(lo, hi),
			m: k.m.Rows(lo-mOff, hi-mOff), u: u, i: -1}}
		offs := o.FlatOffsets()
		for _, m := range o.mats {
			off := offs[m.i] - lo
			m.u = u.Rows(off, off+m.in*m.out)
		}
		o.findRuns(w, u, offs, lo)
		return
	}
	for _, m := range o.mats {
		p := o.Params[m.i].T
		if p.Device() != w.dev {
			continue
		}
		m.u = tensor.Zeros(w.dev, p.Shape()...)
		w.spans = append(w.spans, muonSpan{p: p, m: o.M[m.i], u: m.u, i: m.i})
	}
}

// findRuns groups a packed optimizer's one-part matrices into runs
// (muonRun): each matrix extends the last run of its group where its
// offset and slot continue that run's strides. u starts at flat element
// lo.
func (o *Muon) findRuns(w *muonWork, u *tensor.Tensor, offs []int, lo int) {
	k := o.packed
	type open struct {
		run       *muonRun
		off, slot int // the last matrix's
		first     int // the first's offset
	}
	last := map[*nsGroup]*open{}
	var all []*open
	for _, m := range o.mats {
		if !m.plain {
			continue
		}
		g, slot, off := m.slots[0].g, m.slots[0].k, offs[m.i]-lo
		if l := last[g]; l != nil && l.run.scale == m.scales[0] && slot > l.slot && off > l.off &&
			(l.run.n == 1 || (slot-l.slot == l.run.slotStride && off-l.off == l.run.stride)) {
			if l.run.n == 1 {
				l.run.slotStride, l.run.stride = slot-l.slot, off-l.off
			}
			l.run.n++
			l.off, l.slot = off, slot
			continue
		}
		r := &open{run: &muonRun{g: g, n: 1, slot: slot, scale: m.scales[0]}, off: off, slot: slot, first: off}
		last[g] = r
		all = append(all, r)
	}
	for _, r := range all {
		if r.run.n < 2 {
			continue
		}
		run := r.run
		run.u = u.Rows(r.first, u.Numel())
		run.w = k.params.Rows(lo+r.first, k.params.Numel())
		w.runs = append(w.runs, run)
		for _, m := range o.mats {
			if off := offs[m.i] - lo; m.plain && m.slots[0].g == run.g && off >= r.first && off <= r.off &&
				(off-r.first)%run.stride == 0 && m.slots[0].k == run.slot+(off-r.first)/run.stride*run.slotStride {
				m.inRun = true
			}
		}
	}
}

// identity is the n×n identity matrix.
func identity(dev tensor.Device, n int) *tensor.Tensor {
	v := make([]float32, n*n)
	for i := range n {
		v[i*n+i] = 1
	}
	return tensor.FromFloat32s(dev, v, n*n)
}

// transpose writes dst (cols×rows) = alpha·srcᵀ + beta·dst for src
// rows×cols, as a product with the smaller identity (exact in F32).
func transpose(w *muonWork, src, dst *tensor.Tensor, rows, cols int, alpha, beta float32) {
	if rows <= cols { // dst = srcᵀ·I(rows)
		tensor.Gemm(backend.MatMul{Batch: 1, M: cols, N: rows, K: rows, TransA: true, Alpha: alpha, Beta: beta}, src, w.eye[rows], dst)
		return
	}
	// dst = I(cols)·srcᵀ
	tensor.Gemm(backend.MatMul{Batch: 1, M: cols, N: rows, K: cols, TransB: true, Alpha: alpha, Beta: beta}, w.eye[cols], src, dst)
}

// gather puts matrix m's look-ahead u ([in, out]) into its slots: as it
// is where it is one part, else each part transposed to [width, in].
func (m *muonMat) gather(w *muonWork) {
	if m.plain {
		s := m.slots[0]
		size := s.g.rows * s.g.cols
		tensor.CopyInto(s.g.x.Rows(s.k*size, (s.k+1)*size), m.u)
		return
	}
	if m.direct {
		s := m.slots[0]
		size := s.g.rows * s.g.cols
		transpose(w, m.u, s.g.x.Rows(s.k*size, (s.k+len(m.parts))*size), m.in, m.out, 1, 0)
		return
	}
	transpose(w, m.u, m.tmp, m.in, m.out, 1, 0)
	off := 0
	for _, s := range m.slots {
		size := s.g.rows * s.g.cols
		s.g.x.Rows(s.k*size, (s.k+1)*size).CopyFrom(m.tmp.Rows(off, off+size))
		off += size
	}
}

// scatter subtracts each part's s_p·r·O (its group's out) from the
// weight ([in, out]), transposing it back.
func (m *muonMat) scatter(w *muonWork, weight *tensor.Tensor) {
	flat := weight // read flat by the products
	if m.plain {
		s := m.slots[0]
		size := s.g.rows * s.g.cols
		tensor.AxpyInto(weight, s.g.out.Rows(s.k*size, (s.k+1)*size), -m.scales[0])
		return
	}
	if m.direct {
		s := m.slots[0]
		size := s.g.rows * s.g.cols
		transpose(w, s.g.out.Rows(s.k*size, (s.k+len(m.parts))*size), flat, m.out, m.in, -m.scales[0], 1)
		return
	}
	off := 0
	for j := range m.parts {
		s := m.slots[j]
		size := s.g.rows * s.g.cols
		tensor.ScaleInto(m.tmp.Rows(off, off+size), s.g.out.Rows(s.k*size, (s.k+1)*size), m.scales[j])
		off += size
	}
	transpose(w, m.tmp, flat, m.out, m.in, -1, 1)
}

// iterate runs Newton–Schulz on the group's matrices in x, leaving the
// result in g.out (x or y).
func (g *nsGroup) iterate(round tensor.DType) {
	r, c, n := g.rows, g.cols, g.n
	rc := r * c
	// X / (‖X‖_F + eps): the squares (in y) summed by rows of rc.
	tensor.BinaryInto(backend.Mul, g.y, g.x, g.x)
	tensor.SumColsInto(g.sq, g.y, n, rc)
	tensor.UnaryInto(backend.Sqrt, g.sq, g.sq)
	tensor.BinaryInto(backend.Add, g.sq, g.sq, g.eps)
	tensor.BinaryInto(backend.Div, g.sq, g.one, g.sq)
	tensor.Gemm(backend.MatMul{Batch: n, M: rc, N: 1, K: 1, StrideA: rc, StrideB: 1, StrideC: rc}, g.x, g.sq, g.y)
	x, y := g.y, g.x
	s := min(r, c)
	ss := s * s
	for range nsSteps {
		if r <= c { // A = X·Xᵀ
			tensor.Gemm(backend.MatMul{Batch: n, M: r, N: r, K: c, TransB: true, StrideA: rc, StrideB: rc, StrideC: ss, Round: round}, x, x, g.a)
		} else { // tall: A = Xᵀ·X, X's transpose being the wide one
			tensor.Gemm(backend.MatMul{Batch: n, M: c, N: c, K: r, TransA: true, StrideA: rc, StrideB: rc, StrideC: ss, Round: round}, x, x, g.a)
		}
		// B = b·A + c·A·A; the products take alpha 1 and beta 0, as bf16
		// products must.
		tensor.Gemm(backend.MatMul{Batch: n, M: s, N: s, K: s, StrideA: ss, StrideB: ss, StrideC: ss, Round: round}, g.a, g.a, g.b)
		tensor.ScaleInPlace(g.b, nsC)
		tensor.AddInPlace(g.b, g.a, nsB)
		// X' = a·X + B·X (wide), a·X + X·B (tall, B symmetric)
		if r <= c {
			tensor.Gemm(backend.MatMul{Batch: n, M: r, N: c, K: r, StrideA: ss, StrideB: rc, StrideC: rc, Round: round}, g.b, x, y)
		} else {
			tensor.Gemm(backend.MatMul{Batch: n, M: r, N: c, K: c, StrideA: rc, StrideB: ss, StrideC: rc, Round: round}, x, g.b, y)
		}
		tensor.AddInPlace(y, x, nsA)
		x, y = y, x
	}
	g.out = x
}

// Free releases Muon's scratch and AdamW's buffers.
func (o *Muon) Free() {
	for _, w := range o.work {
		ts := []*tensor.Tensor{w.rate, w.one}
		for _, g := range w.groups {
			ts = append(ts, g.x, g.y, g.a, g.b, g.sq, g.eps, g.one)
		}
		for _, e := range w.eye {
			ts = append(ts, e)
		}
		for _, s := range w.spans {
			ts = append(ts, s.u)
		}
		// (the matrices' u are the spans' or views of them)
		for _, t := range ts {
			t.Free()
		}
	}
	for _, m := range o.mats {
		if m.tmp != nil {
			m.tmp.Free()
			m.tmp = nil
		}
	}
	o.work, o.opened = nil, false
	o.AdamW.Free()
}

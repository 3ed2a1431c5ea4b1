package cpu

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/internal/rng"
)

// The CPU's BF16 products, as BF16Product names them.
const (
	// BF16ProductWiden widens the operands to F32 and runs the F32 product.
	BF16ProductWiden = "widen"
	// BF16ProductDot runs AVX512-BF16's VDPBF16PS on packed pairs.
	BF16ProductDot = "dot"
	// BF16ProductAMX runs AMX's TDPBF16PS on tiles.
	BF16ProductAMX = "amx"
)

// A bf16Product is one way the CPU runs the BF16 matrix product (A and B
// bfloat16, C float32, products accumulated in float32). The products sum
// in different orders, so a run keeps to one. None is offered before it
// has matched its portable twin, bit for bit, on a random problem in this
// process (check): a kernel that was never run on this CPU model, or that
// the CPU runs otherwise than the manual says, is refused rather than
// trusted.
type bf16Product struct {
	name, what string
	// unavailable says why this CPU or OS cannot run the product, "" where
	// it can (set by the architecture's files; it may ask the OS for
	// permission, once).
	unavailable func() string
	run         func(c *CPU, p backend.MatMul, a, b, cc, bias backend.Ref)
	// twin computes the same product element by element (bf16twin.go).
	twin func(p backend.MatMul, a, b []uint16, c, bias []float32)
	// bf16C says run also takes BF16 C, rounding each tile into it as it
	// is done (tileC), for bf16 activations.
	bf16C bool

	mu      sync.Mutex
	checked bool
	state   string // bf16Checked, or why the product is not offered
}

// bf16Checked is the state of a product that passed its self-check.
const bf16Checked = "checked"

var (
	widenProduct = &bf16Product{name: BF16ProductWiden, what: "operands widened to f32, the f32 product",
		unavailable: func() string { return "" }, run: (*CPU).matmulBF16Wide, twin: widenTwin, bf16C: true}
	dotProduct = &bf16Product{name: BF16ProductDot, what: "AVX512-BF16's VDPBF16PS dot products",
		unavailable: func() string { return "this CPU has no AVX512-BF16 (VDPBF16PS)" }, run: (*CPU).matmulBF16Dot, twin: dotTwin, bf16C: true}
	amxProduct = &bf16Product{name: BF16ProductAMX, what: "AMX tiles, TDPBF16PS",
		unavailable: func() string { return "AMX is an x86-64 feature" }, run: (*CPU).matmulAMX, twin: amxTwin, bf16C: true}

	// bf16Products lists every product, as fleet doctor shows them (tests
	// add broken ones).
	bf16Products = []*bf16Product{amxProduct, dotProduct, widenProduct}

	// bf16Use is the product this process runs: chosen once, at the first
	// BF16 product or BF16Product call (bf16Chosen, chooseBF16), unless
	// SetBF16Product fixed it; bf16How says how.
	bf16Use    = widenProduct
	bf16How    = "the only product offered on this CPU"
	bf16Chosen sync.Once

	// bf16Log receives the self-check's refusals.
	bf16Log io.Writer = os.Stderr
)

// offered runs the product's self-check the first time it is asked and
// reports whether the product passed it. A product that fails is logged,
// with the CPU's model, and never run.
func (q *bf16Product) offered() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.checked {
		q.checked = true
		if q.state = q.unavailable(); q.state == "" {
			q.state = q.selfCheck()
			if q.state != bf16Checked {
				fmt.Fprintf(bf16Log, "cpu: the bf16 product %q is not offered on this CPU (%s): %s\n", q.name, Model(), q.state)
			}
		}
	}
	return q.state == bf16Checked
}

// status is the product's state for fleet doctor, checking it first.
func (q *bf16Product) status() string {
	q.offered()
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// selfCheck runs the product and its twin on small random problems
// (ragged edges in every dimension, an odd K, both transposes, beta 0
// and 1, a bias, a batch of two; and, for a product that writes BF16 C
// itself, BF16 C) and returns bf16Checked where every element has the
// same bits, else what differed. It takes a few milliseconds, once per
// product and process.
func (q *bf16Product) selfCheck() string {
	c := New(backend.CPU)
	c.SetThreads(2) // the kernels split over goroutines, as in a run
	defer c.SetThreads(1)
	r := rng.New(0x5e1f)
	for _, tc := range []struct {
		batch, m, n, k    int
		ta, tb, bias, c16 bool
		beta              float32
	}{
		{1, 45, 70, 99, false, false, false, false, 0},
		{2, 40, 33, 80, true, true, true, false, 1},
		{1, 37, 50, 40, false, true, true, true, 0},
		{2, 33, 20, 35, true, false, false, true, 1},
	} {
		if tc.c16 && !q.bf16C {
			continue
		}
		na, nb, nc := tc.m*tc.k, tc.k*tc.n, tc.m*tc.n
		p := backend.MatMul{Batch: tc.batch, M: tc.m, N: tc.n, K: tc.k, TransA: tc.ta, TransB: tc.tb,
			StrideA: na, StrideB: nb, StrideC: nc, Alpha: 1, Beta: tc.beta}
		bf := func(n int) *Buffer {
			s := c.Alloc(backend.BF16, n).(*Buffer)
			for i := range s.U16[:n] {
				s.U16[i] = backend.F32ToBF16(float32(r.Norm()))
			}
			return s
		}
		f := func(n int) *Buffer {
			s := c.Alloc(backend.F32, n).(*Buffer)
			for i := range s.F32[:n] {
				s.F32[i] = float32(r.Norm())
			}
			return s
		}
		a, b := bf(tc.batch*na), bf(tc.batch*nb)
		var bias backend.Ref
		var twinBias []float32
		if tc.bias {
			bs := f(tc.n)
			bias, twinBias = backend.Ref{S: bs}, bs.F32[:tc.n]
		}
		var cc *Buffer
		want := make([]float32, tc.batch*nc)
		if tc.c16 {
			cc = bf(len(want))
			bf16ToF32s(want, cc.U16)
		} else {
			cc = f(len(want))
			copy(want, cc.F32)
		}
		q.twin(p, a.U16, b.U16, want, twinBias)
		q.run(c, p, backend.Ref{S: a}, backend.Ref{S: b}, backend.Ref{S: cc}, bias)
		got := make([]float32, len(want))
		if tc.c16 {
			// The product rounds C once; so does the twin's, here.
			bf16ToF32s(got, cc.U16)
			for i, v := range want {
				want[i] = backend.BF16ToF32(backend.F32ToBF16(v))
			}
		} else {
			copy(got, cc.F32)
		}
		diff, first := 0, -1
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				if diff++; first < 0 {
					first = i
				}
			}
		}
		if diff > 0 {
			what := "F32"
			if tc.c16 {
				what = "BF16"
			}
			return fmt.Sprintf("mismatch: %d of %d elements of a %d×%d×%d product into %s C differ from its portable twin (element %d: %g, twin %g)",
				diff, len(want), tc.m, tc.k, tc.n, what, first, got[first], want[first])
		}
	}
	return bf16Checked
}

// bf16ProductNamed returns the product kind names, or nil.
func bf16ProductNamed(kind string) *bf16Product {
	for _, q := range bf16Products {
		if q.name == kind {
			return q
		}
	}
	return nil
}

// chooseBF16 chooses this process's product, once: FLEET_CPU_BF16 where
// it names one that is offered, else the fastest of those offered, timed
// on this machine.
func chooseBF16() {
	var offered []*bf16Product
	for _, q := range bf16Products {
		if q.offered() {
			offered = append(offered, q)
		}
	}
	env := os.Getenv("FLEET_CPU_BF16")
	if q := bf16ProductNamed(env); q != nil && q.offered() {
		bf16Use, bf16How = q, "FLEET_CPU_BF16"
		return
	}
	note := ""
	if env != "" {
		note = fmt.Sprintf("FLEET_CPU_BF16=%s is not offered here; ", env)
	}
	switch len(offered) {
	case 0:
		bf16Use, bf16How = nil, note+"no bf16 product passed its self-check on this CPU"
	case 1:
		bf16Use, bf16How = offered[0], note+"the only product offered on this CPU"
	default:
		bf16Use, bf16How = fastestBF16(offered), note+"timed: the fastest on this core"
	}
}

// bf16TimeShape is the M, K and N of the product fastestBF16 times (tests
// make it small).
var bf16TimeShape = [3]int{256, 384, 384}

// fastestBF16 times each product on a product of the size of a small
// model's (256×384 by 384×384) and returns the fastest: the best of three
// runs each, interleaved, after one to warm up (a few milliseconds in all).
func fastestBF16(qs []*bf16Product) *bf16Product {
	m, k, n := bf16TimeShape[0], bf16TimeShape[1], bf16TimeShape[2]
	c := New(backend.CPU)
	defer c.SetThreads(1)
	r := rng.New(1)
	bf := func(n int) backend.Ref {
		s := c.Alloc(backend.BF16, n).(*Buffer)
		for i := range s.U16[:n] {
			s.U16[i] = backend.F32ToBF16(float32(r.Norm()))
		}
		return backend.Ref{S: s}
	}
	a, b, cc := bf(m*k), bf(k*n), backend.Ref{S: c.Alloc(backend.F32, m*n)}
	p := backend.MatMul{Batch: 1, M: m, N: n, K: k, StrideA: m * k, StrideB: k * n, StrideC: m * n, Alpha: 1}
	best := make([]time.Duration, len(qs))
	for round := range 4 {
		for i, q := range qs {
			t := time.Now()
			q.run(c, p, a, b, cc, backend.Ref{})
			if d := time.Since(t); round > 0 && (best[i] == 0 || d < best[i]) {
				best[i] = d
			}
		}
	}
	pick := 0
	for i := range qs {
		if best[i] < best[pick] {
			pick = i
		}
	}
	return qs[pick]
}

// BF16Product is the BF16 product this process runs (BF16ProductAMX,
// BF16ProductDot or BF16ProductWiden) and how it was chosen. The first
// call (or the first BF16 product) chooses it, once: FLEET_CPU_BF16 where
// set, else the fastest on this core of the products that passed their
// self-check (timed), unless SetBF16Product has fixed it. The products
// round alike but sum in different orders, so a run's choice is part of
// what makes it repeatable: the trainer records it and sets it on resume
// and on every rank. The kind is "" where no product passed its
// self-check; how then says so.
func BF16Product() (kind, how string) {
	bf16Chosen.Do(chooseBF16)
	if bf16Use == nil {
		return "", bf16How
	}
	return bf16Use.name, bf16How
}

// SetBF16Product fixes this process's BF16 product (a run's recorded
// choice). A product this CPU cannot run, or that failed its self-check
// here, is refused, naming why. Call it before a product runs, not during
// one.
func SetBF16Product(kind string) error {
	q := bf16ProductNamed(kind)
	if q == nil {
		names := make([]string, len(bf16Products))
		for i, q := range bf16Products {
			names[i] = fmt.Sprintf("%q", q.name)
		}
		return fmt.Errorf("cpu: no bf16 product %q (want one of %s)", kind, strings.Join(names, ", "))
	}
	if !q.offered() {
		return fmt.Errorf("cpu: the bf16 product %q is not offered on this CPU: %s", kind, q.status())
	}
	bf16Chosen.Do(func() {}) // no timing after this
	bf16Use, bf16How = q, "set"
	return nil
}

// BF16ProductState is one BF16 product as fleet doctor lists it.
type BF16ProductState struct {
	Name, What string
	// State is "checked" where the product matched its portable twin in
	// this process, else why it is not offered.
	State string
}

// BF16Products lists the CPU's BF16 products and whether each is offered,
// running the self-checks that have not run yet.
func BF16Products() []BF16ProductState {
	out := make([]BF16ProductState, len(bf16Products))
	for i, q := range bf16Products {
		out[i] = BF16ProductState{Name: q.name, What: q.what, State: q.status()}
	}
	return out
}

// BF16ProductWhat describes a product by name, for logs ("" for none).
func BF16ProductWhat(kind string) string {
	if q := bf16ProductNamed(kind); q != nil {
		return q.what
	}
	return ""
}

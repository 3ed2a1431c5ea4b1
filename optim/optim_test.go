package optim

import (
	"math"
	"testing"

	"github.com/fleetml/fleet/backend/ref"
	"github.com/fleetml/fleet/internal/testenv"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

func TestAdamWMatchesReference(t *testing.T) {
	r := tensor.NewRNG(3)
	w := nn.NewParameter("w", tensor.Randn(tensor.CPU, r, 1, 4, 5))
	b := nn.NewParameter("b", tensor.Randn(tensor.CPU, r, 1, 5))
	if !w.Decay || b.Decay {
		t.Fatalf("decay flags: w %v b %v, want true false", w.Decay, b.Decay)
	}
	cfg := AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1}
	opt := NewAdamW([]*nn.Parameter{w, b}, cfg)
	type state struct{ w, m, v []float64 }
	refs := []*state{}
	for _, p := range opt.Params {
		v := p.T.Float32s()
		s := &state{w: make([]float64, len(v)), m: make([]float64, len(v)), v: make([]float64, len(v))}
		for i := range v {
			s.w[i] = float64(v[i])
		}
		refs = append(refs, s)
	}
	for step := 1; step <= 4; step++ {
		g := [][]float32{}
		for _, p := range opt.Params {
			gv := tensor.Randn(tensor.CPU, r, 1, p.T.Shape()...)
			p.T.Grad = gv
			g = append(g, gv.Float32s())
		}
		opt.Step()
		for i, p := range opt.Params {
			wd := 0.0
			if p.Decay {
				wd = 0.1
			}
			g64 := make([]float64, len(g[i]))
			for j := range g64 {
				g64[j] = float64(g[i][j])
			}
			ref.AdamW(refs[i].w, g64, refs[i].m, refs[i].v, 0.01, 0.9, 0.95, 1e-8, wd, step)
			got := p.T.Float32s()
			for j := range got {
				if math.Abs(float64(got[j])-refs[i].w[j]) > 1e-5 {
					t.Fatalf("step %d %s[%d] = %v, reference %v", step, p.Name, j, got[j], refs[i].w[j])
				}
			}
		}
	}
}

func TestSchedule(t *testing.T) {
	s := Schedule{LR: 1e-3, MinLR: 1e-4, WarmupIters: 100, DecayIters: 2000}
	cases := []struct {
		it   int
		want float64
	}{
		{0, 1e-3 / 101},
		{99, 1e-3 * 100 / 101},
		{100, 1e-3},
		{1050, 1e-4 + 0.5*(1e-3-1e-4)},
		{2000, 1e-4},
		{5000, 1e-4},
	}
	for _, c := range cases {
		if got := s.At(c.it); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("At(%d) = %v, want %v", c.it, got, c.want)
		}
	}
	for it := 100; it < 2000; it++ {
		if s.At(it+1) > s.At(it) {
			t.Fatalf("schedule rises after warmup at %d", it)
		}
	}
}

func TestClipGradNorm(t *testing.T) {
	a := nn.NewParameter("a", tensor.Zeros(tensor.CPU, 2))
	b := nn.NewParameter("b", tensor.Zeros(tensor.CPU, 1))
	a.T.Grad = tensor.FromFloat32s(tensor.CPU, []float32{3, 0}, 2)
	b.T.Grad = tensor.FromFloat32s(tensor.CPU, []float32{4}, 1)
	ps := []*nn.Parameter{a, b}
	if n := ClipGradNorm(ps, 10); math.Abs(n-5) > 1e-6 {
		t.Fatalf("norm %v, want 5", n)
	}
	if g := a.T.Grad.Float32s(); g[0] != 3 {
		t.Fatalf("clipped below the limit: %v", g)
	}
	if n := ClipGradNorm(ps, 1); math.Abs(n-5) > 1e-6 {
		t.Fatalf("norm %v, want 5", n)
	}
	ga, gb := a.T.Grad.Float32s(), b.T.Grad.Float32s()
	if math.Abs(float64(ga[0])-0.6) > 1e-5 || math.Abs(float64(gb[0])-0.8) > 1e-5 {
		t.Fatalf("clipped grads %v %v, want [0.6 0] [0.8]", ga, gb)
	}
}

// TestClipCoefIsClipGradNorm holds the device path (ClipCoef, then
// StepScaled, reading nothing back) to the host path (ClipGradNorm, then
// Step), bit for bit, with the clip active and not, and checks that
// gradients that are not finite leave the weights and moments as they are
// and record their step.
func TestClipCoefIsClipGradNorm(t *testing.T) {
	rng := tensor.NewRNG(3)
	newParams := func() []*nn.Parameter {
		r := tensor.NewRNG(5)
		var ps []*nn.Parameter
		for i, shape := range [][]int{{7, 5}, {5}, {3, 4}} {
			p := nn.NewParameter(string(rune('a'+i)), tensor.Randn(tensor.CPU, r, 1, shape...))
			p.Decay = len(shape) == 2
			ps = append(ps, p)
		}
		return ps
	}
	cfg := AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1}
	for _, maxNorm := range []float64{0, 100, 0.3} {
		host, dev := newParams(), newParams()
		ho, do := NewAdamW(host, cfg), NewAdamW(dev, cfg)
		acc, coef, stats := tensor.Zeros(tensor.CPU), tensor.Zeros(tensor.CPU), tensor.NewStats(tensor.CPU)
		for step := 1; step <= 3; step++ {
			for i := range host {
				g := tensor.Randn(tensor.CPU, rng, 2, host[i].T.Shape()...)
				host[i].T.Grad, dev[i].T.Grad = g, g.Clone()
			}
			norm := ClipGradNorm(host, maxNorm)
			ho.Step()
			ClipCoef(dev, maxNorm, acc, coef, stats, step)
			do.StepScaled(coef)
			if got := stats.Float32s()[2]; got != float32(norm) {
				t.Errorf("max %v step %d: norm %v on the device, %v on the host", maxNorm, step, got, norm)
			}
		}
		for i := range host {
			if !testenv.SameBits(host[i].T.Float32s(), dev[i].T.Float32s()) || !testenv.SameBits(ho.M[i].Float32s(), do.M[i].Float32s()) {
				t.Errorf("max %v: %s differs between the host and device paths", maxNorm, host[i].Name)
			}
		}
	}
	// Gradients that are not finite: no update, and the step recorded.
	ps := newParams()
	o := NewAdamW(ps, cfg)
	before := ps[0].T.Float32s()
	for _, p := range ps {
		p.T.Grad = tensor.Randn(tensor.CPU, rng, 1, p.T.Shape()...)
	}
	g := ps[1].T.Grad.Float32s()
	g[2] = float32(math.Inf(1))
	ps[1].T.Grad.SetFloat32s(g)
	acc, coef, stats := tensor.Zeros(tensor.CPU), tensor.Zeros(tensor.CPU), tensor.NewStats(tensor.CPU)
	ClipCoef(ps, 1, acc, coef, stats, 4)
	o.StepScaled(coef)
	if !testenv.SameBits(ps[0].T.Float32s(), before) || stats.Float32s()[3] != 4 {
		t.Errorf("an inf gradient: weights moved (%v) or step not recorded (%v)", !testenv.SameBits(ps[0].T.Float32s(), before), stats.Float32s())
	}
}

// mixedParams returns four random parameters, vectors and matrices
// interleaved, the matrices taking weight decay.
func mixedParams() []*nn.Parameter {
	r := tensor.NewRNG(5)
	var ps []*nn.Parameter
	for i, shape := range [][]int{{3}, {7, 5}, {5}, {3, 4}} {
		p := nn.NewParameter(string(rune('a'+i)), tensor.Randn(tensor.CPU, r, 1, shape...))
		p.Decay = len(shape) == 2
		ps = append(ps, p)
	}
	return ps
}

// TestPackedStepIsUnpacked packs an optimizer and holds its steps to an
// unpacked one's, bit for bit: parameters, moments, and what the model
// sees through its own tensors (views of the flat buffers now). Zeroing
// clears every gradient; ClipCoef's norm is the per-parameter one up to
// rounding.
func TestPackedStepIsUnpacked(t *testing.T) {
	cfg := AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1}
	plain, packed := mixedParams(), mixedParams()
	po, ko := NewAdamW(plain, cfg), NewAdamW(packed, cfg)
	a := packed[1].T // the model's handle on a parameter, kept across the packing
	if !ko.Pack() || ko.packed == nil || ko.packed.all.decayEnd != 7*5+3*4 {
		t.Fatal("the optimizer did not pack its decayed parameters first, ending where the others start")
	}
	if a != packed[1].T || a.Grad == nil {
		t.Fatal("packing replaced the parameter's tensor or left it without a gradient")
	}
	rng := tensor.NewRNG(9)
	acc, coef, stats := tensor.Zeros(tensor.CPU), tensor.Zeros(tensor.CPU), tensor.NewStats(tensor.CPU)
	for step := 1; step <= 3; step++ {
		for i := range plain {
			g := tensor.Randn(tensor.CPU, rng, 1, plain[i].T.Shape()...)
			plain[i].T.Grad = g
			packed[i].T.Grad.CopyFrom(g) // the backward pass accumulates into the view
		}
		norm := ClipGradNorm(plain, 0)
		po.Step()
		ko.ClipCoef(0, acc, coef, stats, step)
		ko.StepScaled(coef)
		if got := float64(stats.Float32s()[2]); math.Abs(got-norm) > 1e-5*norm {
			t.Errorf("step %d: packed norm %v, per-parameter %v", step, got, norm)
		}
		ko.ZeroGrad()
		for i, p := range packed {
			for _, v := range p.T.Grad.Float32s() {
				if v != 0 {
					t.Fatalf("ZeroGrad left %s's gradient at %v", packed[i].Name, v)
				}
			}
		}
	}
	for i := range plain {
		if !testenv.SameBits(plain[i].T.Float32s(), packed[i].T.Float32s()) || !testenv.SameBits(po.M[i].Float32s(), ko.M[i].Float32s()) ||
			!testenv.SameBits(po.V[i].Float32s(), ko.V[i].Float32s()) {
			t.Errorf("%s: the packed optimizer's parameter or moments differ from the unpacked one's", plain[i].Name)
		}
	}
	ko.Free()
}

// TestKeepHalf: an optimizer's bf16 copies are each parameter rounded to
// bf16, bit for bit, after KeepHalf and after every step (written in the
// update's pass, with the decayed and the other parameters), unpacked,
// then packed (the copies moved into one flat buffer), and RefreshHalf
// puts them right after the parameters are written some other way.
func TestKeepHalf(t *testing.T) {
	r := tensor.NewRNG(6)
	ps := mixedParams()
	o := NewAdamW(ps, AdamWConfig{LR: 0.05, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1})
	check := func(when string) {
		t.Helper()
		for _, p := range ps {
			h := p.T.Half()
			if h == nil || h.DType() != tensor.BF16 || !h.Shape().Equal(p.T.Shape()) {
				t.Fatalf("%s: %s's half copy is %v", when, p.Name, h)
			}
			want := tensor.Cast(p.T.Detach(), tensor.BF16).Float32s()
			if !testenv.SameBits(h.Float32s(), want) {
				t.Fatalf("%s: %s's half copy is not the parameter rounded to bf16", when, p.Name)
			}
		}
	}
	steps := func(when string) {
		t.Helper()
		for step := 1; step <= 2; step++ {
			for _, p := range ps {
				g := tensor.Randn(tensor.CPU, r, 1, p.T.Shape()...)
				if p.T.Grad == nil {
					p.T.Grad = g
				} else {
					p.T.Grad.CopyFrom(g)
				}
			}
			before := ps[1].T.Half().Float32s()
			o.Step()
			if testenv.SameBits(before, ps[1].T.Half().Float32s()) {
				t.Fatal("a step left the half copy as it was")
			}
			check(when)
		}
	}
	// Unpacked: each parameter's own copy, updated by its own step.
	o.KeepHalf()
	check("after KeepHalf, unpacked")
	steps("after an unpacked step")
	// Packing moves the copies into one flat buffer.
	if !o.Pack() {
		t.Fatal("Pack failed")
	}
	if o.Half() == nil {
		t.Fatal("packing left the copies unpacked")
	}
	check("after Pack")
	steps("after a packed step")
	o.KeepHalf()
	check("after KeepHalf again")
	ps[3].T.CopyFrom(tensor.Randn(tensor.CPU, r, 1, 3, 4)) // a load, say
	o.RefreshHalf()
	check("after RefreshHalf")
	o.Free()
	for _, p := range ps {
		if p.T.Half() != nil {
			t.Fatalf("%s keeps a half copy after Free", p.Name)
		}
	}
}

// TestShardedStepIsUnsharded: the shards of a flat buffer, each stepped
// by its own optimizer (ZeRO-1's ranks, given the same gradients), put
// together are the unsharded optimizer's step bit for bit, parameters and
// moments, with the weight decay's boundary inside a shard; each keeps
// only its shard's moments, and their sums of squares add up to the
// whole's.
func TestShardedStepIsUnsharded(t *testing.T) {
	cfg := AdamWConfig{LR: 0.01, Beta1: 0.9, Beta2: 0.95, WeightDecay: 0.1}
	whole := NewAdamW(mixedParams(), cfg)
	if !whole.Pack() {
		t.Fatal("Pack failed")
	}
	n := whole.PackedParams().Numel()
	cuts := []int{0, 20, 50, n} // the decayed elements (7×5 + 3×4 = 47) end inside the second shard
	var shards []*AdamW
	for i := 0; i+1 < len(cuts); i++ {
		o := NewAdamW(mixedParams(), cfg)
		if !o.Pack() || !o.Shard(cuts[i], cuts[i+1]) {
			t.Fatal("Shard failed")
		}
		if lo, hi, ok := o.ShardRange(); !ok || lo != cuts[i] || hi != cuts[i+1] || o.StateBytes() != int64(8*(hi-lo)) {
			t.Fatalf("shard %d: range %d-%d %v, state %d bytes", i, lo, hi, ok, o.StateBytes())
		}
		shards = append(shards, o)
	}
	r := tensor.NewRNG(3)
	acc := tensor.Zeros(tensor.CPU)
	for step := 1; step <= 3; step++ {
		g := tensor.Randn(tensor.CPU, r, 1, n)
		whole.PackedGrads().CopyFrom(g)
		whole.GradSumSquares(acc)
		want := float64(acc.Item())
		whole.Step()
		sum := 0.0
		for _, o := range shards {
			o.PackedGrads().CopyFrom(g)
			o.GradSumSquares(acc)
			sum += float64(acc.Item())
			o.Step()
		}
		if math.Abs(sum-want) > 1e-5*want {
			t.Errorf("step %d: the shards' sums of squares add to %v, the whole's is %v", step, sum, want)
		}
	}
	wp := whole.PackedParams().Float32s()
	wm, wv := whole.Moments()
	wmv, wvv := wm.Float32s(), wv.Float32s()
	for i, o := range shards {
		lo, hi, _ := o.ShardRange()
		m, v := o.Moments()
		if !testenv.SameBits(o.PackedParams().Float32s()[lo:hi], wp[lo:hi]) ||
			!testenv.SameBits(m.Float32s()[:hi-lo], wmv[lo:hi]) || !testenv.SameBits(v.Float32s()[:hi-lo], wvv[lo:hi]) {
			t.Errorf("shard %d (%d-%d): parameters or moments differ from the unsharded step's", i, lo, hi)
		}
		if rest := o.PackedParams().Float32s(); lo > 0 && testenv.SameBits(rest[:lo], wp[:lo]) {
			t.Errorf("shard %d updated parameters outside its range", i)
		}
	}
}

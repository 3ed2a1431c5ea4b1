package cpu

import "github.com/fleetml/fleet/backend"

// The activation kernels (LayerNorm, the fused adds, GELU, dropout,
// attention, cross-entropy, the elementwise ops and reductions, the
// embedding gather and its gradient, and the products' outputs) compute in
// float32 on F32 storage. For BF16 storage, as bf16 activations have it
// (autocast), they widen: each BF16
// operand is copied into F32 scratch, the F32 kernel runs, and each BF16
// output is rounded back (to nearest even), so a BF16 call gives exactly
// the F32 kernel's results on the widened inputs, rounded. Scratch comes
// from the buffer pool. Speed is not the point yet: it is correct, and
// its cost is an extra pass over each operand.

// widening collects one call's widened operands.
type widening struct {
	c    *CPU
	outs []wideOut
	tmp  []backend.Storage
}

type wideOut struct {
	dst, src backend.Ref
	n        int
}

// isBF16 reports whether r is a BF16 operand (a Nil ref is not).
func isBF16(r backend.Ref) bool { return !r.Nil() && r.S.(*Buffer).dt == backend.BF16 }

// anyBF16 reports whether any of the refs is BF16.
func anyBF16(refs ...backend.Ref) bool {
	for _, r := range refs {
		if isBF16(r) {
			return true
		}
	}
	return false
}

// in returns r as F32: r itself, or n elements of it widened into scratch.
func (w *widening) in(r backend.Ref, n int) backend.Ref {
	if !isBF16(r) {
		return r
	}
	s := w.scratch(n)
	w.c.Cast(s, r, n)
	return s
}

// out returns where the F32 kernel writes r's n elements: r itself, or
// scratch rounded into r by done.
func (w *widening) out(r backend.Ref, n int) backend.Ref {
	if !isBF16(r) {
		return r
	}
	s := w.scratch(n)
	w.outs = append(w.outs, wideOut{r, s, n})
	return s
}

// inout is in and out at once, for an operand read and then written (an
// accumulator): its n elements widened into scratch, rounded back by done.
func (w *widening) inout(r backend.Ref, n int) backend.Ref {
	if !isBF16(r) {
		return r
	}
	s := w.in(r, n)
	w.outs = append(w.outs, wideOut{r, s, n})
	return s
}

// dst is out, or inout where the kernel reads r's elements before it
// writes them (read: an accumulator, a product's C with beta).
func (w *widening) dst(r backend.Ref, n int, read bool) backend.Ref {
	if read {
		return w.inout(r, n)
	}
	return w.out(r, n)
}

// extent is how many elements r's storage holds from its offset on (a
// table whose rows an op indexes).
func extent(r backend.Ref) int { return r.S.Len() - r.Off }

func (w *widening) scratch(n int) backend.Ref {
	s := w.c.Alloc(backend.F32, max(n, 1))
	w.tmp = append(w.tmp, s)
	return backend.Ref{S: s}
}

// done rounds the outputs into their BF16 refs and frees the scratch.
func (w *widening) done() {
	for _, o := range w.outs {
		w.c.Cast(o.dst, o.src, o.n)
	}
	for _, s := range w.tmp {
		w.c.Free(s)
	}
}

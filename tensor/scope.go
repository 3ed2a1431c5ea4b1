package tensor

import "fmt"

// A Scope collects the tensors made while it is the innermost scope of
// their device's program, and frees them all at once: storages they own go
// back to their device pools, and the tensors are marked freed so that a
// later use panics instead of reading recycled memory. Scopes belong to a
// Program and, like it, are driven by one goroutine at a time.
//
// Every Step runs in a scope of its own, which the program makes, pushes
// on its stack of scopes and frees when the step ends. A scope made by
// NewScope (or a zero Scope) is a detached one: it is on the stack only
// while In runs a function in it, and it is freed when its owner calls
// Free, in any order with other detached scopes. The stages of a pipeline
// keep each micro-batch's forward graph in a detached scope of its own
// from the forward pass to the end of the backward pass, and free it
// then, instead of keeping every micro-batch alive until the step ends.
type Scope struct {
	p       *Program  // the program; nil for a zero Scope before its first In
	tensors []*Tensor // tracked, in the order they were made
	step    bool      // a step's (or Recompute's) scope, freed when popped
	onStack bool      // a detached scope inside In
}

// Tensor headers made inside a scope are recycled, so a steady-state step
// allocates nothing on the Go heap. A header is quarantined after its
// scope ends until the next end of a step scope of the same program as deep
// or shallower: using a tensor of the previous step still panics with
// "freed" instead of silently reading a newer tensor, even when scopes
// nested in the step (Recompute's) end many times before it does. The
// headers a detached scope's Free frees join the innermost step scope
// open at that moment, whose end frees them again (a no-op) and
// quarantines them with its own: they are as safe to misuse as the
// step's own tensors. Each program keeps its own free list and quarantine
// (Program.freeHeaders and Program.heldHeaders).

// newHeader returns a zeroed tensor header: a recycled one for tensors the
// current scope of p will own, a new one otherwise.
func (p *Program) newHeader() *Tensor {
	if len(p.scopes) > 0 && p.persistent == 0 && len(p.freeHeaders) > 0 {
		t := p.freeHeaders[len(p.freeHeaders)-1]
		p.freeHeaders[len(p.freeHeaders)-1] = nil
		p.freeHeaders = p.freeHeaders[:len(p.freeHeaders)-1]
		*t = Tensor{}
		return t
	}
	return new(Tensor)
}

// track adds t to p's innermost scope; outside any scope of p, or inside
// Persist, t is not tracked and lives until Free.
func (p *Program) track(t *Tensor) {
	if len(p.scopes) == 0 || p.persistent > 0 {
		return
	}
	s := p.scopes[len(p.scopes)-1]
	s.tensors = append(s.tensors, t)
	t.scope = s
}

// Step runs fn in a memory scope of the default program: see
// Program.Step.
func Step(fn func()) { defaultProgram.Step(fn) }

// Step runs fn in a memory scope: every tensor made inside on a device p
// drives is freed when fn returns (or panics), except those made inside
// Persist or inside In (which go to In's scope). Steps nest. Tensors made
// inside on a device another program drives go to that program's
// innermost scope, or, when it has none, are not tracked at all (as if
// made inside Persist).
func (p *Program) Step(fn func()) {
	s := p.pushScope()
	defer p.endScope(s)
	fn()
}

// NewScope returns a detached scope of the default program: see
// Program.NewScope.
func NewScope() *Scope { return defaultProgram.NewScope() }

// NewScope returns an empty detached scope of p: one that is not on p's
// stack of scopes until In runs a function in it, and whose tensors live
// until its Free, however the steps around it begin and end. A Scope is
// reusable after Free, so a caller that keeps its scopes from one step to
// the next allocates none in a steady state. The zero Scope is an empty
// detached scope too, which becomes the scope of the program of its first
// In. A Scope must not be copied once used.
func (p *Program) NewScope() *Scope { return &Scope{p: p} }

// In runs fn in the detached scope s of the default program: see
// Program.In.
func In(s *Scope, fn func()) { defaultProgram.In(s, fn) }

// In runs fn with s as p's innermost scope: the tensors made inside on p's
// devices, outside Persist and outside scopes opened inside (a nested
// Step's, a Recompute's), are tracked by s rather than by the enclosing
// step. When fn returns (or panics) s comes off the stack but is not
// freed: its tensors stay alive, across the end of the enclosing step
// too, until s.Free. In may run in the same scope any number of times (a
// micro-batch's forward pass, later its backward pass), inside a Step or
// outside any.
//
// A Backward run inside In(s) releases the graph nodes of the tensors s
// tracks only: the tensors of other scopes it reaches (made by the
// enclosing step and read by every micro-batch, say) are only read, so
// that the Backward of another micro-batch may go through them again.
//
// It panics with a *Error when s is a scope of another program, or is on
// p's stack already (an In in s is running).
func (p *Program) In(s *Scope, fn func()) {
	switch {
	case s == nil:
		panic(&Error{Op: "in", Msg: "nil scope"})
	case s.step:
		panic(&Error{Op: "in", Msg: "a step's scope"})
	case s.onStack:
		panic(&Error{Op: "in", Msg: fmt.Sprintf("the scope is on the stack of %v already", s.p)})
	case s.p == nil:
		s.p = p
	case s.p != p:
		panic(&Error{Op: "in", Msg: fmt.Sprintf("a scope of %v run in %v", s.p, p)})
	}
	s.onStack = true
	p.scopes = append(p.scopes, s)
	defer p.popDetached(s)
	fn()
}

// popDetached takes s, p's innermost scope, off the stack without freeing
// it.
func (p *Program) popDetached(s *Scope) {
	p.scopes[len(p.scopes)-1] = nil
	p.scopes = p.scopes[:len(p.scopes)-1]
	s.onStack = false
}

// Len is the number of tensors s tracks.
func (s *Scope) Len() int { return len(s.tensors) }

// Free frees what s tracks, as the end of a step frees what the step's
// scope tracks: storages go back to their device pools, the tensors are
// marked freed (a later use panics), their graph references are dropped,
// Recompute records whose backward pass never ran go back to their pool,
// and the gradients Backward made (in Persist) for leaves s tracks are
// freed. s is left empty and may be used again by In. Freeing an empty
// scope does nothing.
//
// Call it on the goroutine that drives s's program, after the last use of
// s's tensors, and before the step whose tensors s's graphs read ends.
// The freed tensors' headers join the tensors of the innermost step open
// at the time of the Free and are recycled no sooner than that step's
// own: using one panics with "freed" at least until the end of the next
// step as deep. Outside any step, they are held until the next Free of a
// detached scope, or end of a step, made outside any step. Free panics
// with a *Error when s is on its program's stack (inside an In in s).
func (s *Scope) Free() {
	if s.onStack {
		panic(&Error{Op: "free_scope", Msg: fmt.Sprintf("the scope is on the stack of %v: free it after In returns", s.p)})
	}
	if len(s.tensors) == 0 {
		return
	}
	p := s.p
	p.freeTracked(s.tensors)
	if st := p.innermostStep(); st != nil {
		// Quarantined with st's own tensors when st ends.
		st.tensors = append(st.tensors, s.tensors...)
	} else {
		p.quarantine(0, s.tensors)
	}
	clear(s.tensors)
	s.tensors = s.tensors[:0]
}

// innermostStep returns p's innermost step scope, nil when none is open.
func (p *Program) innermostStep() *Scope {
	for i := len(p.scopes) - 1; i >= 0; i-- {
		if p.scopes[i].step {
			return p.scopes[i]
		}
	}
	return nil
}

// innermostDetached returns p's innermost detached scope on the stack,
// nil when there is none.
func (p *Program) innermostDetached() *Scope {
	for i := len(p.scopes) - 1; i >= 0; i-- {
		if !p.scopes[i].step {
			return p.scopes[i]
		}
	}
	return nil
}

// pushScope makes a new innermost step scope.
func (p *Program) pushScope() *Scope {
	var s *Scope
	if n := len(p.spareScopes); n > 0 {
		s = p.spareScopes[n-1]
		p.spareScopes[n-1] = nil
		p.spareScopes = p.spareScopes[:n-1]
	} else {
		s = &Scope{p: p, step: true}
	}
	p.scopes = append(p.scopes, s)
	return s
}

// endScope frees what s tracked and recycles its headers.
func (p *Program) endScope(s *Scope) { p.endScopeKeeping(s, nil) }

// endScopeKeeping ends s, p's innermost scope, a step scope, like
// endScope, except that the tensors *keep[i] (nil ones skipped) survive
// into the enclosing scope: one s owns is handed over to it; a view of
// storage s frees is replaced by a copy made there. Tensors s did not
// track are left as they are.
func (p *Program) endScopeKeeping(s *Scope, keep []**Tensor) {
	p.scopes[len(p.scopes)-1] = nil
	p.scopes = p.scopes[:len(p.scopes)-1]
	for _, k := range keep {
		if *k != nil {
			*k = p.handOver(s, *k)
		}
	}
	p.freeTracked(s.tensors)
	p.quarantine(len(p.scopes), s.tensors) // s's depth
	clear(s.tensors)
	s.tensors = s.tensors[:0]
	p.spareScopes = append(p.spareScopes, s)
}

// freeTracked frees the tensors ts, tracked by a scope that ends. Freeing
// a tensor twice does nothing the second time.
func (p *Program) freeTracked(ts []*Tensor) {
	for _, t := range ts {
		if t.owns && !t.freed {
			t.be.Free(t.st)
		}
		t.freed = true
		t.node = nil
		if t.nd.ck != nil { // a Recompute whose backward pass never ran
			p.releaseRecomp(t.nd.ck)
		}
		t.nd = node{} // drop references to other tensors
		t.pending = nil
		if t.Grad != nil { // made in Persist by Backward; unreachable once t is gone
			t.Grad.Free()
		}
		t.Grad = nil
		t.scope = nil
	}
}

// quarantine holds the headers ts, freed by the end of a scope d deep,
// until the next end of a scope as deep or shallower, and makes reusable
// those that such an end releases: all held d deep or deeper.
func (p *Program) quarantine(d int, ts []*Tensor) {
	for len(p.heldHeaders) <= d {
		p.heldHeaders = append(p.heldHeaders, nil)
	}
	for i := d; i < len(p.heldHeaders); i++ {
		p.freeHeaders = append(p.freeHeaders, p.heldHeaders[i]...)
		clear(p.heldHeaders[i])
		p.heldHeaders[i] = p.heldHeaders[i][:0]
	}
	p.heldHeaders[d] = append(p.heldHeaders[d], ts...)
}

// handOver moves t from the ended scope s to p's current one (see
// endScopeKeeping) and returns the tensor that lives on.
func (p *Program) handOver(s *Scope, t *Tensor) *Tensor {
	for i := len(s.tensors) - 1; i >= 0; i-- {
		if s.tensors[i] != t {
			continue
		}
		if !t.owns {
			return t.Clone() // a view: its storage may be freed with s
		}
		last := len(s.tensors) - 1
		s.tensors[i] = s.tensors[last]
		s.tensors[last] = nil
		s.tensors = s.tensors[:last]
		t.scope = nil
		p.track(t)
		return t
	}
	return t
}

// Persist runs fn with the default program's step scoping suspended: see
// Program.Persist.
func Persist(fn func()) { defaultProgram.Persist(fn) }

// Persist runs fn with p's step scoping suspended: tensors made inside on
// p's devices outlive the current step. Optimizers and Backward use it for
// state and leaf gradients.
func (p *Program) Persist(fn func()) {
	p.persistent++
	defer func() { p.persistent-- }()
	fn()
}

// NoGrad runs fn with the default program's gradient recording off.
func NoGrad(fn func()) { defaultProgram.NoGrad(fn) }

// NoGrad runs fn with gradient recording off for ops on p's devices.
func (p *Program) NoGrad(fn func()) {
	prev := p.gradEnabled
	p.gradEnabled = false
	defer func() { p.gradEnabled = prev }()
	fn()
}

// GradEnabled reports whether ops on the default program's devices record
// the tape.
func GradEnabled() bool { return defaultProgram.gradEnabled }

// GradEnabled reports whether ops on p's devices record the tape.
func (p *Program) GradEnabled() bool { return p.gradEnabled }

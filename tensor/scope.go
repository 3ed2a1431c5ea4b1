package tensor

// A scope collects the tensors made while it is the innermost scope of
// their device's program. When it ends, storages they own go back to
// their device pools, and the tensors are marked freed so a later use
// panics instead of reading recycled memory. Scopes belong to a Program
// and, like it, are driven by one goroutine at a time.
type scope struct {
	tensors []*Tensor
}

// Tensor headers made inside a step are recycled, so a steady-state step
// allocates nothing on the Go heap. A header is quarantined after its
// scope ends until the next end of a scope of the same program as deep or
// shallower: using a tensor of the previous step still panics with "freed"
// instead of silently reading a newer tensor, even when scopes nested in
// the step (Checkpoint's) end many times before it does. Each program
// keeps its own free list and quarantine (Program.freeHeaders and
// Program.heldHeaders).

// newHeader returns a zeroed tensor header: a recycled one for tensors the
// current step scope of p will own, a new one otherwise.
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

// track adds t to p's innermost scope; outside any step of p, or inside
// Persist, t is not tracked and lives until Free.
func (p *Program) track(t *Tensor) {
	if len(p.scopes) == 0 || p.persistent > 0 {
		return
	}
	s := p.scopes[len(p.scopes)-1]
	s.tensors = append(s.tensors, t)
}

// Step runs fn in a memory scope of the default program: see
// Program.Step.
func Step(fn func()) { defaultProgram.Step(fn) }

// Step runs fn in a memory scope: every tensor made inside on a device p
// drives is freed when fn returns (or panics), except those made inside
// Persist. Steps nest. Tensors made inside on a device another program
// drives go to that program's innermost scope, or, when it has none, are
// not tracked at all (as if made inside Persist).
func (p *Program) Step(fn func()) {
	s := p.pushScope()
	defer p.endScope(s)
	fn()
}

// pushScope makes a new innermost scope.
func (p *Program) pushScope() *scope {
	var s *scope
	if n := len(p.spareScopes); n > 0 {
		s = p.spareScopes[n-1]
		p.spareScopes = p.spareScopes[:n-1]
	} else {
		s = &scope{}
	}
	p.scopes = append(p.scopes, s)
	return s
}

// endScope frees what s tracked and recycles its headers.
func (p *Program) endScope(s *scope) { p.endScopeKeeping(s, nil) }

// endScopeKeeping ends s, p's innermost scope, like endScope, except that
// the tensors *keep[i] (nil ones skipped) survive into the enclosing scope:
// one s owns is handed over to it; a view of storage s frees is replaced
// by a copy made there. Tensors s did not track are left as they are.
func (p *Program) endScopeKeeping(s *scope, keep []**Tensor) {
	p.scopes = p.scopes[:len(p.scopes)-1]
	for _, k := range keep {
		if *k != nil {
			*k = p.handOver(s, *k)
		}
	}
	for _, t := range s.tensors {
		if t.owns && !t.freed {
			t.be.Free(t.st)
		}
		t.freed = true
		t.node = nil
		if t.nd.ck != nil { // a Checkpoint whose backward pass never ran
			p.releaseCkpt(t.nd.ck)
		}
		t.nd = node{} // drop references to other tensors
		t.pending = nil
		if t.Grad != nil { // made in Persist by Backward; unreachable once t is gone
			t.Grad.Free()
		}
		t.Grad = nil
	}
	d := len(p.scopes) // s's depth
	for len(p.heldHeaders) <= d {
		p.heldHeaders = append(p.heldHeaders, nil)
	}
	for i := d; i < len(p.heldHeaders); i++ {
		p.freeHeaders = append(p.freeHeaders, p.heldHeaders[i]...)
		clear(p.heldHeaders[i])
		p.heldHeaders[i] = p.heldHeaders[i][:0]
	}
	p.heldHeaders[d] = append(p.heldHeaders[d], s.tensors...)
	clear(s.tensors)
	s.tensors = s.tensors[:0]
	p.spareScopes = append(p.spareScopes, s)
}

// handOver moves t from the ended scope s to p's current one (see
// endScopeKeeping) and returns the tensor that lives on.
func (p *Program) handOver(s *scope, t *Tensor) *Tensor {
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

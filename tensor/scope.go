package tensor

// A scope collects the tensors made while it is the innermost scope. When
// it ends, storages they own go back to their device pools, and the
// tensors are marked freed so a later use panics instead of reading
// recycled memory. Scopes are not safe for concurrent use: drive one
// device's tensor program from one goroutine.
type scope struct {
	tensors []*Tensor
}

var (
	scopes      []*scope
	spareScopes []*scope
	persistent  int // >0 inside Persist: allocations are not scoped
	gradEnabled = true
)

// Tensor headers made inside a step are recycled, so a steady-state step
// allocates nothing on the Go heap. A header is quarantined after its
// scope ends until the next end of a scope as deep or shallower: using a
// tensor of the previous step still panics with "freed" instead of
// silently reading a newer tensor, even when scopes nested in the step
// (Checkpoint's) end many times before it does.
var (
	freeHeaders []*Tensor   // reusable
	heldHeaders [][]*Tensor // [d]: freed at the last end of a scope d deep, not yet reusable
)

// newHeader returns a zeroed tensor header: a recycled one for tensors the
// current step scope will own, a new one otherwise.
func newHeader() *Tensor {
	if len(scopes) > 0 && persistent == 0 && len(freeHeaders) > 0 {
		t := freeHeaders[len(freeHeaders)-1]
		freeHeaders[len(freeHeaders)-1] = nil
		freeHeaders = freeHeaders[:len(freeHeaders)-1]
		*t = Tensor{}
		return t
	}
	return new(Tensor)
}

func track(t *Tensor) {
	if len(scopes) == 0 || persistent > 0 {
		return
	}
	s := scopes[len(scopes)-1]
	s.tensors = append(s.tensors, t)
}

// Step runs fn in a memory scope: every tensor made inside is freed when fn
// returns (or panics), except those made inside Persist. Steps nest.
func Step(fn func()) {
	s := pushScope()
	defer endScope(s)
	fn()
}

// pushScope makes a new innermost scope.
func pushScope() *scope {
	var s *scope
	if n := len(spareScopes); n > 0 {
		s = spareScopes[n-1]
		spareScopes = spareScopes[:n-1]
	} else {
		s = &scope{}
	}
	scopes = append(scopes, s)
	return s
}

// endScope frees what s tracked and recycles its headers.
func endScope(s *scope) { endScopeKeeping(s, nil) }

// endScopeKeeping ends s, the innermost scope, like endScope, except that
// the tensors *keep[i] (nil ones skipped) survive into the enclosing scope:
// one s owns is handed over to it; a view of storage s frees is replaced
// by a copy made there. Tensors s did not track are left as they are.
func endScopeKeeping(s *scope, keep []**Tensor) {
	scopes = scopes[:len(scopes)-1]
	for _, p := range keep {
		if *p != nil {
			*p = handOver(s, *p)
		}
	}
	for _, t := range s.tensors {
		if t.owns && !t.freed {
			t.be.Free(t.st)
		}
		t.freed = true
		t.node = nil
		if t.nd.ck != nil { // a Checkpoint whose backward pass never ran
			releaseCkpt(t.nd.ck)
		}
		t.nd = node{} // drop references to other tensors
		t.pending = nil
		if t.Grad != nil { // made in Persist by Backward; unreachable once t is gone
			t.Grad.Free()
		}
		t.Grad = nil
	}
	d := len(scopes) // s's depth
	for len(heldHeaders) <= d {
		heldHeaders = append(heldHeaders, nil)
	}
	for i := d; i < len(heldHeaders); i++ {
		freeHeaders = append(freeHeaders, heldHeaders[i]...)
		clear(heldHeaders[i])
		heldHeaders[i] = heldHeaders[i][:0]
	}
	heldHeaders[d] = append(heldHeaders[d], s.tensors...)
	clear(s.tensors)
	s.tensors = s.tensors[:0]
	spareScopes = append(spareScopes, s)
}

// handOver moves t from the ended scope s to the current one (see
// endScopeKeeping) and returns the tensor that lives on.
func handOver(s *scope, t *Tensor) *Tensor {
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
		track(t)
		return t
	}
	return t
}

// Persist runs fn with step scoping suspended: tensors made inside outlive
// the current step. Optimizers and Backward use it for state and leaf
// gradients.
func Persist(fn func()) {
	persistent++
	defer func() { persistent-- }()
	fn()
}

// NoGrad runs fn with gradient recording off.
func NoGrad(fn func()) {
	prev := gradEnabled
	gradEnabled = false
	defer func() { gradEnabled = prev }()
	fn()
}

// GradEnabled reports whether ops record the tape.
func GradEnabled() bool { return gradEnabled }

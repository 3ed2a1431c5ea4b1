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
	persistent  int // >0 inside Persist: allocations are not scoped
	gradEnabled = true
)

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
	s := &scope{}
	scopes = append(scopes, s)
	defer func() {
		scopes = scopes[:len(scopes)-1]
		for _, t := range s.tensors {
			if t.owns && !t.freed {
				t.be.Free(t.st)
			}
			t.freed = true
			t.node = nil
			if t.Grad != nil { // made in Persist by Backward; unreachable once t is gone
				t.Grad.Free()
			}
			t.Grad = nil
		}
	}()
	fn()
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

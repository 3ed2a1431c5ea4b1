package tensor

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// Pack moves ts, tensors of one device and dtype that no step scope owns
// (parameters, optimizer state), into one new flat tensor [Σ sizes], in
// order. Each keeps its shape and values and becomes a view of its stretch
// of the flat storage: the same *Tensor, so whatever holds it sees the
// move. Their old storage is freed. With grads, each one's gradient also
// becomes a view of a second flat tensor (F32, zeros; gradients held
// before are dropped), which Pack returns too. Optimizers pack what they
// update, so that one kernel launch updates, zeroes or measures all of it.
// The flat tensors belong to the caller, who frees them (Free) when the
// tensors in them are no longer used.
func Pack(ts []*Tensor, grads bool) (flat, flatGrad *Tensor) {
	if len(ts) == 0 {
		panic(&Error{Op: "pack", Msg: "nothing to pack"})
	}
	dev, dt := ts[0].dev, ts[0].dtype
	total := 0
	for _, t := range ts {
		if t.dev != dev || t.dtype != dt {
			panic(&Error{Op: "pack", Msg: "tensors of different devices or dtypes", Operands: []*Tensor{ts[0], t}})
		}
		if t.freed || t.scope != nil {
			panic(&Error{Op: "pack", Msg: "a freed tensor, or one a step scope owns", Operands: []*Tensor{t}})
		}
		total += t.Numel()
	}
	p := ProgramOf(dev)
	p.Persist(func() {
		flat = Empty(dev, dt, total)
		if grads {
			defer func() {
				if e := recover(); e != nil { // out of memory, say: nothing moved yet
					flat.Free()
					panic(e)
				}
			}()
			flatGrad = Zeros(dev, total)
		}
	})
	off := 0
	for _, t := range ts {
		n := t.Numel()
		flat.be.Copy(backend.Ref{S: flat.st, Off: flat.off + off}, t.ref(), n)
		if t.owns {
			t.be.Free(t.st)
		}
		t.st, t.off, t.owns = flat.st, flat.off+off, false
		if grads {
			if t.Grad != nil {
				t.Grad.Free()
			}
			p.Persist(func() { t.Grad = flatGrad.view(t.shape, flatGrad.off+off) })
		}
		off += n
	}
	if off != total {
		panic(fmt.Sprintf("tensor: pack placed %d of %d elements", off, total))
	}
	return flat, flatGrad
}

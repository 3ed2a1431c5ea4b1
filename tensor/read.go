package tensor

import (
	"fmt"

	"github.com/fleetml/fleet/backend"
)

// ReadFloat32s copies an F32 tensor's elements into dst, which must hold
// exactly Numel values; unlike Float32s it allocates nothing, so callers
// can reuse host buffers (checkpoint snapshots do).
func (t *Tensor) ReadFloat32s(dst []float32) {
	if t.dtype != F32 || len(dst) != t.Numel() {
		panic(&Error{Op: "read_float32s", Msg: fmt.Sprintf("%d values into an f32 buffer", len(dst)), Operands: []*Tensor{t}})
	}
	t.be.Download(backend.AsBytes(dst), t.ref())
}

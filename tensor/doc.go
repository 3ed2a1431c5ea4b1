// Package tensor is fleet's tensor library: n-dimensional arrays that live
// on a device, the op API that dispatches each op to its device's backend,
// reverse-mode automatic differentiation on a tape, and step memory scopes.
//
// A Tensor has a Shape, a DType and a Device. Ops on tensors from different
// devices, or with mismatched shapes or dtypes, panic with a *Error that
// names the op and its operands; callers at a user boundary recover it with
// Catch. There is never a silent copy between devices: use To.
//
// Differentiable ops record a node on the tape when an operand requires a
// gradient. Backward walks the nodes in reverse topological order and
// accumulates into the Grad of leaf tensors until ZeroGrad. NoGrad turns
// recording off.
//
// Everything allocated inside Step(fn) is returned to the device's pool
// when fn returns, so the garbage collector never decides when device
// memory comes back. Persistent tensors (parameters, gradients, optimizer
// state) are made outside any step, or inside Persist.
package tensor

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
//
// Steps nest, and free their tensors in the reverse order they began. A
// detached Scope (NewScope) frees its tensors when its owner says so
// instead: In(s, fn) runs fn with s as the innermost scope, and leaves the
// tensors made inside alive, across the end of the step around it, until
// s.Free. A pipeline stage runs each micro-batch's forward pass and,
// later, its backward pass in the micro-batch's scope, and frees the
// scope right after the backward pass, so that a 1F1B schedule holds only
// the micro-batches in flight.
//
// # Programs
//
// The scopes, the gradient mode, the autocast policy, the Backward hook and
// the working memory behind them belong to a Program, which drives a set of
// devices. NewProgram claims devices for a program of their own; the
// default program (DefaultProgram) drives every other device, and the
// package-level Step, Persist, NoGrad, Autocast, GradEnabled and
// SetGradReadyHook act on it. Ops find the program from their tensors'
// device (ProgramOf): an op's output is tracked by the innermost scope of
// its device's program and recorded under that program's modes, Backward
// runs in the program of the tensor it starts from, and Recompute in the
// program of its inputs.
//
// One goroutine at a time drives a program. Two programs may run at the
// same time on different goroutines, such as the stages of a pipeline on
// devices of their own, as long as each touches only tensors on its own
// devices, except that a program may read a tensor of another program that
// the other no longer changes (a detached stage output handed over a
// channel) and copy it to its own device with To, before the other's step
// frees it. A Backward must not reach tensors of another program: it
// panics with a *Error where it would.
package tensor

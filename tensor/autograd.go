package tensor

import (
	"fmt"
	"sync/atomic"
)

// backwardFn computes the gradients of n's inputs from g, the gradient of
// the node's output, into n.gin (nil where an input needs none). Backward
// functions are plain top-level functions: a node holds what they need in
// its fields, so recording an op allocates nothing.
type backwardFn func(n *node, g *Tensor)

// node is one recorded op. It lives inside its output tensor, so it shares
// the tensor's lifetime and costs no allocation of its own.
type node struct {
	op    string
	back  backwardFn
	in    [3]*Tensor // inputs; nil where an optional one was left out
	nin   int
	saved [3]*Tensor // tensors the backward pass reads besides the inputs
	i     [2]int     // small integer parameters (heads, offsets)
	f     float32    // a scalar parameter
	u     uint64     // a 64-bit parameter (a dropout mask's seed)
	gin   [3]*Tensor // the backward pass's result
	ck    *recomp    // a Recompute's record; its edges replace in
}

// edges is the number of tensors the node's gradient flows to: its inputs,
// or for a Recompute its inputs and the leaves its function reads.
func (n *node) edges() int {
	if n.ck != nil {
		return len(n.ck.inputs) + len(n.ck.leaves)
	}
	return n.nin
}

// edge returns the i-th of the node's edges.
func (n *node) edge(i int) *Tensor {
	if c := n.ck; c != nil {
		if i < len(c.inputs) {
			return c.inputs[i]
		}
		return c.leaves[i-len(c.inputs)]
	}
	return n.in[i]
}

// record attaches a node to out when any input requires a gradient, and
// returns it so the op can fill in what its backward pass needs; it
// returns nil when nothing is recorded.
func record(out *Tensor, op string, back backwardFn, inputs ...*Tensor) *node {
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
			// The mode of the program the op ran in, looked up only for
			// ops that would record.
			if !ProgramOf(out.dev).gradEnabled {
				return nil
			}
			n := &out.nd
			*n = node{op: op, back: back}
			n.nin = copy(n.in[:], inputs)
			out.requiresGrad = true
			out.node = n
			return n
		}
	}
	return nil
}

// Backward computes the gradient of a one-element tensor with respect to
// every leaf that requires one, adding it into their Grad. The graph is
// released afterwards: its tensors are leaves of no graph. Inside In(s),
// only the tensors s tracks are released; the graph of other scopes' tensors
// is only read and may be differentiated again (see Program.In).
func (t *Tensor) Backward() {
	if t.Numel() != 1 {
		panic(&Error{Op: "backward", Msg: "backward needs a one-element tensor; use BackwardWith", Operands: []*Tensor{t}})
	}
	t.BackwardWith(Full(t.dev, 1, t.shape...))
}

// SetGradReadyHook installs the default program's hook: see
// Program.SetGradReadyHook.
func SetGradReadyHook(fn func(leaf *Tensor)) (prev func(leaf *Tensor)) {
	return defaultProgram.SetGradReadyHook(fn)
}

// SetGradReadyHook installs fn to be called during every Backward in p (one
// that starts from a tensor on p's devices), once for each leaf tensor
// requiring grad that the graph reaches, as soon as the leaf's Grad holds
// everything this Backward adds to it: after the last of the leaf's uses
// has been differentiated (a weight used twice, like a tied embedding and
// language-model head, is reported after both). Leaves are reported in the
// order the backward pass finishes them, roughly the reverse of the order
// the forward pass first used them, and leaves read inside a Recompute
// are reported right after its recomputation. A leaf no gradient reached
// is reported too, with its Grad unchanged (nil if it had none).
// Data-parallel training starts a gradient's all-reduce from here.
//
// fn runs on the goroutine of the Backward, with gradient recording off; it
// may read leaf.Grad (or hand it to another stream) but must not change it
// or run ops that record. nil removes the hook, which then costs nothing.
// It returns the hook it replaces.
func (p *Program) SetGradReadyHook(fn func(leaf *Tensor)) (prev func(leaf *Tensor)) {
	prev, p.gradReadyHook = p.gradReadyHook, fn
	return prev
}

// walk is the working memory of one graph walk. Walks nest (a Recompute's
// backward pass recomputes and differentiates its function in the middle
// of the enclosing Backward), so a program keeps one per nesting depth
// (Program.walks), reused by every Backward it runs.
type walk struct {
	order []*Tensor
	stack []topoFrame
}

// visitEpochs numbers graph walks, to mark the tensors a walk has visited
// without clearing the marks of the last one. The numbers are unique
// across programs: a tensor one program walked (a parameter made on a
// device before NewProgram claimed it) never carries a mark that another
// program's walk could take for its own. A walk takes one number (two in
// Recompute's forward pass), so the atomic costs nothing measurable.
var visitEpochs atomic.Uint64

// newEpoch returns a visit mark no tensor carries yet.
func newEpoch() uint64 { return visitEpochs.Add(1) }

type topoFrame struct {
	t    *Tensor
	next int
}

// acquireWalk returns p's working memory for a walk at the current depth;
// releaseWalk gives it back.
func (p *Program) acquireWalk() *walk {
	if p.walkDepth == len(p.walks) {
		p.walks = append(p.walks, &walk{})
	}
	w := p.walks[p.walkDepth]
	p.walkDepth++
	return w
}

func (p *Program) releaseWalk() { p.walkDepth-- }

// BackwardWith runs the backward pass seeded with gradient g (t's shape,
// on t's device). It runs in the program of t's device: its gradient mode,
// its hook, and its Persist for the leaves' Grad.
func (t *Tensor) BackwardWith(g *Tensor) {
	if !t.requiresGrad {
		panic(&Error{Op: "backward", Msg: "tensor does not require grad", Operands: []*Tensor{t}})
	}
	check("backward", t, g)
	sameShape("backward", t, g)
	backward(ProgramOf(t.dev), t, g, nil)
}

// backward differentiates in p the graph that ends in t, seeded with g.
// For an ordinary Backward (inner nil) each leaf's gradient is added into
// its Grad. For the recomputation of Recompute inner, the leaves keep
// their gathered gradient in pending for the enclosing walk, which reaches
// them through the recompute node's edges.
//
// The walk releases the graph it went through: the nodes of the tensors
// it reached are dropped (and the records of the Recomputes among them go
// back to p's pool), so those tensors are leaves afterwards. An ordinary
// Backward run inside In(s) drops only the nodes of the tensors s tracks;
// it only reads those of other scopes, which another Backward may go
// through again. A recomputation's walk releases all it reached: its own
// graph, freed with its scope.
func backward(p *Program, t, g *Tensor, inner *recomp) {
	w := p.acquireWalk()
	defer p.releaseWalk()
	order := topoSort(p, w, t)
	var owner *Scope // nil: release every node
	if inner == nil {
		owner = p.innermostDetached()
	}
	defer func() {
		for i, v := range order {
			if inner == nil || v.node != nil {
				v.pending = nil
			}
			if n := v.node; n != nil && (owner == nil || v.scope == owner) {
				if n.ck != nil {
					p.releaseRecomp(n.ck)
					n.ck = nil
				}
				v.node = nil
			}
			order[i] = nil
		}
	}()
	t.pending = g
	prev, prevSinks := p.gradEnabled, p.sinks
	p.gradEnabled, p.sinks = false, inner == nil
	defer func() { p.gradEnabled, p.sinks = prev, prevSinks }()
	for i := len(order) - 1; i >= 0; i-- {
		v := order[i]
		n := v.node
		if n == nil { // a leaf: every use of it is behind us
			if inner != nil {
				inner.checkLeaf(v)
				continue
			}
			if gv := v.pending; gv != nil {
				v.pending = nil
				accumulateLeaf(p, v, gv)
			}
			if p.gradReadyHook != nil {
				p.gradReadyHook(v)
			}
			continue
		}
		gv := v.pending
		v.pending = nil
		if gv == nil {
			continue
		}
		n.gin = [3]*Tensor{}
		n.back(n, gv)
		for j := 0; j < n.nin; j++ {
			if gj := n.gin[j]; gj != nil {
				addPending(n.in[j], gj)
			}
		}
		n.gin = [3]*Tensor{}
	}
}

// gradSink returns the F32 Grad of t, its shape, where a backward function
// may add t's gradient straight into it (a matrix product with beta 1, a
// kernel that accumulates) instead of returning it in gin: in an ordinary
// Backward walk, for a leaf that has a Grad already (optimizers keep them;
// the first Backward allocates them). Adding in place saves the gradient's
// allocation and the pass that would add it. Otherwise it returns nil. The
// leaf's turn in the walk comes after every use of it, so gradient hooks
// still see the whole gradient.
func gradSink(t *Tensor) *Tensor {
	if t == nil || !t.requiresGrad || t.node != nil || t.Grad == nil || t.freed {
		return nil
	}
	if g := t.Grad; g.dtype != F32 || !g.shape.Equal(t.shape) || !ProgramOf(t.dev).sinks {
		return nil
	}
	return t.Grad
}

// takePending removes and returns the gradient gathered so far for t,
// for a backward function that adds it into the gradient it writes for t
// (in one pass with its own work) and returns the sum in gin. It returns
// nil where there is none, or where it is not a tensor of t's dtype (F32,
// or BF16 for bf16 activations) and shape.
func takePending(t *Tensor) *Tensor {
	g := t.pending
	if g == nil || g.dtype != t.dtype || (g.dtype != F32 && g.dtype != BF16) || !g.shape.Equal(t.shape) {
		return nil
	}
	t.pending = nil
	return g
}

// addPending adds g to the gradient gathered so far for in.
func addPending(in, g *Tensor) {
	if in == nil || !in.requiresGrad {
		return
	}
	if in.pending != nil {
		in.pending = Add(in.pending, g)
	} else {
		in.pending = g
	}
}

// topoSort lists the tensors reachable from t through recorded nodes, each
// after all of its inputs, in w's reused memory. Every tensor it reaches
// must be on a device p drives: it panics otherwise, before another
// program's tensors are changed. Ops keep a graph on one device, so only a
// Recompute's inputs can lead elsewhere, and checking the program of a
// tensor on another device than t's costs nothing in the common case.
func topoSort(p *Program, w *walk, t *Tensor) []*Tensor {
	epoch := newEpoch()
	order := w.order[:0]
	stack := append(w.stack[:0], topoFrame{t: t})
	t.visited = epoch
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if n := f.t.node; n != nil && f.next < n.edges() {
			in := n.edge(f.next)
			f.next++
			if in != nil && in.requiresGrad && in.visited != epoch {
				if in.dev != t.dev && ProgramOf(in.dev) != p {
					clear(order)
					clear(stack[:cap(stack)])
					w.order, w.stack = order[:0], stack[:0]
					panic(&Error{Op: "backward", Msg: fmt.Sprintf("a graph in %v reaches a tensor on %v, driven by %v", p, in.dev, ProgramOf(in.dev)), Operands: []*Tensor{t, in}})
				}
				in.visited = epoch
				stack = append(stack, topoFrame{t: in})
			}
			continue
		}
		order = append(order, f.t)
		stack = stack[:len(stack)-1]
	}
	clear(stack[:cap(stack)])
	w.order, w.stack = order, stack[:0]
	return order
}

// accumulateLeaf adds g into leaf.Grad, allocating it outside any step of
// p, the leaf's program.
func accumulateLeaf(p *Program, leaf, g *Tensor) {
	if !leaf.shape.Equal(g.shape) {
		g = g.Reshape(leaf.shape...)
	}
	if leaf.Grad == nil {
		p.Persist(func() { leaf.Grad = g.Clone() })
		return
	}
	leaf.be.Axpy(leaf.Grad.ref(), g.ref(), 1, g.Numel())
}

// ZeroGrad drops the gradients of ts. The next Backward allocates fresh
// ones; use ZeroGradInPlace to keep the storage.
func ZeroGrad(ts ...*Tensor) {
	for _, t := range ts {
		if t.Grad != nil {
			t.Grad.Free()
			t.Grad = nil
		}
	}
}

// ZeroGradInPlace sets existing gradients to zero, keeping their storage.
func ZeroGradInPlace(ts ...*Tensor) {
	for _, t := range ts {
		if t.Grad != nil {
			t.be.Fill(t.Grad.ref(), 0, t.Grad.Numel())
		}
	}
}

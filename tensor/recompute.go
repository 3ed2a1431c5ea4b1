package tensor

import "fmt"

// RecomputeFunc is a function of tensors that Recompute runs twice: once
// in the forward pass and again, from the same inputs, in the backward
// pass. It must build the same graph both times: the same ops, reading the
// same parameters, drawing dropout masks only from the RNG given to
// RecomputeRNG. It must not make tensors that require grad.
type RecomputeFunc func(in ...*Tensor) *Tensor

// Recompute returns fn(inputs...) without keeping what fn makes on the
// way (activation recomputation, or gradient checkpointing): the forward
// pass runs fn in a scope of its own and keeps only its result and a
// reference to the inputs. When Backward reaches the result, fn runs again
// on views of the inputs with recording on, under the autocast policy of
// the forward pass, and that graph is differentiated at once: the inputs'
// gradients flow on, and the gradients of the leaves fn reads (parameters,
// captured by the closure or passed as inputs) are added into their Grad
// as if fn had been recorded directly. The recomputation and its gradients
// are freed before the backward pass moves on, so the memory of a step
// holds the results of the recomputed functions instead of everything
// inside them, at the cost of running each fn twice.
//
// With recording off (NoGrad, evaluation) it is fn(inputs...), except that
// the tensors fn makes besides its result are freed when it returns.
// Use RecomputeRNG when fn draws dropout masks.
//
// Like an op, it runs in the program of its inputs' device (the default
// program when there are none: use Program.Recompute then).
func Recompute(fn RecomputeFunc, inputs ...*Tensor) *Tensor {
	return RecomputeRNG(nil, fn, inputs...)
}

// RecomputeRNG is Recompute for a function whose dropout ops take their
// masks from r: r before the forward pass is saved and set again for the
// recomputation, so it draws the same masks, and r is put back afterwards.
// r may be nil.
func RecomputeRNG(r *DropoutStream, fn RecomputeFunc, inputs ...*Tensor) *Tensor {
	p := defaultProgram
	if len(inputs) > 0 && inputs[0] != nil {
		p = ProgramOf(inputs[0].dev)
	}
	return p.RecomputeRNG(r, fn, inputs...)
}

// Recompute is the package-level Recompute run in p, whose devices the
// inputs and the result must be on.
func (p *Program) Recompute(fn RecomputeFunc, inputs ...*Tensor) *Tensor {
	return p.RecomputeRNG(nil, fn, inputs...)
}

// RecomputeRNG is the package-level RecomputeRNG run in p, whose devices
// the inputs and the result must be on.
func (p *Program) RecomputeRNG(r *DropoutStream, fn RecomputeFunc, inputs ...*Tensor) *Tensor {
	if fn == nil {
		panic(&Error{Op: "recompute", Msg: "nil function"})
	}
	for _, in := range inputs {
		if in == nil {
			panic(&Error{Op: "recompute", Msg: "nil input"})
		}
		p.checkDriven(in)
	}
	c := p.newRecomp(fn, r, inputs)
	out, needGrad := c.forward(p)
	if !needGrad {
		p.releaseRecomp(c)
		return out
	}
	out.nd = node{op: "recompute", back: recomputeBackward, ck: c}
	out.node = &out.nd
	out.requiresGrad = true
	return out
}

// recomp is what a recompute node needs to run its function again. Records
// are pooled, so a steady-state step allocates none.
type recomp struct {
	fn     RecomputeFunc
	rng    *DropoutStream
	state  DropoutStream // rng before the forward pass
	cast   DType         // the autocast policy of the forward pass
	inputs []*Tensor
	args   []*Tensor // what fn is called with: views of inputs
	leaves []*Tensor // tensors requiring grad that fn reads besides args
	grads  []*Tensor // the inputs' gradients, during the backward pass
	keep   []**Tensor
}

// checkDriven panics unless t is on a device p drives: a recomputation's
// scopes, and the walks over its graph, are p's.
func (p *Program) checkDriven(t *Tensor) {
	if q := ProgramOf(t.dev); q != p {
		panic(&Error{Op: "recompute", Msg: fmt.Sprintf("a tensor on %v, driven by %v, in a recomputation run in %v", t.dev, q, p), Operands: []*Tensor{t}})
	}
}

// newRecomp takes a record from p's pool (Program.recompPool).
func (p *Program) newRecomp(fn RecomputeFunc, r *DropoutStream, inputs []*Tensor) *recomp {
	var c *recomp
	if n := len(p.recompPool); n > 0 {
		c = p.recompPool[n-1]
		p.recompPool[n-1] = nil
		p.recompPool = p.recompPool[:n-1]
	} else {
		c = new(recomp)
	}
	c.fn, c.rng, c.cast = fn, r, p.autocast
	if r != nil {
		c.state = *r
	}
	c.inputs = append(c.inputs[:0], inputs...)
	return c
}

// releaseRecomp returns c to the pool of p, the program running, dropping its
// references.
func (p *Program) releaseRecomp(c *recomp) {
	c.fn, c.rng = nil, nil
	c.inputs = emptied(c.inputs)
	c.args = emptied(c.args)
	c.leaves = emptied(c.leaves)
	c.grads = emptied(c.grads)
	clear(c.keep)
	c.keep = c.keep[:0]
	p.recompPool = append(p.recompPool, c)
}

// emptied clears s and returns it with length 0, keeping its capacity.
func emptied(s []*Tensor) []*Tensor {
	clear(s)
	return s[:0]
}

// setArgs points c.args at views of the inputs, made in the current scope,
// that are leaves of the graph fn builds (requiring grad where the input
// does): the recorded graph stops at them.
func (c *recomp) setArgs() {
	c.args = c.args[:0]
	for _, in := range c.inputs {
		a := in.Detach()
		a.requiresGrad = in.requiresGrad
		c.args = append(c.args, a)
	}
}

// forward runs fn in a scope of p's own and returns its result, handed
// over to the enclosing scope, and whether it needs a gradient. When it
// does, c.leaves lists the leaves fn read.
func (c *recomp) forward(p *Program) (out *Tensor, needGrad bool) {
	s := p.pushScope()
	defer func() {
		keep := [1]**Tensor{&out}
		p.endScopeKeeping(s, keep[:])
	}()
	if !p.gradEnabled {
		c.args = append(c.args[:0], c.inputs...)
		return c.fn(c.args...), false
	}
	c.setArgs()
	out = c.fn(c.args...)
	if out == nil {
		panic(&Error{Op: "recompute", Msg: "the function returned nil"})
	}
	p.checkDriven(out)
	if !out.requiresGrad {
		return out, false
	}
	return c.findLeaves(p, s, out), true
}

// findLeaves lists in c.leaves the leaves requiring grad that the graph of
// out, made in p's scope s, reads besides c.args, and returns out or, when
// out was not made in s (and so cannot carry the recompute node), a view
// of it made there.
func (c *recomp) findLeaves(p *Program, s *Scope, out *Tensor) *Tensor {
	w := p.acquireWalk()
	defer p.releaseWalk()
	order := topoSort(p, w, out)
	defer clear(order)
	inScope := newEpoch()
	for _, t := range s.tensors {
		t.visited = inScope
	}
	for _, v := range order {
		switch {
		case c.isArg(v):
		case v.visited != inScope && v.node != nil:
			panic(&Error{Op: "recompute", Msg: fmt.Sprintf("the function reads a tensor made by %s outside it; pass it as an input", v.node.op), Operands: []*Tensor{v}})
		case v.node == nil && v.visited == inScope:
			panic(&Error{Op: "recompute", Msg: "the function made a tensor that requires grad", Operands: []*Tensor{v}})
		case v.node == nil:
			c.leaves = append(c.leaves, v)
		}
	}
	if out.visited != inScope {
		out = out.Detach()
	}
	return out
}

func (c *recomp) isArg(t *Tensor) bool {
	for _, a := range c.args {
		if a == t {
			return true
		}
	}
	return false
}

// checkLeaf panics unless the recomputation's leaf v is one the forward
// pass found: the enclosing walk reaches only those.
func (c *recomp) checkLeaf(v *Tensor) {
	if c.isArg(v) {
		return
	}
	for _, l := range c.leaves {
		if l == v {
			return
		}
	}
	panic(&Error{Op: "recompute", Msg: "the recomputation read a tensor requiring grad that the forward pass did not; the function must build the same graph every time", Operands: []*Tensor{v}})
}

// recomputeBackward recomputes the recomputation's function and
// differentiates it. The leaves' gradients stay in their pending for the
// enclosing walk, which reaches them next through the node's edges.
//
// The record stays on the node, which may be differentiated again when the
// walk keeps it (see backward); the walk that releases the node releases
// the record.
func recomputeBackward(n *node, g *Tensor) {
	p := ProgramOf(g.dev) // the program of the Backward, g being on the node's device
	c := n.ck
	c.recompute(p, g)
	for i, in := range c.inputs {
		if gi := c.grads[i]; gi != nil {
			addPending(in, gi)
		}
	}
}

// recompute runs fn again in a scope of p's own, in the state of the
// forward pass, and differentiates it from g; what it keeps (c.grads and
// the leaves' pending gradients) is handed over to the enclosing scope.
func (c *recomp) recompute(p *Program, g *Tensor) {
	prevGrad, prevCast := p.gradEnabled, p.autocast
	var prevState DropoutStream
	if c.rng != nil {
		prevState = *c.rng
		*c.rng = c.state
	}
	s := p.pushScope()
	c.grads = c.grads[:0]
	defer func() {
		c.keep = c.keep[:0]
		for i := range c.grads {
			c.keep = append(c.keep, &c.grads[i])
		}
		for _, l := range c.leaves {
			c.keep = append(c.keep, &l.pending)
		}
		p.endScopeKeeping(s, c.keep)
		clear(c.args) // freed with s
		p.gradEnabled, p.autocast = prevGrad, prevCast
		if c.rng != nil {
			*c.rng = prevState
		}
	}()
	p.gradEnabled, p.autocast = true, c.cast
	c.setArgs()
	out := c.fn(c.args...)
	p.gradEnabled, p.autocast = false, prevCast
	if out == nil || !out.requiresGrad {
		panic(&Error{Op: "recompute", Msg: "the recomputation does not require grad; the function must build the same graph every time"})
	}
	sameShape("recompute", out, g)
	check("recompute", out, g)
	backward(p, out, g, c)
	for _, a := range c.args {
		c.grads = append(c.grads, a.pending)
		a.pending = nil
	}
}

package tensor

// node is one recorded op: its inputs and a function from the output's
// gradient to the inputs' gradients (nil where an input needs none).
type node struct {
	op       string
	inputs   []*Tensor
	backward func(g *Tensor) []*Tensor
}

// record attaches a node to out when any input requires a gradient.
func record(out *Tensor, op string, inputs []*Tensor, backward func(g *Tensor) []*Tensor) {
	if !gradEnabled {
		return
	}
	for _, in := range inputs {
		if in.requiresGrad {
			out.requiresGrad = true
			out.node = &node{op: op, inputs: inputs, backward: backward}
			return
		}
	}
}

// Backward computes the gradient of a one-element tensor with respect to
// every leaf that requires one, adding it into their Grad. The graph is
// released afterwards.
func (t *Tensor) Backward() {
	if t.Numel() != 1 {
		panic(&Error{Op: "backward", Msg: "backward needs a one-element tensor; use BackwardWith", Operands: []*Tensor{t}})
	}
	t.BackwardWith(Full(t.dev, 1, t.shape...))
}

// BackwardWith runs the backward pass seeded with gradient g (t's shape).
func (t *Tensor) BackwardWith(g *Tensor) {
	if !t.requiresGrad {
		panic(&Error{Op: "backward", Msg: "tensor does not require grad", Operands: []*Tensor{t}})
	}
	sameShape("backward", t, g)
	order := topoSort(t)
	grads := map[*Tensor]*Tensor{t: g}
	NoGrad(func() {
		for i := len(order) - 1; i >= 0; i-- {
			v := order[i]
			gv := grads[v]
			delete(grads, v)
			if gv == nil {
				continue
			}
			if v.node == nil {
				accumulateLeaf(v, gv)
				continue
			}
			gin := v.node.backward(gv)
			for j, in := range v.node.inputs {
				if j >= len(gin) || gin[j] == nil || !in.requiresGrad {
					continue
				}
				if prev := grads[in]; prev != nil {
					grads[in] = Add(prev, gin[j])
				} else {
					grads[in] = gin[j]
				}
			}
		}
	})
	for _, v := range order {
		v.node = nil
	}
}

// topoSort lists the tensors reachable from t through recorded nodes, each
// after all of its inputs.
func topoSort(t *Tensor) []*Tensor {
	var order []*Tensor
	seen := map[*Tensor]bool{}
	type frame struct {
		t    *Tensor
		next int
	}
	stack := []frame{{t: t}}
	seen[t] = true
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if f.t.node != nil && f.next < len(f.t.node.inputs) {
			in := f.t.node.inputs[f.next]
			f.next++
			if in.requiresGrad && !seen[in] {
				seen[in] = true
				stack = append(stack, frame{t: in})
			}
			continue
		}
		order = append(order, f.t)
		stack = stack[:len(stack)-1]
	}
	return order
}

// accumulateLeaf adds g into leaf.Grad, allocating it outside any step.
func accumulateLeaf(leaf, g *Tensor) {
	if !leaf.shape.Equal(g.shape) {
		g = g.Reshape(leaf.shape...)
	}
	if leaf.Grad == nil {
		Persist(func() { leaf.Grad = g.Clone() })
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

package tensor

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
	gin   [3]*Tensor // the backward pass's result
}

// record attaches a node to out when any input requires a gradient, and
// returns it so the op can fill in what its backward pass needs; it
// returns nil when nothing is recorded.
func record(out *Tensor, op string, back backwardFn, inputs ...*Tensor) *node {
	if !gradEnabled {
		return nil
	}
	for _, in := range inputs {
		if in != nil && in.requiresGrad {
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
// released afterwards.
func (t *Tensor) Backward() {
	if t.Numel() != 1 {
		panic(&Error{Op: "backward", Msg: "backward needs a one-element tensor; use BackwardWith", Operands: []*Tensor{t}})
	}
	t.BackwardWith(Full(t.dev, 1, t.shape...))
}

// The tape walk's working memory, reused by every Backward (tensor
// programs run on one goroutine, see Step).
var (
	visitEpoch uint64
	topoOrder  []*Tensor
	topoStack  []topoFrame
)

type topoFrame struct {
	t    *Tensor
	next int
}

// BackwardWith runs the backward pass seeded with gradient g (t's shape).
func (t *Tensor) BackwardWith(g *Tensor) {
	if !t.requiresGrad {
		panic(&Error{Op: "backward", Msg: "tensor does not require grad", Operands: []*Tensor{t}})
	}
	sameShape("backward", t, g)
	order := topoSort(t)
	defer func() {
		for i, v := range order {
			v.pending = nil
			v.node = nil
			order[i] = nil
		}
	}()
	t.pending = g
	prev := gradEnabled
	gradEnabled = false
	defer func() { gradEnabled = prev }()
	for i := len(order) - 1; i >= 0; i-- {
		v := order[i]
		gv := v.pending
		v.pending = nil
		if gv == nil {
			continue
		}
		n := v.node
		if n == nil {
			accumulateLeaf(v, gv)
			continue
		}
		n.gin = [3]*Tensor{}
		n.back(n, gv)
		for j := 0; j < n.nin; j++ {
			in, gj := n.in[j], n.gin[j]
			if in == nil || gj == nil || !in.requiresGrad {
				continue
			}
			if in.pending != nil {
				in.pending = Add(in.pending, gj)
			} else {
				in.pending = gj
			}
		}
		n.gin = [3]*Tensor{}
	}
}

// topoSort lists the tensors reachable from t through recorded nodes, each
// after all of its inputs. The result is reused by the next call.
func topoSort(t *Tensor) []*Tensor {
	visitEpoch++
	order := topoOrder[:0]
	stack := append(topoStack[:0], topoFrame{t: t})
	t.visited = visitEpoch
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if n := f.t.node; n != nil && f.next < n.nin {
			in := n.in[f.next]
			f.next++
			if in != nil && in.requiresGrad && in.visited != visitEpoch {
				in.visited = visitEpoch
				stack = append(stack, topoFrame{t: in})
			}
			continue
		}
		order = append(order, f.t)
		stack = stack[:len(stack)-1]
	}
	clear(stack[:cap(stack)])
	topoOrder, topoStack = order, stack[:0]
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

package tensor

// ReLU2 returns max(x, 0)² elementwise (squared ReLU, the activation of
// modded-nanogpt's MLP), F32 or BF16 as x, computed in F32. Its backward
// pass is 2·max(x, 0)·g. Like SwiGLU, it runs on a backend with the
// kernels of Llama-style blocks (backend.LlamaBlocks); on another it
// panics naming the device.
func ReLU2(x *Tensor) *Tensor {
	const op = "relu2"
	k := llamaKernels(op, x)
	wantFloat(op, x)
	out := like(op, x, x.shape)
	k.ReLU2(out.ref(), x.ref(), x.Numel())
	record(out, op, relu2Backward, x)
	return out
}

func relu2Backward(n *node, g *Tensor) {
	x := n.in[0]
	dx := like("relu2_backward", x, x.shape)
	llamaKernels("relu2", x).ReLU2Backward(dx.ref(), x.ref(), g.ref(), x.Numel())
	n.gin[0] = dx
}

// Package backend defines what a device must provide to run fleet: a small
// kernel set (matmul, elementwise ops, reductions, softmax, LayerNorm, GELU,
// causal attention, cross-entropy, embedding, the AdamW step, casts and
// copies) behind one interface, and a registry through which device kinds
// ("cpu", "cuda") are opened by name, the way database/sql opens drivers.
//
// Kernels work on storage references (a Storage and an element offset) and
// plain sizes; they know nothing of shapes, autograd or scopes, which live in
// package tensor. Every kernel writes its outputs and never accumulates
// unless its parameters say so, and every kernel is deterministic: the same
// inputs give bit-identical outputs for a given thread count.
package backend

// Package cpu is fleet's CPU backend: the kernel set of package backend in
// plain Go, parallel over goroutines. Importing it registers the "cpu"
// device kind.
//
// Every kernel partitions its work the same way on every call, and no
// output element's reduction order depends on goroutine scheduling, so
// results are bit-for-bit repeatable. Nor do results depend on the thread
// count (SetThreads, which logical devices cpu:0, cpu:1, ... that share a
// machine's cores use to divide them): a kernel either computes each
// output whole from indices alone (a row, a tile, a column, a fixed chunk
// of partial sums) or, where a range's ends matter (a SIMD body with a
// portable tail), runs over chunks that are the same with any thread
// count (parallelForChunks). A kernel call keeps its operands in
// a pooled task struct, not a closure, and borrows pooled scratch, so once
// every shape has been seen kernels make no heap allocations. Hot kernels
// are package-level function values (for example gemmKernel), so faster
// versions (SIMD assembly) can replace them without touching callers;
// tests hold each kernel to the float64 reference in package backend/ref.
package cpu

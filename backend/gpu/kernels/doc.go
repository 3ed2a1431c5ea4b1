// Package kernels holds the GPU runtime's device-neutral op functions: for
// each backend op (attention's are in attention.go) an op function in
// ops.go, such as [LayerNormBackward], issues the exact launch sequence
// the GPU runtime (package gpu) uses (kernel names, grids, blocks, shared
// memory, arguments in [Args]), through a [Launcher]. The same code drives
// every driver and the emulator alike: CUDA's kernels are the CUDA C of
// package backend/gpu/cuda/kernels, OpenCL's their OpenCL C twins in
// backend/gpu/opencl/kernels, and the emulation tests hold the op functions
// over the CUDA kernels to the CPU backend. flops.go prices each kernel's
// launch (FLOPs, data movers, tensor-core kernels) for the simulated GPU.
//
// This package embeds no kernel source: a driver brings its own.
//
// Reductions never use float atomics: they are split by operand shape alone
// into partial sums in a caller-provided scratch buffer (sized by the op's
// ...Scratch function), which a second kernel adds in a fixed order, so
// results are bit-for-bit repeatable on any GPU.
package kernels

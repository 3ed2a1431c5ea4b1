// Package kernels holds fleet's CUDA C kernels as embedded source, and the
// two preludes that let one unchanged source build two ways: by NVRTC for a
// real GPU (the CUDA driver, package cuda), and by g++ as C++ for the CPU
// emulation harness in package emu. It also parses a kernel's signature
// (ParseSignatures), for the emulator's launchers and the simulated GPU.
// The launch sequences that drive these kernels are the device-neutral op
// functions of package backend/gpu/kernels, which every driver shares.
//
// Conventions every kernel file (*.cu) follows:
//   - It includes no headers. common.cuh (helpers shared by all kernels) is
//     prepended, after the build's prelude.
//   - Each kernel is `extern "C" __global__ void fleet_<name>(...)`, so the
//     symbol is unmangled for cuModuleGetFunction and for dlsym alike.
//   - Parameters are pointers, int, long long, unsigned int or float.
//   - Dynamic shared memory is declared with FLEET_DYNAMIC_SHARED(type, name),
//     a macro each prelude defines; static __shared__ arrays are plain CUDA.
//   - BF16 and FP16 values are stored as unsigned short and converted with
//     common.cuh's helpers (round to nearest even), never cuda_bf16.h.
//   - Code that cannot be emulated (inline PTX, tensor cores) sits behind
//     #ifdef FLEET_NVRTC with a plain fallback in the #else branch.
//   - A comment above each kernel says what it computes, its memory traffic
//     and its launch shape.
//
// Reductions never use float atomics: they are split by operand shape alone
// into partial sums in a caller-provided scratch buffer, which a second
// kernel adds in a fixed order, so results are bit-for-bit repeatable on
// any GPU.
package kernels

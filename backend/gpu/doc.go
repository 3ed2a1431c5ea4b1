// Package gpu is fleet's device-neutral GPU runtime: it implements
// backend.Backend (type Backend) over a driver (interface Driver), and
// drivers register their device kinds through it (Register,
// RegisterNamed). The drivers live beside it, none importing another:
// CUDA's (package cuda, cuda:N, and the simulated GPUs sim:NAME over its
// stand-in libraries) and OpenCL's (package opencl, opencl:N).
//
// Memory comes from a caching allocator (size classes, reuse across steps,
// allocated/reserved/peak statistics); an allocation that fails even after
// the cache is returned to the driver panics with a *backend.DeviceError
// wrapping backend.ErrOutOfMemory, which tensor.Catch turns into an error.
// Each op is the launch sequence of package kernels' op function, which
// names the kernels the driver compiles and launches (CUDA C through
// NVRTC, or its OpenCL C twins), and matrix products are described in the
// runtime's own terms (Product, EpilogueProduct: transposes, operand
// types, a Compute mode, an Epilogue) that each driver translates into its
// library's (cuBLAS and cuBLASLt, CLBlast), with F32 accumulation.
//
// Driver calls run on the caller's goroutine, one at a time: each driver
// serialises its calls with a lock, and one that needs an OS thread (a
// CUDA context is current per thread) locks the calling goroutine to its
// thread for the call and makes the context current there; there is no
// goroutine per device. Work is queued in order on one compute stream, so
// a buffer freed to the pool may be reused by the next op without a sync;
// host copies synchronise with that stream.
//
// The tests run the whole runtime against an emulated device, where the
// kernels run under package emu and the products are a Go reference of
// their column-major definition, so everything but the driver calls is
// checked in CI against the CPU backend; the drivers' own devices are
// reached through the registry (drivers_test.go links them in).
package gpu

// Package cuda is fleet's NVIDIA GPU backend: it implements backend.Backend
// for devices named cuda:N, and registers itself as the "cuda" kind.
//
// Memory comes from a caching allocator (size classes, reuse across steps,
// allocated/reserved/peak statistics); an allocation that fails even after
// the cache is returned to the driver panics with a *backend.DeviceError
// wrapping backend.ErrOutOfMemory, which tensor.Catch turns into an error.
// Kernels are the CUDA C of package kernels, compiled by NVRTC for the
// device's architecture on first use and cached on disk (package kcache);
// matrix products go to cuBLAS with F32 accumulation (BF16 inputs use the
// tensor cores; F32 inputs use TF32 tensor cores only if SetTF32 allows).
//
// All device work runs on one goroutine per device, locked to its OS thread
// (a CUDA context is current per thread), in order on one compute stream, so
// a buffer freed to the pool may be reused by the next op without a sync.
// Host copies synchronise with that stream.
//
// The Go side of the backend talks to the device through a small interface
// (gpu). The driver implementation needs libcuda, NVRTC and cuBLAS; the
// tests also run the whole backend against an emulated device, where the
// kernels run under package emu and cuBLAS is a Go reference of its
// column-major semantics, so everything but the driver calls is checked in
// CI against the CPU backend.
package cuda

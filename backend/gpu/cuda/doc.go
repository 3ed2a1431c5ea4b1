// Package cuda is the GPU runtime's CUDA driver (package gpu's Driver for
// NVIDIA devices): it registers cuda:N, numbered as the CUDA driver
// numbers its devices, and the simulated GPUs sim:h200, sim:h100 and
// sim:a100, which are this same driver over package sim's stand-ins for
// NVIDIA's libraries.
//
// It needs libcuda, NVRTC and cuBLAS, bound beneath it (packages driver,
// nvrtc, cublas) and opened through package libs; cuBLASLt where found
// gives products their epilogues. Kernels are the CUDA C of package
// kernels beneath it (backend/gpu/cuda/kernels), compiled by NVRTC for the device's architecture on first use
// and cached on disk (package kcache). The runtime's products are
// translated into cuBLAS's and cuBLASLt's enums (BF16 inputs use the
// tensor cores; F32 inputs use TF32 only where the runtime asks).
//
// Calls run on the caller's goroutine, one at a time (a lock), locked to
// its OS thread for the call with the device's primary context made
// current there. Doctor reports the libraries and devices for `fleet
// doctor`.
package cuda

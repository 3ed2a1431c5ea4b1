// Package cublas binds NVIDIA's cuBLAS (libcublas.so.13/.12) through purego,
// with no cgo, for fleet's matrix products: handles, streams, workspaces,
// math modes, cublasGemmEx (19 arguments) and cublasGemmStridedBatchedEx
// (23 arguments), with BF16, F16 or F32 inputs and F32 compute.
//
//	b, err := cublas.Open()
//	h, err := b.Create()          // with the device's context current
//	h.SetStream(stream)
//	err = h.GemmEx(&cublas.Gemm{TransA: cublas.OpT, TransB: cublas.OpN, M: out, N: batch, K: in,
//		Alpha: 1, A: w, AType: cublas.R16BF, LDA: in, B: x, BType: cublas.R16BF, LDB: in,
//		C: y, CType: cublas.R32F, LDC: out, Compute: cublas.Compute32F, Algo: cublas.AlgoDefault})
//
// cuBLAS is column-major; Gemm's documentation shows how row-major products
// map onto it. The GEMM calls do not allocate: alpha and beta live in the
// Handle, which is why a Handle is used by one goroutine at a time.
//
// cuBLASLt (Lt) is bound only as far as its handle and version, the seam for
// fused matmul epilogues.
package cublas

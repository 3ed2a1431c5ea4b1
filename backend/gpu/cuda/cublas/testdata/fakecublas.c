// A stand-in for libcublas, built by the tests with the system's C compiler,
// so the 19- and 23-argument GEMM calls are checked on machines with no GPU.
// "Device" pointers are host memory; only CUDA_R_32F with COMPUTE_32F is
// computed (column-major, as cuBLAS). cublasSetMathMode is left out on purpose.
#include <stddef.h>

typedef int cublasStatus_t;
static long long last[8];
long long fake_get(int i) { return last[i]; }

cublasStatus_t cublasCreate_v2(void **h) { *h = (void *)0xb1a5; return 0; }
cublasStatus_t cublasDestroy_v2(void *h) { return h == (void *)0xb1a5 ? 0 : 1; }
cublasStatus_t cublasSetStream_v2(void *h, void *s) { last[0] = (long long)s; return 0; }
cublasStatus_t cublasSetWorkspace_v2(void *h, void *ws, size_t n) { last[1] = (long long)ws; last[2] = (long long)n; return 0; }
cublasStatus_t cublasGetProperty(int type, int *v) { *v = type == 0 ? 12 : type == 1 ? 8 : 4; return 0; }

static cublasStatus_t gemm(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                           const float *A, int atype, int lda, long long sa,
                           const float *B, int btype, int ldb, long long sb, const float *beta,
                           float *C, int ctype, int ldc, long long sc, int batch, int compute, int algo) {
	if (h != (void *)0xb1a5) return 1;
	last[3] = compute; last[4] = algo; last[5] = batch;
	if (atype != 0 || btype != 0 || ctype != 0 || compute != 68) return 15; // NOT_SUPPORTED
	if (m < 0 || n < 0 || k < 0) return 7;
	for (int b = 0; b < batch; b++)
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				float acc = 0;
				for (int p = 0; p < k; p++) {
					float a = ta ? A[b * sa + p + (long long)i * lda] : A[b * sa + i + (long long)p * lda];
					float x = tb ? B[b * sb + j + (long long)p * ldb] : B[b * sb + p + (long long)j * ldb];
					acc += a * x;
				}
				float *c = &C[b * sc + i + (long long)j * ldc];
				*c = *alpha * acc + (*beta == 0 ? 0 : *beta * *c);
			}
	return 0;
}

cublasStatus_t cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                            const void *A, int atype, int lda, const void *B, int btype, int ldb,
                            const void *beta, void *C, int ctype, int ldc, int compute, int algo) {
	return gemm(h, ta, tb, m, n, k, alpha, A, atype, lda, 0, B, btype, ldb, 0, beta, C, ctype, ldc, 0, 1, compute, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                                          const void *A, int atype, int lda, long long sa,
                                          const void *B, int btype, int ldb, long long sb,
                                          const void *beta, void *C, int ctype, int ldc, long long sc,
                                          int batch, int compute, int algo) {
	return gemm(h, ta, tb, m, n, k, alpha, A, atype, lda, sa, B, btype, ldb, sb, beta, C, ctype, ldc, sc, batch, compute, algo);
}

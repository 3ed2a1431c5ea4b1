// The bias epilogue of a matrix product (cuBLAS has none without cuBLASLt).

// fleet_bias_rows_<t>: c[i*cols+j] = beta*c[i*cols+j] + bias[j] for
// rows×cols, c and bias both of the suffix's type (bf16 activations keep
// their bias as a bf16 copy), arithmetic in float; beta == 0 overwrites c
// without reading it. Memory traffic: one read (none for beta 0) and one
// write of c, bias from cache. Launch: 1-D grid-stride over rows×cols
// elements, 256-thread blocks.
template <class S>
__device__ __forceinline__ void fleet_bias_rows_impl(typename S::T *__restrict__ c, const typename S::T *__restrict__ bias, float beta, long long rows, int cols) {
	long long n = rows * cols;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float b = S::ld(bias, i % cols);
		S::st(c, i, beta == 0.0f ? b : beta * S::ld(c, i) + b);
	}
}

extern "C" __global__ void fleet_bias_rows_f32(float *__restrict__ c, const float *__restrict__ bias, float beta, long long rows, int cols) {
	fleet_bias_rows_impl<fleet_f32>(c, bias, beta, rows, cols);
}
extern "C" __global__ void fleet_bias_rows_bf16(unsigned short *__restrict__ c, const unsigned short *__restrict__ bias, float beta, long long rows, int cols) {
	fleet_bias_rows_impl<fleet_bf16>(c, bias, beta, rows, cols);
}

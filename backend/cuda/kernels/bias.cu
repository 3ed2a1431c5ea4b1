// The bias epilogue of a matrix product (cuBLAS has none without cuBLASLt).

// fleet_bias_rows_f32: c[i*cols+j] = beta*c[i*cols+j] + bias[j] for rows×cols;
// beta == 0 overwrites c without reading it. Memory traffic: one read (none
// for beta 0) and one write of c, bias from cache. Launch: 1-D grid-stride
// over rows×cols elements, 256-thread blocks.
extern "C" __global__ void fleet_bias_rows_f32(float *__restrict__ c, const float *__restrict__ bias, float beta, long long rows, int cols) {
	long long n = rows * cols;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float b = bias[i % cols];
		c[i] = beta == 0.0f ? b : beta * c[i] + b;
	}
}

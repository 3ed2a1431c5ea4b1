// Kernels for the harness's benchmarks.

// fleet_bench_barriers: reps __syncthreads per thread.
extern "C" __global__ void fleet_bench_barriers(float *out, int reps) {
	float v = threadIdx.x;
	for (int r = 0; r < reps; r++) {
		__syncthreads();
		v += 1.0f;
	}
	out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// fleet_bench_shuffles: reps full-warp sums (5 shuffles each) per thread.
extern "C" __global__ void fleet_bench_shuffles(float *out, int reps) {
	float v = threadIdx.x;
	for (int r = 0; r < reps; r++) {
		v = fleet_warp_sum(v) * 1e-3f;
	}
	out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// fleet_bench_empty: nothing but the launch of each thread.
extern "C" __global__ void fleet_bench_empty(float *out) {
	out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}

// Broken kernels: each is a correct kernel of harness.cu (or elementwise.cu)
// with one deliberate bug that the harness must catch.

// fleet_mut_scale_past_end: fleet_scale_f32 with `i <= n`: reads and writes
// one element past the end.
extern "C" __global__ void fleet_mut_scale_past_end(float *dst, const float *src, float alpha, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i <= n; i += (long long)gridDim.x * blockDim.x) {
		dst[i] = alpha * src[i];
	}
}

// fleet_mut_sum_read_past_end: fleet_test_block_sum whose loop reads x[n].
extern "C" __global__ void fleet_mut_sum_read_past_end(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	float v = 0.0f;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i <= n; i += (long long)gridDim.x * blockDim.x) {
		v += x[i];
	}
	s[threadIdx.x] = v;
	__syncthreads();
	for (unsigned int o = blockDim.x / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			s[threadIdx.x] += s[threadIdx.x + o];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_mut_sum_no_sync_after_store: fleet_test_block_sum without the
// __syncthreads between filling s and reducing it.
extern "C" __global__ void fleet_mut_sum_no_sync_after_store(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	float v = 0.0f;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		v += x[i];
	}
	s[threadIdx.x] = v;
	for (unsigned int o = blockDim.x / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			s[threadIdx.x] += s[threadIdx.x + o];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_mut_sum_no_sync_in_loop: fleet_test_block_sum without the
// __syncthreads between the steps of the tree.
extern "C" __global__ void fleet_mut_sum_no_sync_in_loop(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	float v = 0.0f;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		v += x[i];
	}
	s[threadIdx.x] = v;
	__syncthreads();
	for (unsigned int o = blockDim.x / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			s[threadIdx.x] += s[threadIdx.x + o];
		}
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_mut_warp_sum_bad_offset: fleet_test_warp_block_sum whose final
// shuffle reduction uses offset o+1 instead of o.
extern "C" __global__ void fleet_mut_warp_sum_bad_offset(const float *__restrict__ x, float *__restrict__ out, long long n) {
	FLEET_DYNAMIC_SHARED(float, partial);
	float v = 0.0f;
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		v += x[i];
	}
	v = fleet_warp_sum(v);
	int lane = threadIdx.x % warpSize, warp = threadIdx.x / warpSize;
	if (lane == 0) {
		partial[warp] = v;
	}
	__syncthreads();
	if (warp == 0) {
		int warps = blockDim.x / warpSize;
		v = lane < warps ? partial[lane] : 0.0f;
		for (int o = 16; o > 0; o >>= 1) {
			v += __shfl_down_sync(0xffffffffu, v, o + 1);
		}
		if (lane == 0) {
			out[blockIdx.x] = v;
		}
	}
}

// fleet_mut_early_exit_sum: fleet_test_early_exit_sum, but the tree runs
// over the whole block as if no thread had returned: it reads the shared
// slots of threads that returned before writing theirs.
extern "C" __global__ void fleet_mut_early_exit_sum(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i >= n) {
		return;
	}
	s[threadIdx.x] = x[i];
	__syncthreads();
	for (unsigned int o = blockDim.x / 2; o > 0; o >>= 1) {
		if (threadIdx.x < o) {
			s[threadIdx.x] += s[threadIdx.x + o];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_mut_neighbour_no_sync: out[i] = x[i] + x[i-1] (x[-1] taken as 0)
// within each block, through shared memory, without the __syncthreads
// between the store and the load of the neighbour's slot. Forward runs
// thread t-1 before thread t, so it sees the store; Reverse does not.
extern "C" __global__ void fleet_mut_neighbour_no_sync(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	s[threadIdx.x] = i < n ? x[i] : 0.0f;
	if (i < n) {
		out[i] = s[threadIdx.x] + (threadIdx.x > 0 ? s[threadIdx.x - 1] : (i > 0 ? x[i - 1] : 0.0f));
	}
}

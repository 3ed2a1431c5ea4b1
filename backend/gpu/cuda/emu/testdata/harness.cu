// Kernels that test the emulation harness itself: correct ones. Their broken
// twins are in mutants.cu.

// fleet_test_ids: for each thread (linear index g over the whole launch),
// out[12g..12g+11] = threadIdx, blockIdx, blockDim, gridDim.
extern "C" __global__ void fleet_test_ids(int *out) {
	long long block = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
	long long t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
	long long g = block * (blockDim.x * blockDim.y * blockDim.z) + t;
	int *o = out + 12 * g;
	o[0] = threadIdx.x, o[1] = threadIdx.y, o[2] = threadIdx.z;
	o[3] = blockIdx.x, o[4] = blockIdx.y, o[5] = blockIdx.z;
	o[6] = blockDim.x, o[7] = blockDim.y, o[8] = blockDim.z;
	o[9] = gridDim.x, o[10] = gridDim.y, o[11] = gridDim.z;
}

// fleet_test_order: out[global thread] = the order in which it ran its first
// statement, counted over the launch.
extern "C" __global__ void fleet_test_order(int *ticket, int *out) {
	out[blockIdx.x * blockDim.x + threadIdx.x] = atomicAdd(ticket, 1);
}

// fleet_test_block_sum: out[blockIdx.x] = sum of the x[i] this block visits
// in a grid-stride loop. A tree reduction in static shared memory; blockDim.x
// must be a power of two, at most 256.
extern "C" __global__ void fleet_test_block_sum(const float *__restrict__ x, float *__restrict__ out, long long n) {
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
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_test_warp_block_sum: as fleet_test_block_sum, by warp shuffles and
// one partial sum per warp in dynamic shared memory (blockDim.x/32 floats).
// blockDim.x must be a multiple of 32.
extern "C" __global__ void fleet_test_warp_block_sum(const float *__restrict__ x, float *__restrict__ out, long long n) {
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
			v += __shfl_down_sync(0xffffffffu, v, o);
		}
		if (lane == 0) {
			out[blockIdx.x] = v;
		}
	}
}

// fleet_test_early_exit_sum: one element per thread; threads past n return
// before the barrier and the reduction reads only the slots of those that
// stayed, so the barrier must let returned threads drop out.
extern "C" __global__ void fleet_test_early_exit_sum(const float *__restrict__ x, float *__restrict__ out, long long n) {
	__shared__ float s[256];
	long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
	if (i >= n) {
		return;
	}
	s[threadIdx.x] = x[i];
	__syncthreads();
	long long left = n - blockIdx.x * (long long)blockDim.x; // threads that stayed
	unsigned int active = left < blockDim.x ? (unsigned int)left : blockDim.x;
	for (unsigned int o = 1; o < active; o <<= 1) {
		if (threadIdx.x % (2 * o) == 0 && threadIdx.x + o < active) {
			s[threadIdx.x] += s[threadIdx.x + o];
		}
		__syncthreads();
	}
	if (threadIdx.x == 0) {
		out[blockIdx.x] = s[0];
	}
}

// fleet_test_warp_ops: for every thread, 9 results of warp operations on
// in[t] (width is the shuffle width):
//   0 __shfl_sync from lane (lane*7+3)      1 __shfl_up_sync by 3
//   2 __shfl_down_sync by 5                 3 __shfl_xor_sync with 6
//   4 __ballot_sync(v odd)                  5 __any_sync(v > 1000)
//   6 __all_sync(v >= 0)                    7 __syncthreads_count(v odd)
//   8 __shfl_xor_sync with 32 (own value)
extern "C" __global__ void fleet_test_warp_ops(const int *__restrict__ in, int *__restrict__ out, int width) {
	int t = threadIdx.x;
	int v = in[t];
	int lane = t % warpSize;
	int *o = out + 9 * t;
	o[0] = __shfl_sync(0xffffffffu, v, lane * 7 + 3, width);
	o[1] = __shfl_up_sync(0xffffffffu, v, 3, width);
	o[2] = __shfl_down_sync(0xffffffffu, v, 5, width);
	o[3] = __shfl_xor_sync(0xffffffffu, v, 6, width);
	o[4] = (int)__ballot_sync(0xffffffffu, v & 1);
	o[5] = __any_sync(0xffffffffu, v > 1000);
	o[6] = __all_sync(0xffffffffu, v >= 0);
	o[7] = __syncthreads_count(v & 1);
	o[8] = __shfl_xor_sync(0xffffffffu, v, 32);
}

// fleet_test_half_warp: lanes 0-15 of each warp sum their values with a
// half-warp mask while lanes 16-31 wait at __syncwarp for them; out[t] is
// the half-warp sum for lanes 0-15 and v for the others.
extern "C" __global__ void fleet_test_half_warp(const float *__restrict__ in, float *__restrict__ out) {
	int t = threadIdx.x;
	float v = in[t];
	if (t % warpSize < 16) {
		for (int o = 8; o > 0; o >>= 1) {
			v += __shfl_xor_sync(0x0000ffffu, v, o, 16);
		}
	}
	__syncwarp();
	out[t] = v;
}

// fleet_test_atomics: over all i < n, sum[0] += x[i] (float atomicAdd),
// imax[0] = max (int)(x[i]*1000) (atomicMax), count[0] += 1 (unsigned
// atomicAdd), fmax[0] = max x[i] (an atomicCAS loop on the bits), last[0] =
// some i (atomicExch).
extern "C" __global__ void fleet_test_atomics(const float *__restrict__ x, float *sum, int *imax, unsigned int *count,
	float *fmax, int *last, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		float v = x[i];
		atomicAdd(sum, v);
		atomicMax(imax, (int)(v * 1000.0f));
		atomicAdd(count, 1u);
		int *bits = (int *)fmax;
		int old = *bits, assumed;
		do {
			assumed = old;
			old = atomicCAS(bits, assumed, __float_as_int(fmaxf(v, __int_as_float(assumed))));
		} while (assumed != old);
		atomicExch(last, (int)i);
	}
}

// fleet_test_bf16: h[i] = bf16(x[i]) and back[i] = f32(h[i]), through
// common.cuh's helpers.
extern "C" __global__ void fleet_test_bf16(const float *__restrict__ x, unsigned short *__restrict__ h, float *__restrict__ back, long long n) {
	for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		h[i] = fleet_f32_to_bf16(x[i]);
		back[i] = fleet_bf16_to_f32(h[i]);
	}
}

// fleet_test_math: the fast-math intrinsics, elementwise on x > 0:
// out[8i..8i+7] = __expf, __logf, tanhf, rsqrtf, __fdividef(1,x), fmaf(x,x,1),
// min/max of ints, fabsf(-x).
extern "C" __global__ void fleet_test_math(const float *__restrict__ x, float *__restrict__ out, int n) {
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
		float v = __ldg(x + i);
		float *o = out + 8 * i;
		o[0] = __expf(v);
		o[1] = __logf(v);
		o[2] = tanhf(v);
		o[3] = rsqrtf(v);
		o[4] = __fdividef(1.0f, v);
		o[5] = fmaf(v, v, 1.0f);
		o[6] = (float)(min(i, 5) + max(i, 5));
		o[7] = fabsf(-v) + fminf(v, INFINITY) - fmaxf(v, -INFINITY);
	}
}

// fleet_test_wide_block: out[t] = t for a block of up to 1024 threads, after
// a barrier (tests the largest block).
extern "C" __global__ void fleet_test_wide_block(int *out) {
	__syncthreads();
	out[threadIdx.x] = threadIdx.x;
}

// fleet_test_smem_bytes: each thread writes smem[t] in dynamic shared memory
// of count floats, and out[t] = smem[count-1-t] after a barrier. Launched
// with too little shared memory it writes out of bounds.
extern "C" __global__ void fleet_test_smem_bytes(float *out, int count) {
	FLEET_DYNAMIC_SHARED(float, smem);
	smem[threadIdx.x] = (float)threadIdx.x;
	__syncthreads();
	out[threadIdx.x] = smem[count - 1 - threadIdx.x];
}

// fleet_test_deadlock: lanes 0-15 of warp 0 wait at __syncwarp for lanes
// 16-31, which wait at __syncthreads: a deadlock the harness must report.
extern "C" __global__ void fleet_test_deadlock(int *out) {
	if (threadIdx.x < 16) {
		__syncwarp();
	} else {
		__syncthreads();
	}
	out[threadIdx.x] = 1;
}

// fleet_test_trap: thread 3 calls __trap().
extern "C" __global__ void fleet_test_trap(int *out) {
	if (threadIdx.x == 3) {
		__trap();
	}
	out[threadIdx.x] = 1;
}

// fleet_test_types: every scalar parameter type; out gets them back.
extern "C" __global__ void fleet_test_types(long long *out, int a, unsigned int b, long long c, unsigned long long d,
	float e, double f, const void *p) {
	out[0] = a;
	out[1] = b;
	out[2] = c;
	out[3] = (long long)d;
	out[4] = (long long)(e * 4.0f);
	out[5] = (long long)(f * 4.0);
	out[6] = p == nullptr;
}

// fleet_test_write_before: writes dst[-1] (a front guard) from thread 0.
extern "C" __global__ void fleet_test_write_before(float *dst) {
	if (threadIdx.x == 0) {
		dst[-1] = 1.0f;
	}
}

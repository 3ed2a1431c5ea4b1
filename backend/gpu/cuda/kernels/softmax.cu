// Softmax over the last axis of a rows x cols matrix, F32 or BF16 storage,
// float arithmetic. One warp per row, grid-stride over rows; the row loop is
// uniform within a warp, so the shuffles see all 32 lanes.

// fleet_softmax_<t>: dst[r,j] = exp(src[r,j] - m) / sum_k exp(src[r,k] - m),
// m the row's maximum. Lanes keep online statistics (running max and sum of
// exponentials rescaled when the max grows) in one pass, merge them with a
// butterfly, then a second pass writes. Traffic: src read twice (the second
// read usually hits L1/L2), dst written once. dst may not alias src.
// Launch: 1-D blocks of 256 threads (8 rows at a time), grid
// min(ceil(rows/8), 8 per SM).
template <class S>
__device__ __forceinline__ void fleet_softmax_impl(typename S::T *__restrict__ dst, const typename S::T *__restrict__ src, int rows, int cols) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		const typename S::T *x = src + r * cols;
		typename S::T *y = dst + r * cols;
		float m = FLEET_NEG_INF, s = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			fleet_maxsum_add(m, s, S::ld(x, j));
		}
		fleet_warp_maxsum(m, s);
		float inv = 1.0f / s;
		for (int j = lane; j < cols; j += 32) {
			S::st(y, j, expf(S::ld(x, j) - m) * inv);
		}
	}
}

extern "C" __global__ void fleet_softmax_f32(float *__restrict__ dst, const float *__restrict__ src, int rows, int cols) {
	fleet_softmax_impl<fleet_f32>(dst, src, rows, cols);
}
extern "C" __global__ void fleet_softmax_bf16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, int rows, int cols) {
	fleet_softmax_impl<fleet_bf16>(dst, src, rows, cols);
}

// fleet_softmax_backward_<t>: dx[r,j] = y[r,j] * (dy[r,j] - sum_k y[r,k]*dy[r,k]).
// Traffic: y and dy read twice (second time from cache), dx written once.
// Launch: as fleet_softmax_<t>.
template <class S>
__device__ __forceinline__ void fleet_softmax_backward_impl(typename S::T *__restrict__ dx, const typename S::T *__restrict__ y, const typename S::T *__restrict__ dy, int rows, int cols) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		long long o = r * cols;
		float dot = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			dot += S::ld(y, o + j) * S::ld(dy, o + j);
		}
		dot = fleet_warp_sum(dot);
		for (int j = lane; j < cols; j += 32) {
			S::st(dx, o + j, S::ld(y, o + j) * (S::ld(dy, o + j) - dot));
		}
	}
}

extern "C" __global__ void fleet_softmax_backward_f32(float *__restrict__ dx, const float *__restrict__ y, const float *__restrict__ dy, int rows, int cols) {
	fleet_softmax_backward_impl<fleet_f32>(dx, y, dy, rows, cols);
}
extern "C" __global__ void fleet_softmax_backward_bf16(unsigned short *__restrict__ dx, const unsigned short *__restrict__ y, const unsigned short *__restrict__ dy, int rows, int cols) {
	fleet_softmax_backward_impl<fleet_bf16>(dx, y, dy, rows, cols);
}

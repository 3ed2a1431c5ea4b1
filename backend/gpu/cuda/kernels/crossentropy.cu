// Cross-entropy over logits [n, V] (F32 or BF16 storage, float
// arithmetic) with I32 targets; a target outside [0, V) marks a row as
// ignored. One block per row, grid-stride over rows; the row loop is
// uniform within a block, so the block reductions see every thread.

// fleet_ce_lse: the log-sum-exp of row x [V], on every thread of the
// block. Threads keep online max/sum-of-exponentials statistics over a
// strided share of the row (N consecutive elements at a time in 128-bit
// loads where vec: the row is whole 16-byte pieces), merged across the
// block in a fixed tree.
template <class S>
__device__ __forceinline__ float fleet_ce_lse(const typename S::T *x, int V, bool vec, float *redm, float *reds) {
	float m = FLEET_NEG_INF, s = 0.0f;
	const int N = 16 / sizeof(typename S::T);
	if (vec) {
		float v[N];
		for (int j = N * threadIdx.x; j < V; j += N * blockDim.x) {
			fleet_ld16<S>(x, j, v);
#pragma unroll
			for (int k = 0; k < N; k++) {
				fleet_maxsum_add(m, s, v[k]);
			}
		}
	} else {
		for (int j = threadIdx.x; j < V; j += blockDim.x) {
			fleet_maxsum_add(m, s, S::ld(x, j));
		}
	}
	fleet_block_maxsum(m, s, redm, reds);
	return m + logf(s);
}

// fleet_ce_grad_row: d[j] = g*exp(x[j] - z) - (j == t ? g : 0) over row x
// [V] of log-sum-exp z, or a zero row where t is outside [0, V) (an
// ignored row). Threads stride over the row (in 128-bit loads and stores
// where vec, the same arithmetic); d may be x (each element is read, then
// written, by one thread).
template <class S>
__device__ __forceinline__ void fleet_ce_grad_row(typename S::T *d, const typename S::T *x, int V, int t, float z, float g, bool vec) {
	if (t < 0 || t >= V) {
		for (int j = threadIdx.x; j < V; j += blockDim.x) {
			S::st(d, j, 0.0f);
		}
		return;
	}
	const int N = 16 / sizeof(typename S::T);
	if (vec) {
		float v[N];
		for (int j = N * threadIdx.x; j < V; j += N * blockDim.x) {
			fleet_ld16<S>(x, j, v);
#pragma unroll
			for (int k = 0; k < N; k++) {
				v[k] = expf(v[k] - z) * g;
				if (j + k == t) {
					v[k] -= g;
				}
			}
			fleet_st16<S>(d, j, v);
		}
		return;
	}
	for (int j = threadIdx.x; j < V; j += blockDim.x) {
		float v = expf(S::ld(x, j) - z) * g;
		if (j == t) {
			v -= g;
		}
		S::st(d, j, v);
	}
}

// fleet_crossentropy_<t>: lse[r] = log sum_j exp(logits[r,j]) and
// losses[r] = lse[r] - logits[r, target[r]] (0 for an ignored row), the
// log-sum-exp by fleet_ce_lse. Traffic: logits read once, losses and lse
// written once per row. Launch: 1-D blocks of 256 threads, grid min(n, 8
// per SM). V < 2^31 - blockDim.x (V = 50304 for GPT-2).
template <class S>
__device__ __forceinline__ void fleet_crossentropy_impl(float *__restrict__ losses, float *__restrict__ lse, const typename S::T *__restrict__ logits,
	const int *__restrict__ targets, int n, int V) {
	__shared__ float redm[32], reds[32];
	const int N = 16 / sizeof(typename S::T);
	for (long long r = blockIdx.x; r < n; r += gridDim.x) {
		const typename S::T *x = logits + r * V;
		float z = fleet_ce_lse<S>(x, V, V % N == 0 && fleet_aligned16(x), redm, reds);
		if (threadIdx.x == 0) {
			int t = targets[r];
			lse[r] = z;
			losses[r] = (t >= 0 && t < V) ? z - S::ld(x, t) : 0.0f;
		}
	}
}

extern "C" __global__ void fleet_crossentropy_f32(float *__restrict__ losses, float *__restrict__ lse, const float *__restrict__ logits,
	const int *__restrict__ targets, int n, int V) {
	fleet_crossentropy_impl<fleet_f32>(losses, lse, logits, targets, n, V);
}
extern "C" __global__ void fleet_crossentropy_bf16(float *__restrict__ losses, float *__restrict__ lse, const unsigned short *__restrict__ logits,
	const int *__restrict__ targets, int n, int V) {
	fleet_crossentropy_impl<fleet_bf16>(losses, lse, logits, targets, n, V);
}

// fleet_crossentropy_backward_<t>: with g = dloss[0]*scale, each row's
// gradient by fleet_ce_grad_row from its lse. No reduction. dlogits may be
// logits. Traffic: logits read once, dlogits written once. Launch: 1-D
// blocks of 256 threads, grid min(n, 8 per SM).
template <class S>
__device__ __forceinline__ void fleet_crossentropy_backward_impl(typename S::T *dlogits, const typename S::T *logits,
	const float *__restrict__ lse, const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	float g = dloss[0] * scale;
	const int N = 16 / sizeof(typename S::T);
	for (long long r = blockIdx.x; r < n; r += gridDim.x) {
		const typename S::T *x = logits + r * V;
		typename S::T *d = dlogits + r * V;
		fleet_ce_grad_row<S>(d, x, V, targets[r], lse[r], g, V % N == 0 && fleet_aligned16(x, d));
	}
}

extern "C" __global__ void fleet_crossentropy_backward_f32(float *dlogits, const float *logits,
	const float *__restrict__ lse, const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	fleet_crossentropy_backward_impl<fleet_f32>(dlogits, logits, lse, targets, dloss, scale, n, V);
}
extern "C" __global__ void fleet_crossentropy_backward_bf16(unsigned short *dlogits, const unsigned short *logits,
	const float *__restrict__ lse, const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	fleet_crossentropy_backward_impl<fleet_bf16>(dlogits, logits, lse, targets, dloss, scale, n, V);
}

// fleet_crossentropy_fused_<t>: the loss and its gradient in one launch
// (the classifier of a training step, whose logits nothing else reads):
// losses[r] as fleet_crossentropy writes it, then, with g = dloss[0]*scale,
// dlogits[r,j] as fleet_crossentropy_backward writes it from that row's
// log-sum-exp (the same device functions, so the same values as the two
// kernels). dloss must hold the gradient the loss will be differentiated
// with when the kernel runs. dlogits may be logits: the target's logit is
// read by thread 0 before the block's reduction, and every other element
// is read, then written, by one thread. A block owns a row: it sweeps it
// once for the statistics and once more for the gradient, which finds the
// row in L2, since the grid keeps the rows in flight under
// kernels.CrossEntropyFusedCache bytes (the Go side sizes it), well inside
// an H100's 50 MB L2. Traffic: logits read once from memory, dlogits
// written once, losses once per row. Launch: 1-D blocks of 256 threads.
template <class S>
__device__ __forceinline__ void fleet_crossentropy_fused_impl(float *__restrict__ losses, typename S::T *dlogits, const typename S::T *logits,
	const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	__shared__ float redm[32], reds[32];
	float g = dloss[0] * scale;
	const int N = 16 / sizeof(typename S::T);
	for (long long r = blockIdx.x; r < n; r += gridDim.x) {
		const typename S::T *x = logits + r * V;
		typename S::T *d = dlogits + r * V;
		int t = targets[r];
		bool keep = t >= 0 && t < V;
		float xt = (threadIdx.x == 0 && keep) ? S::ld(x, t) : 0.0f;
		bool vec = V % N == 0 && fleet_aligned16(x, d);
		float z = fleet_ce_lse<S>(x, V, vec, redm, reds); // every thread has passed its reads of the row
		if (threadIdx.x == 0) {
			losses[r] = keep ? z - xt : 0.0f;
		}
		fleet_ce_grad_row<S>(d, x, V, t, z, g, vec);
	}
}

extern "C" __global__ void fleet_crossentropy_fused_f32(float *__restrict__ losses, float *dlogits, const float *logits,
	const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	fleet_crossentropy_fused_impl<fleet_f32>(losses, dlogits, logits, targets, dloss, scale, n, V);
}
extern "C" __global__ void fleet_crossentropy_fused_bf16(float *__restrict__ losses, unsigned short *dlogits, const unsigned short *logits,
	const int *__restrict__ targets, const float *__restrict__ dloss, float scale, int n, int V) {
	fleet_crossentropy_fused_impl<fleet_bf16>(losses, dlogits, logits, targets, dloss, scale, n, V);
}

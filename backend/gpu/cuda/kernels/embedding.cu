// Token embeddings. The table (and its gradient) is always F32: it is a
// master weight. ids are I32; an id outside [0, vocab) is never used to
// index the table (see each kernel).

// fleet_embedding_<t>: out[i, :] = table[ids[i], :], each row dim wide,
// out in F32 or BF16 (rounded) storage. A row whose id is outside
// [0, vocab) is written as zeros rather than read out of bounds. One block
// per token, grid-stride over tokens, threads striding over the row.
// Traffic: one table row read and one out row written per token. Launch:
// 1-D blocks of 256 threads, grid min(n, 8 per SM).
template <class S>
__device__ __forceinline__ void fleet_embedding_impl(typename S::T *__restrict__ out, const float *__restrict__ table, const int *__restrict__ ids,
	int n, int dim, int vocab) {
	for (long long i = blockIdx.x; i < n; i += gridDim.x) {
		int id = ids[i];
		typename S::T *o = out + i * dim;
		if (id < 0 || id >= vocab) {
			for (int j = threadIdx.x; j < dim; j += blockDim.x) {
				S::st(o, j, 0.0f);
			}
			continue;
		}
		const float *t = table + (long long)id * dim;
		const int N = 16 / sizeof(typename S::T);
		if (dim % N == 0 && fleet_aligned16(t, o)) { // 128-bit loads and stores
			float v[N];
			for (int j = N * threadIdx.x; j < dim; j += N * blockDim.x) {
#pragma unroll
				for (int q = 0; q < N; q += 4) {
					fleet_ld16<fleet_f32>(t, j + q, v + q);
				}
				fleet_st16<S>(o, j, v);
			}
			continue;
		}
		for (int j = threadIdx.x; j < dim; j += blockDim.x) {
			S::st(o, j, t[j]);
		}
	}
}

extern "C" __global__ void fleet_embedding_f32(float *__restrict__ out, const float *__restrict__ table, const int *__restrict__ ids, int n, int dim, int vocab) {
	fleet_embedding_impl<fleet_f32>(out, table, ids, n, dim, vocab);
}
extern "C" __global__ void fleet_embedding_bf16(unsigned short *__restrict__ out, const float *__restrict__ table, const int *__restrict__ ids, int n, int dim, int vocab) {
	fleet_embedding_impl<fleet_bf16>(out, table, ids, n, dim, vocab);
}

// fleet_embedding_backward_<t>: dtable[ids[i], :] += dout[i, :] for
// i = 0, 1, ..., n-1 in token order, dout F32 or BF16; ids outside
// [0, vocab) are skipped. No atomics: each element of dtable is updated by
// exactly one thread, which adds its tokens in order, so the result is
// bit-identical whatever the launch (and equal to the CPU's). Thread t of
// block (x, y) owns column j = x*blockDim.x + t of the rows whose id has
// id % gridDim.y == y (the block's bucket). Each warp scans all ids, 32 at a
// time: a ballot marks the bucket's tokens and the warp visits those in
// order, its 32 lanes adding 32 adjacent columns (coalesced). Traffic: dout
// read once, dtable's touched rows read and written once per token, ids read
// once per warp (from L2). Launch: 1-D blocks of 256 threads, grid
// (ceil(dim/256), buckets), buckets about 8 blocks per SM in all.
template <class S>
__device__ __forceinline__ void fleet_embedding_backward_impl(float *__restrict__ dtable, const typename S::T *__restrict__ dout,
	const int *__restrict__ ids, int n, int dim, int vocab) {
	int lane = threadIdx.x & 31;
	int j0 = blockIdx.x * blockDim.x + (threadIdx.x & ~31); // the warp's first column
	if (j0 >= dim) {
		return; // the whole warp: no column of its own
	}
	int j = j0 + lane;
	int bucket = blockIdx.y, buckets = gridDim.y;
	for (int base = 0; base < n; base += 32) {
		int id = base + lane < n ? ids[base + lane] : -1;
		unsigned mine = __ballot_sync(0xffffffffu, id >= 0 && id < vocab && id % buckets == bucket);
		while (mine != 0u) {
			int q = __ffs(mine) - 1;
			mine &= mine - 1u;
			int idq = __shfl_sync(0xffffffffu, id, q);
			if (j < dim) {
				dtable[(long long)idq * dim + j] += S::ld(dout, (long long)(base + q) * dim + j);
			}
		}
	}
}

extern "C" __global__ void fleet_embedding_backward_f32(float *__restrict__ dtable, const float *__restrict__ dout, const int *__restrict__ ids,
	int n, int dim, int vocab) {
	fleet_embedding_backward_impl<fleet_f32>(dtable, dout, ids, n, dim, vocab);
}
extern "C" __global__ void fleet_embedding_backward_bf16(float *__restrict__ dtable, const unsigned short *__restrict__ dout, const int *__restrict__ ids,
	int n, int dim, int vocab) {
	fleet_embedding_backward_impl<fleet_bf16>(dtable, dout, ids, n, dim, vocab);
}

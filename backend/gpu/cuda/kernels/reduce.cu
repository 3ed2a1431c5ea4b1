// Reductions. None uses atomics: every sum is split the same way on every
// launch (by the shape alone, not the grid size or the device), partial sums
// go to a scratch buffer, and a second kernel adds them in a fixed order, so
// results are bit-for-bit repeatable (DESIGN decision 12).

// fleet_sumrows_partial_<t>: column sums over one chunk of rows.
// blockIdx.y is the chunk (rows [y*chunkRows, (y+1)*chunkRows)); block x
// covers 32 columns starting at 32*blockIdx.x. Warp w of the block adds rows
// w, w+W, ... of the chunk (W = blockDim.x/32 warps), its 32 lanes reading 32
// adjacent columns (coalesced); the warps' sums are then added in warp order
// and written to part[y*cols + j] (F32). Traffic: src read once, part written
// once. Launch: blocks of 256 threads, grid (ceil(cols/32), ceil(rows/chunkRows)).
template <class S>
__device__ __forceinline__ void fleet_sumrows_partial_impl(float *__restrict__ part, const typename S::T *__restrict__ src, int rows, int cols, int chunkRows) {
	__shared__ float acc[32][32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int j = blockIdx.x * 32 + lane;
	int r0 = blockIdx.y * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	float s = 0.0f;
	if (j < cols) {
		for (int r = r0 + warp; r < r1; r += nw) {
			s += S::ld(src, (long long)r * cols + j);
		}
	}
	acc[warp][lane] = s;
	__syncthreads();
	if (warp == 0 && j < cols) {
		float t = 0.0f;
		for (int w = 0; w < nw; w++) {
			t += acc[w][lane];
		}
		part[(long long)blockIdx.y * cols + j] = t;
	}
}

extern "C" __global__ void fleet_sumrows_partial_f32(float *__restrict__ part, const float *__restrict__ src, int rows, int cols, int chunkRows) {
	fleet_sumrows_partial_impl<fleet_f32>(part, src, rows, cols, chunkRows);
}
extern "C" __global__ void fleet_sumrows_partial_bf16(float *__restrict__ part, const unsigned short *__restrict__ src, int rows, int cols, int chunkRows) {
	fleet_sumrows_partial_impl<fleet_bf16>(part, src, rows, cols, chunkRows);
}

// fleet_colsum_f32: dst[j] = beta*dst[j] + sum_p part[p*cols + j], the
// nparts partial rows added in order. beta == 0 overwrites dst without
// reading it (so NaN garbage there does not survive); beta == 1 accumulates.
// Finishes SumRows. Traffic: part read once, dst read
// (beta != 0) and written once. Launch: 1-D blocks of 256 threads, one
// thread per column, grid min(ceil(cols/256), 8 per SM), grid-stride loop.
extern "C" __global__ void fleet_colsum_f32(float *__restrict__ dst, const float *__restrict__ part, int nparts, int cols, float beta) {
	FLEET_FOR_EACH(j, cols) {
		float s = 0.0f;
		for (int p = 0; p < nparts; p++) {
			s += part[(long long)p * cols + j];
		}
		dst[j] = beta == 0.0f ? s : beta * dst[j] + s;
	}
}

// fleet_sumcols_f32: dst[i] = alpha * sum_j src[i*cols + j]. One warp per row
// (lane l adds columns l, l+32, ..., then a fixed butterfly), grid-stride
// over rows. Traffic: src read once, dst written once. Launch: 1-D blocks of
// 256 threads (8 rows at a time), grid min(ceil(rows/8), 8 per SM).
extern "C" __global__ void fleet_sumcols_f32(float *__restrict__ dst, const float *__restrict__ src, int rows, int cols, float alpha) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		const float *row = src + r * cols;
		float s = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			s += row[j];
		}
		s = fleet_warp_sum(s);
		if (lane == 0) {
			dst[r] = alpha * s;
		}
	}
}

// fleet_sumsquares_partial_f32: part[b] = sum of src[i]^2 over the elements
// i = b*blockDim.x + t + k*gridDim.x*blockDim.x that block b's threads t
// visit, in float. The grid size (the number of partials) is chosen from n
// alone, so the split is the same on every device. Traffic: src read once.
// Launch: 1-D blocks of 256 threads, grid as the Go side's SumSquaresScratch.
extern "C" __global__ void fleet_sumsquares_partial_f32(float *__restrict__ part, const float *__restrict__ src, long long n) {
	__shared__ float red[32];
	float s = 0.0f;
	FLEET_FOR_EACH(i, n) {
		float v = src[i];
		s += v * v;
	}
	s = fleet_block_sum(s, red);
	if (threadIdx.x == 0) {
		part[blockIdx.x] = s;
	}
}

// fleet_sumsquares_finish_f32: dst[0] = beta*dst[0] + sum_p part[p] (dst
// not read where beta is 0), thread t adding partials t, t+blockDim.x, ...
// and the block summing those in a fixed tree. Launch: one block of 256
// threads.
extern "C" __global__ void fleet_sumsquares_finish_f32(float *__restrict__ dst, const float *__restrict__ part, int nparts, float beta) {
	__shared__ float red[32];
	float s = 0.0f;
	for (int p = threadIdx.x; p < nparts; p += blockDim.x) {
		s += part[p];
	}
	s = fleet_block_sum(s, red);
	if (threadIdx.x == 0) {
		dst[0] = (beta == 0.0f ? 0.0f : beta * dst[0]) + s;
	}
}

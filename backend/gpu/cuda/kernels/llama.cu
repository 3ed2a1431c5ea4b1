// The kernels of Llama-style blocks (backend.LlamaBlocks): RMSNorm, its
// fused residual add and backward pass, rotary position embeddings with
// the optional QK-norm, SwiGLU, and ReLU². Activations and their gradients
// (x, out, sum, dout, dx, dres, ddrop, qkv, gu and their gradients) are
// F32 or BF16 (suffix _f32, _bf16); weights, their gradients, rstd, the
// rotary table and the scratch are F32; every value is computed in float.
// Reductions keep the rule of reduce.cu: split by the operands' shape
// alone, summed in a fixed order, no float atomics, so the bits do not
// depend on the grid or the device.

// llama_sigmoid is 1/(1 + e^-x).
__device__ __forceinline__ float llama_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// ---------------------------------------------------------------------------
// RMSNorm.
//
// fleet_rmsnorm_<t>: for each row, rstd = 1/sqrt(sum(x^2)/cols + eps), out =
// x*rstd*w, rstd[r] saved for the backward pass. One warp per row, grid-
// stride over rows, 128-bit loads and stores where the rows are whole
// 16-byte pieces (llama_rmsnorm_row). Traffic: x read twice (the second
// time usually from L1/L2), w read per row (cached), out written once, 4
// bytes of rstd a row. Launch: 1-D blocks of 256 threads (8 rows at a time), grid
// min(ceil(rows/8), 8 per SM).
//
// llama_rmsnorm_row normalises row r (xr, cols wide) into yr with one warp
// (lane this thread's) and saves its rstd: the row fleet_rmsnorm_<t> and
// fleet_add_rmsnorm_<t> both normalise.
template <class S>
__device__ __forceinline__ void llama_rmsnorm_row(typename S::T *__restrict__ yr, float *__restrict__ rstd, long long r, const typename S::T *__restrict__ xr,
	const float *__restrict__ w, int cols, float eps, int lane) {
	// Where the row is whole 16-byte pieces (cols a multiple of 4 F32 or
	// 8 BF16 elements, every pointer aligned), each lane takes pieces of
	// N consecutive elements in 128-bit loads and stores, as
	// fleet_layernorm_row does; the arithmetic per element is the same,
	// the sum's order is by piece.
	const int N = 16 / sizeof(typename S::T);
	float rs;
	if (cols % N == 0 && fleet_aligned16(xr, yr, w)) {
		float ss = 0.0f, v[N], wv[N];
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(xr, j, v);
#pragma unroll
			for (int k = 0; k < N; k++) {
				ss += v[k] * v[k];
			}
		}
		rs = 1.0f / sqrtf(fleet_warp_sum(ss) / (float)cols + eps);
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(xr, j, v);
#pragma unroll
			for (int q = 0; q < N; q += 4) {
				fleet_ld16<fleet_f32>(w, j + q, wv + q);
			}
#pragma unroll
			for (int k = 0; k < N; k++) {
				v[k] = v[k] * rs * wv[k];
			}
			fleet_st16<S>(yr, j, v);
		}
	} else {
		float ss = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			float v = S::ld(xr, j);
			ss += v * v;
		}
		rs = 1.0f / sqrtf(fleet_warp_sum(ss) / (float)cols + eps);
		for (int j = lane; j < cols; j += 32) {
			S::st(yr, j, S::ld(xr, j) * rs * w[j]);
		}
	}
	if (lane == 0) {
		rstd[r] = rs;
	}
}

template <class S>
__device__ __forceinline__ void llama_rmsnorm_impl(typename S::T *__restrict__ out, float *__restrict__ rstd, const typename S::T *__restrict__ x,
	const float *__restrict__ w, int rows, int cols, float eps) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		llama_rmsnorm_row<S>(out + r * cols, rstd, r, x + r * cols, w, cols, eps, lane);
	}
}

extern "C" __global__ void fleet_rmsnorm_f32(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ x, const float *__restrict__ w,
	int rows, int cols, float eps) {
	llama_rmsnorm_impl<fleet_f32>(out, rstd, x, w, rows, cols, eps);
}
extern "C" __global__ void fleet_rmsnorm_bf16(unsigned short *__restrict__ out, float *__restrict__ rstd, const unsigned short *__restrict__ x,
	const float *__restrict__ w, int rows, int cols, float eps) {
	llama_rmsnorm_impl<fleet_bf16>(out, rstd, x, w, rows, cols, eps);
}

// fleet_add_rmsnorm_<t>: sum = x + y*f (x null: y*f), f each element's
// dropout factor (fleet_dropout_factors; 1 for a plain add), the product
// rounded before the sum; then out = RMSNorm(sum) as fleet_rmsnorm_<t>
// computes it, from sum as stored: the bits of fleet_dropout_add_<t>
// followed by fleet_rmsnorm_<t>, in one launch, the row still in cache
// (each lane reads back only what it wrote until the warp has synced).
// Traffic: x and y read once, sum written once and read back from cache,
// out written once. Launch: as fleet_rmsnorm_<t>.
template <class S>
__device__ __forceinline__ void llama_add_rmsnorm_impl(typename S::T *__restrict__ sum, typename S::T *__restrict__ out, float *__restrict__ rstd,
	const typename S::T *__restrict__ x, const typename S::T *__restrict__ y, const float *__restrict__ w, int rows, int cols, float eps,
	long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	unsigned long long sd = fleet_dropout_seed(seed, seedBase);
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		long long o = r * cols;
		for (int j = 4 * lane; j < cols; j += 128) { // four consecutive elements a lane: one Philox call
			int m = cols - j < 4 ? cols - j : 4;
			float f[4];
			fleet_dropout_factors(sd, offset, site, threshold, scale, o + j, m, f);
			for (int k = 0; k < m; k++) {
				float v = __fmul_rn(S::ld(y, o + j + k), f[k]);
				if (x != 0) {
					v = __fadd_rn(S::ld(x, o + j + k), v);
				}
				S::st(sum + o, j + k, v);
			}
		}
		__syncwarp(); // the row's sums, written by other lanes, are read next
		llama_rmsnorm_row<S>(out + o, rstd, r, sum + o, w, cols, eps, lane);
	}
}

extern "C" __global__ void fleet_add_rmsnorm_f32(float *__restrict__ sum, float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ x,
	const float *__restrict__ y, const float *__restrict__ w, int rows, int cols, float eps, long long seed, long long offset, int site,
	unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	llama_add_rmsnorm_impl<fleet_f32>(sum, out, rstd, x, y, w, rows, cols, eps, seed, offset, site, threshold, scale, seedBase);
}
extern "C" __global__ void fleet_add_rmsnorm_bf16(unsigned short *__restrict__ sum, unsigned short *__restrict__ out, float *__restrict__ rstd,
	const unsigned short *__restrict__ x, const unsigned short *__restrict__ y, const float *__restrict__ w, int rows, int cols, float eps,
	long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	llama_add_rmsnorm_impl<fleet_bf16>(sum, out, rstd, x, y, w, rows, cols, eps, seed, offset, site, threshold, scale, seedBase);
}

// fleet_rmsnorm_backward_<t>: the whole RMSNorm backward in one launch,
// as fleet_layernorm_backward_<t> (layernorm.cu) is LayerNorm's. With
// xhat = x*rstd and g = dout, for each row dx = rstd*(g*w -
// xhat*mean_j(g*w*xhat)), plus dres[same element] unless dres is null
// (the gradient x gathered from its other uses; it must not overlap dx);
// where ddrop is not null it also gets dx as stored times each element's
// dropout factor (the backward pass of the dropout whose output x is). And
// dw[j] += sum_r g*xhat, deterministically.
//
// Block c owns the chunk of rows [c*chunkRows, (c+1)*chunkRows) (grid:
// one block per chunk, 256 threads). First its warps take the chunk's
// rows, one warp a row (128-bit loads and stores where the rows are whole
// 16-byte pieces), and write dx. Then, for each strip of 32 columns in
// turn, warp w adds rows w, w+W, ... of the chunk with its lanes on
// adjacent columns (x and dout again, from cache), the warps' sums are
// added in warp order, and the chunk's partial goes to part[c*cols + j];
// the last block to finish a strip (counted in done[strip], the only
// atomic) adds the strip's C = gridDim.x partials in chunk order into dw
// and sets done[strip] back to 0: every sum has a fixed order, and done,
// zero before the first launch, is zero after every launch. Traffic: x
// and dout read twice (the second time from cache), dres read once, dx
// written once, partials written and read once, dw read and written once.
template <class S>
__device__ __forceinline__ void llama_rmsnorm_backward_row(typename S::T *__restrict__ dx, const typename S::T *__restrict__ dres,
	const typename S::T *__restrict__ dout, const typename S::T *__restrict__ x, const float *__restrict__ rstd, const float *__restrict__ w,
	long long r, int cols, bool vec, typename S::T *__restrict__ ddrop, long long seed, long long offset, int site, unsigned int threshold,
	float scale, const int *__restrict__ seedBase, int lane) {
	const int N = 16 / sizeof(typename S::T);
	long long o = r * cols;
	float rs = rstd[r];
	float s = 0.0f;
	if (vec) {
		float xv[N], gv[N], wv[N];
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(x, o + j, xv);
			fleet_ld16<S>(dout, o + j, gv);
#pragma unroll
			for (int q = 0; q < N; q += 4) {
				fleet_ld16<fleet_f32>(w, j + q, wv + q);
			}
#pragma unroll
			for (int k = 0; k < N; k++) {
				s += gv[k] * wv[k] * (xv[k] * rs);
			}
		}
	} else {
		for (int j = lane; j < cols; j += 32) {
			s += S::ld(dout, o + j) * w[j] * (S::ld(x, o + j) * rs);
		}
	}
	s = fleet_warp_sum(s) / (float)cols;
	if (vec) {
		float xv[N], gv[N], wv[N], rv[N];
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(x, o + j, xv);
			fleet_ld16<S>(dout, o + j, gv);
#pragma unroll
			for (int q = 0; q < N; q += 4) {
				fleet_ld16<fleet_f32>(w, j + q, wv + q);
			}
			if (dres != 0) {
				fleet_ld16<S>(dres, o + j, rv);
			}
#pragma unroll
			for (int k = 0; k < N; k++) {
				float v = rs * (gv[k] * wv[k] - xv[k] * rs * s);
				if (dres != 0) {
					v += rv[k];
				}
				xv[k] = v;
			}
			fleet_st16<S>(dx, o + j, xv);
		}
	} else {
		for (int j = lane; j < cols; j += 32) {
			float v = rs * (S::ld(dout, o + j) * w[j] - S::ld(x, o + j) * rs * s);
			if (dres != 0) {
				v += S::ld(dres, o + j);
			}
			S::st(dx, o + j, v);
		}
	}
	if (ddrop != 0) {
		__syncwarp(); // the row's dx, written by other lanes, is read next
		unsigned long long sd = fleet_dropout_seed(seed, seedBase);
		for (int j = 4 * lane; j < cols; j += 128) {
			int m = cols - j < 4 ? cols - j : 4;
			float f[4];
			fleet_dropout_factors(sd, offset, site, threshold, scale, o + j, m, f);
			for (int k = 0; k < m; k++) {
				S::st(ddrop, o + j + k, __fmul_rn(S::ld(dx, o + j + k), f[k]));
			}
		}
	}
}

template <class S>
__device__ __forceinline__ void llama_rmsnorm_backward_impl(typename S::T *__restrict__ dx, const typename S::T *__restrict__ dres, float *__restrict__ dw,
	float *part, unsigned int *done, const typename S::T *__restrict__ dout, const typename S::T *__restrict__ x, const float *__restrict__ rstd,
	const float *__restrict__ w, int rows, int cols, int chunkRows, typename S::T *__restrict__ ddrop, long long seed, long long offset, int site,
	unsigned int threshold, float scale, const int *__restrict__ seedBase, float (*acc)[32], int *last) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int nc = gridDim.x, cy = blockIdx.x;
	int r0 = cy * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	const int N = 16 / sizeof(typename S::T);
	bool vec = cols % N == 0 && fleet_aligned16(dx, dres, dout, x, w);
	for (int r = r0 + warp; r < r1; r += nw) {
		llama_rmsnorm_backward_row<S>(dx, dres, dout, x, rstd, w, r, cols, vec, ddrop, seed, offset, site, threshold, scale, seedBase, lane);
	}
	for (int strip = 0; strip * 32 < cols; strip++) {
		int j = strip * 32 + lane;
		float sw = 0.0f;
		if (j < cols) {
			for (int r = r0 + warp; r < r1; r += nw) {
				long long o = (long long)r * cols + j;
				sw += S::ld(dout, o) * (S::ld(x, o) * rstd[r]);
			}
		}
		acc[warp][lane] = sw;
		__syncthreads();
		if (warp == 0 && j < cols) {
			float t = 0.0f;
			for (int k = 0; k < nw; k++) {
				t += acc[k][lane];
			}
			part[(long long)cy * cols + j] = t;
		}
		__threadfence(); // the partials are visible before the count says so
		__syncthreads();
		if (threadIdx.x == 0) {
			*last = atomicAdd(&done[strip], 1u) == (unsigned int)(nc - 1);
		}
		__syncthreads();
		if (*last) {
			__threadfence();
			if (warp == 0 && j < cols) {
				const volatile float *vp = part; // written by other blocks: not from this block's cache
				float t = 0.0f;
				for (int p = 0; p < nc; p++) {
					t += vp[(long long)p * cols + j];
				}
				dw[j] += t;
			}
			if (threadIdx.x == 0) {
				done[strip] = 0u; // every block has counted: ready for the next launch
			}
		}
		__syncthreads(); // acc and last are this strip's until here
	}
}

extern "C" __global__ void fleet_rmsnorm_backward_f32(float *__restrict__ dx, const float *__restrict__ dres, float *__restrict__ dw, float *part,
	unsigned int *done, const float *__restrict__ dout, const float *__restrict__ x, const float *__restrict__ rstd, const float *__restrict__ w, int rows,
	int cols, int chunkRows, float *__restrict__ ddrop, long long seed, long long offset, int site, unsigned int threshold, float scale,
	const int *__restrict__ seedBase) {
	__shared__ float acc[32][32];
	__shared__ int last;
	llama_rmsnorm_backward_impl<fleet_f32>(dx, dres, dw, part, done, dout, x, rstd, w, rows, cols, chunkRows, ddrop, seed, offset, site, threshold, scale,
		seedBase, acc, &last);
}
extern "C" __global__ void fleet_rmsnorm_backward_bf16(unsigned short *__restrict__ dx, const unsigned short *__restrict__ dres, float *__restrict__ dw,
	float *part, unsigned int *done, const unsigned short *__restrict__ dout, const unsigned short *__restrict__ x, const float *__restrict__ rstd,
	const float *__restrict__ w, int rows, int cols, int chunkRows, unsigned short *__restrict__ ddrop, long long seed, long long offset, int site,
	unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	__shared__ float acc[32][32];
	__shared__ int last;
	llama_rmsnorm_backward_impl<fleet_bf16>(dx, dres, dw, part, done, dout, x, rstd, w, rows, cols, chunkRows, ddrop, seed, offset, site, threshold,
		scale, seedBase, acc, &last);
}

// ---------------------------------------------------------------------------
// Rotary position embeddings (Hugging Face's rotate_half), with QK-norm.
//
// qkv rows (b, t), row r = b*T + t at position Pos + t, are W = (H +
// 2*KVH)*HD wide: H query heads, KVH key heads, then KVH value heads, each
// HD wide (HD even, at most LLAMA_ROT_HDMAX). The table holds cos(t, j) at
// t*HD/2 + j and sin(t, j) at (MaxPos + t)*HD/2 + j. A head is a unit: one
// warp owns it, lane l the pairs (j, j + HD/2) for j = l, l + 32, ... <
// HD/2, so a head's dot products are a warp sum and the pairs stay in the
// lane's registers.

#define LLAMA_ROT_HDMAX 256
#define LLAMA_ROT_NP (LLAMA_ROT_HDMAX / 64) // pairs a lane owns at most
#define LLAMA_ROT_WARPS 8                   // warps per block: RotaryBackward's order depends on it

// fleet_rotary_<t>: out = the rotation of each q and k head of qkv, with
// QK-norm first where qw is not null (each q head RMS-normalised with qw
// [HD], each k head with kw, rstd[r*(H+KVH) + head] saved); the v heads
// copied. For a pair (a, b) = (x[j], x[j+HD/2]) at angle (pos, j):
// out[j] = a*cos - b*sin, out[j+HD/2] = b*cos + a*sin. One pass over qkv,
// a warp per (row, head), grid-stride over the B*T*(H+2*KVH) units.
// Traffic: qkv read once, out written once, the table's row of the
// position read per head (cached), rstd written once with QK-norm.
// Launch: 1-D blocks of 256 threads, grid min(ceil(units/8), 8 per SM).
template <class S>
__device__ __forceinline__ void llama_rotary_impl(typename S::T *__restrict__ out, float *__restrict__ rstd, const typename S::T *__restrict__ qkv,
	const float *__restrict__ qw, const float *__restrict__ kw, const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos,
	int MaxPos, float eps) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	int NH = H + 2 * KVH, half = HD / 2;
	long long W = (long long)NH * HD, units = (long long)B * T * NH;
	for (long long u = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); u < units; u += (long long)gridDim.x * wpb) {
		long long r = u / NH;
		int head = (int)(u % NH);
		const typename S::T *x = qkv + r * W + (long long)head * HD;
		typename S::T *o = out + r * W + (long long)head * HD;
		if (head >= H + KVH) { // a value head: copied
			for (int d = lane; d < HD; d += 32) {
				o[d] = x[d];
			}
			continue;
		}
		float a[LLAMA_ROT_NP], b[LLAMA_ROT_NP];
#pragma unroll
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			a[k] = j < half ? S::ld(x, j) : 0.0f;
			b[k] = j < half ? S::ld(x, j + half) : 0.0f;
		}
		const float *nw = head < H ? qw : kw;
		if (qw != 0) { // uniform over the launch
			float ss = 0.0f;
#pragma unroll
			for (int k = 0; k < LLAMA_ROT_NP; k++) {
				ss += a[k] * a[k] + b[k] * b[k];
			}
			float rs = 1.0f / sqrtf(fleet_warp_sum(ss) / (float)HD + eps);
#pragma unroll
			for (int k = 0; k < LLAMA_ROT_NP; k++) {
				int j = lane + 32 * k;
				if (j < half) {
					a[k] = a[k] * rs * nw[j];
					b[k] = b[k] * rs * nw[j + half];
				}
			}
			if (lane == 0) {
				rstd[r * (H + KVH) + head] = rs;
			}
		}
		int pos = Pos + (int)(r % T);
		const float *cs = table + (long long)pos * half, *sn = table + ((long long)MaxPos + pos) * half;
#pragma unroll
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			if (j < half) {
				float c = cs[j], s = sn[j];
				S::st(o, j, a[k] * c - b[k] * s);
				S::st(o, j + half, b[k] * c + a[k] * s);
			}
		}
	}
}

extern "C" __global__ void fleet_rotary_f32(float *__restrict__ out, float *__restrict__ rstd, const float *__restrict__ qkv, const float *__restrict__ qw,
	const float *__restrict__ kw, const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos, int MaxPos, float eps) {
	llama_rotary_impl<fleet_f32>(out, rstd, qkv, qw, kw, table, B, T, H, KVH, HD, Pos, MaxPos, eps);
}
extern "C" __global__ void fleet_rotary_bf16(unsigned short *__restrict__ out, float *__restrict__ rstd, const unsigned short *__restrict__ qkv,
	const float *__restrict__ qw, const float *__restrict__ kw, const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos,
	int MaxPos, float eps) {
	llama_rotary_impl<fleet_bf16>(out, rstd, qkv, qw, kw, table, B, T, H, KVH, HD, Pos, MaxPos, eps);
}

// fleet_rotary_backward_<t>: dqkv from dout, one pass: each q and k head's
// gradient turned back through the rotation (its transpose:
// g'[j] = g[j]*cos + g[j+HD/2]*sin, g'[j+HD/2] = g[j+HD/2]*cos - g[j]*sin),
// then, where qw is not null, through QK-norm: with xhat = x*rstd (x the
// forward's qkv) and w the head's weight, dx = rstd*(g'*w -
// xhat*mean_j(g'*w*xhat)), and Σ g'*xhat over the chunk's q heads (k
// heads) is the chunk's partial sum of dqw (dkw). The v heads' gradient
// is copied. Block y owns rows [y*chunkRows, (y+1)*chunkRows) and walks
// their (row, head) units, warp w taking units w, w+8, ...; each lane
// keeps its columns' sums in registers, and the warps' sums are added in
// warp order into part[y*2*HD + j] (dqw's HD columns, then dkw's), so
// every partial's order is fixed by the shape alone.
// fleet_rotary_backward_dw_f32 then adds the partials. Traffic: dout
// read once, qkv read once with QK-norm, dqkv written once, 2*HD partials
// a block. Launch: blocks of 256 threads (exactly), grid ceil(B*T/chunkRows).
template <class S>
__device__ __forceinline__ void llama_rotary_backward_impl(typename S::T *__restrict__ dqkv, float *__restrict__ part, const typename S::T *__restrict__ dout,
	const typename S::T *__restrict__ qkv, const float *__restrict__ rstd, const float *__restrict__ qw, const float *__restrict__ kw,
	const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos, int MaxPos, int chunkRows, float (*acc)[2 * LLAMA_ROT_HDMAX]) {
	if (blockDim.x != 32 * LLAMA_ROT_WARPS || blockDim.y != 1 || blockDim.z != 1) {
		__trap(); // the partial sums' order depends on the warp count
	}
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int NH = H + 2 * KVH, half = HD / 2;
	long long W = (long long)NH * HD, rows = (long long)B * T;
	long long r0 = (long long)blockIdx.x * chunkRows, r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	float pq[2 * LLAMA_ROT_NP], pk[2 * LLAMA_ROT_NP]; // this lane's columns j and j + HD/2, of dqw and of dkw
#pragma unroll
	for (int k = 0; k < 2 * LLAMA_ROT_NP; k++) {
		pq[k] = 0.0f;
		pk[k] = 0.0f;
	}
	long long units = (r1 - r0) * NH;
	for (long long u = warp; u < units; u += LLAMA_ROT_WARPS) {
		long long r = r0 + u / NH;
		int head = (int)(u % NH);
		const typename S::T *g = dout + r * W + (long long)head * HD;
		typename S::T *d = dqkv + r * W + (long long)head * HD;
		if (head >= H + KVH) {
			for (int e = lane; e < HD; e += 32) {
				d[e] = g[e];
			}
			continue;
		}
		int pos = Pos + (int)(r % T);
		const float *cs = table + (long long)pos * half, *sn = table + ((long long)MaxPos + pos) * half;
		float a[LLAMA_ROT_NP], b[LLAMA_ROT_NP];
#pragma unroll
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			a[k] = b[k] = 0.0f;
			if (j < half) {
				float ga = S::ld(g, j), gb = S::ld(g, j + half), c = cs[j], s = sn[j];
				a[k] = ga * c + gb * s;
				b[k] = gb * c - ga * s;
			}
		}
		if (qw == 0) { // uniform over the launch
#pragma unroll
			for (int k = 0; k < LLAMA_ROT_NP; k++) {
				int j = lane + 32 * k;
				if (j < half) {
					S::st(d, j, a[k]);
					S::st(d, j + half, b[k]);
				}
			}
			continue;
		}
		const typename S::T *x = qkv + r * W + (long long)head * HD;
		bool isq = head < H;
		const float *nw = isq ? qw : kw;
		float rs = rstd[r * (H + KVH) + head];
		float xa[LLAMA_ROT_NP], xb[LLAMA_ROT_NP], s = 0.0f;
#pragma unroll
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			xa[k] = xb[k] = 0.0f;
			if (j < half) {
				xa[k] = S::ld(x, j) * rs;
				xb[k] = S::ld(x, j + half) * rs;
				s += a[k] * nw[j] * xa[k] + b[k] * nw[j + half] * xb[k];
			}
		}
		s = fleet_warp_sum(s) / (float)HD;
#pragma unroll
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			if (j < half) {
				S::st(d, j, rs * (a[k] * nw[j] - xa[k] * s));
				S::st(d, j + half, rs * (b[k] * nw[j + half] - xb[k] * s));
				if (isq) {
					pq[2 * k] += a[k] * xa[k];
					pq[2 * k + 1] += b[k] * xb[k];
				} else {
					pk[2 * k] += a[k] * xa[k];
					pk[2 * k + 1] += b[k] * xb[k];
				}
			}
		}
	}
	if (qw == 0) {
		return;
	}
	// The warps' sums, added in warp order: column j of dqw at acc[w][j],
	// of dkw at acc[w][HD + j].
#pragma unroll
	for (int k = 0; k < LLAMA_ROT_NP; k++) {
		int j = lane + 32 * k;
		if (j < half) {
			acc[warp][j] = pq[2 * k];
			acc[warp][j + half] = pq[2 * k + 1];
			acc[warp][HD + j] = pk[2 * k];
			acc[warp][HD + j + half] = pk[2 * k + 1];
		}
	}
	__syncthreads();
	for (int c = threadIdx.x; c < 2 * HD; c += blockDim.x) {
		float t = 0.0f;
		for (int w = 0; w < LLAMA_ROT_WARPS; w++) {
			t += acc[w][c];
		}
		part[(long long)blockIdx.x * 2 * HD + c] = t;
	}
}

extern "C" __global__ void fleet_rotary_backward_f32(float *__restrict__ dqkv, float *__restrict__ part, const float *__restrict__ dout,
	const float *__restrict__ qkv, const float *__restrict__ rstd, const float *__restrict__ qw, const float *__restrict__ kw,
	const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos, int MaxPos, int chunkRows) {
	__shared__ float acc[LLAMA_ROT_WARPS][2 * LLAMA_ROT_HDMAX];
	llama_rotary_backward_impl<fleet_f32>(dqkv, part, dout, qkv, rstd, qw, kw, table, B, T, H, KVH, HD, Pos, MaxPos, chunkRows, acc);
}
extern "C" __global__ void fleet_rotary_backward_bf16(unsigned short *__restrict__ dqkv, float *__restrict__ part, const unsigned short *__restrict__ dout,
	const unsigned short *__restrict__ qkv, const float *__restrict__ rstd, const float *__restrict__ qw, const float *__restrict__ kw,
	const float *__restrict__ table, int B, int T, int H, int KVH, int HD, int Pos, int MaxPos, int chunkRows) {
	__shared__ float acc[LLAMA_ROT_WARPS][2 * LLAMA_ROT_HDMAX];
	llama_rotary_backward_impl<fleet_bf16>(dqkv, part, dout, qkv, rstd, qw, kw, table, B, T, H, KVH, HD, Pos, MaxPos, chunkRows, acc);
}

// fleet_rotary_backward_dw_f32: dqw[j] += Σ_p part[p*2*HD + j] and
// dkw[j] += Σ_p part[p*2*HD + HD + j] over the nparts chunks of
// fleet_rotary_backward_<t>. One warp per column (2*HD of them), lane l
// adding chunks l, l+32, ... in order, then the warp's fixed butterfly:
// the same bits on any grid. Traffic: part read once, dqw and dkw read
// and written once. Launch: 1-D blocks of 256 threads, grid
// min(ceil(2*HD/8), 8 per SM), grid-stride over the columns.
extern "C" __global__ void fleet_rotary_backward_dw_f32(float *__restrict__ dqw, float *__restrict__ dkw, const float *__restrict__ part, int nparts, int HD) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (int c = blockIdx.x * wpb + (threadIdx.x >> 5); c < 2 * HD; c += gridDim.x * wpb) {
		float s = 0.0f;
		for (int p = lane; p < nparts; p += 32) {
			s += part[(long long)p * 2 * HD + c];
		}
		s = fleet_warp_sum(s);
		if (lane == 0) {
			if (c < HD) {
				dqw[c] += s;
			} else {
				dkw[c - HD] += s;
			}
		}
	}
}

// ---------------------------------------------------------------------------
// SwiGLU.
//
// gu [rows, 2*hidden] holds the gate's columns, then the up projection's:
// out[r, j] = silu(g)*u with g = gu[r, j], u = gu[r, hidden + j], silu(g)
// = g*sigmoid(g). Where hidden is a multiple of 8 and the arrays are
// 16-byte aligned, a thread takes 8 consecutive elements of a row at a
// time (16-byte loads and stores of BF16, two of F32), the same arithmetic
// per element. Traffic: gu read once, out written once (the backward pass:
// gu and dout read once, dgu written once). Launch: 1-D blocks of 256
// threads, grid min(ceil(rows*hidden/256), 8 per SM), grid-stride loop.

// llama_ld8 reads 8 consecutive elements (16-byte aligned) as floats;
// llama_st8 stores them.
__device__ __forceinline__ void llama_ld8(const float *p, float v[8]) {
	float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
	v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void llama_ld8(const unsigned short *p, float v[8]) {
	uint4 a = *(const uint4 *)p;
	unsigned int w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
	for (int k = 0; k < 4; k++) {
		v[2 * k] = fleet_bf16_to_f32((unsigned short)(w[k] & 0xffffu));
		v[2 * k + 1] = fleet_bf16_to_f32((unsigned short)(w[k] >> 16));
	}
}
__device__ __forceinline__ void llama_st8(float *p, const float v[8]) {
	((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
	((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void llama_st8(unsigned short *p, const float v[8]) {
	unsigned int w[4];
#pragma unroll
	for (int k = 0; k < 4; k++) {
		w[k] = (unsigned int)fleet_f32_to_bf16(v[2 * k]) | ((unsigned int)fleet_f32_to_bf16(v[2 * k + 1]) << 16);
	}
	uint4 a;
	a.x = w[0], a.y = w[1], a.z = w[2], a.w = w[3];
	*(uint4 *)p = a;
}

// llama_vec8 reports whether rows of hidden elements (or, for ReLU², the
// whole arrays) at these pointers can go 8 at a time in 16-byte pieces.
__device__ __forceinline__ bool llama_vec8(long long hidden, const void *a, const void *b, const void *c = 0) {
	unsigned long long bits = (unsigned long long)a | (unsigned long long)b | (unsigned long long)c;
	return hidden % 8 == 0 && (bits & 15) == 0;
}

__device__ __forceinline__ float llama_swiglu1(float g, float u) { return g * llama_sigmoid(g) * u; }

// fleet_swiglu_<t>: out = silu(gate)*up.
template <class S>
__device__ __forceinline__ void llama_swiglu_impl(typename S::T *__restrict__ out, const typename S::T *__restrict__ gu, int rows, int hidden) {
	long long n = (long long)rows * hidden;
	if (llama_vec8(hidden, out, gu)) {
		FLEET_FOR_EACH(q, n >> 3) {
			long long i = q << 3, r = i / hidden, j = i % hidden;
			float g[8], u[8], o[8];
			llama_ld8(gu + r * 2 * hidden + j, g);
			llama_ld8(gu + r * 2 * hidden + hidden + j, u);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				o[k] = llama_swiglu1(g[k], u[k]);
			}
			llama_st8(out + i, o);
		}
		return;
	}
	FLEET_FOR_EACH(i, n) {
		long long r = i / hidden, j = i % hidden;
		S::st(out, i, llama_swiglu1(S::ld(gu, r * 2 * hidden + j), S::ld(gu, r * 2 * hidden + hidden + j)));
	}
}

extern "C" __global__ void fleet_swiglu_f32(float *__restrict__ out, const float *__restrict__ gu, int rows, int hidden) {
	llama_swiglu_impl<fleet_f32>(out, gu, rows, hidden);
}
extern "C" __global__ void fleet_swiglu_bf16(unsigned short *__restrict__ out, const unsigned short *__restrict__ gu, int rows, int hidden) {
	llama_swiglu_impl<fleet_bf16>(out, gu, rows, hidden);
}

// llama_swiglu_grad1 sets the gate's and the up projection's gradients
// from dout d: dgate = d*u*s*(1 + g*(1 - s)), dup = d*g*s, s = sigmoid(g).
__device__ __forceinline__ void llama_swiglu_grad1(float g, float u, float d, float &dg, float &du) {
	float s = llama_sigmoid(g);
	dg = d * u * s * (1.0f + g * (1.0f - s));
	du = d * g * s;
}

// fleet_swiglu_backward_<t>: dgu [rows, 2*hidden] from dout [rows, hidden]
// and the forward's gu.
template <class S>
__device__ __forceinline__ void llama_swiglu_backward_impl(typename S::T *__restrict__ dgu, const typename S::T *__restrict__ gu,
	const typename S::T *__restrict__ dout, int rows, int hidden) {
	long long n = (long long)rows * hidden;
	if (llama_vec8(hidden, dgu, gu, dout)) {
		FLEET_FOR_EACH(q, n >> 3) {
			long long i = q << 3, r = i / hidden, j = i % hidden;
			long long gi = r * 2 * hidden + j;
			float g[8], u[8], d[8], dg[8], du[8];
			llama_ld8(gu + gi, g);
			llama_ld8(gu + gi + hidden, u);
			llama_ld8(dout + i, d);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				llama_swiglu_grad1(g[k], u[k], d[k], dg[k], du[k]);
			}
			llama_st8(dgu + gi, dg);
			llama_st8(dgu + gi + hidden, du);
		}
		return;
	}
	FLEET_FOR_EACH(i, n) {
		long long r = i / hidden, j = i % hidden, gi = r * 2 * hidden + j;
		float dg, du;
		llama_swiglu_grad1(S::ld(gu, gi), S::ld(gu, gi + hidden), S::ld(dout, i), dg, du);
		S::st(dgu, gi, dg);
		S::st(dgu, gi + hidden, du);
	}
}

extern "C" __global__ void fleet_swiglu_backward_f32(float *__restrict__ dgu, const float *__restrict__ gu, const float *__restrict__ dout, int rows,
	int hidden) {
	llama_swiglu_backward_impl<fleet_f32>(dgu, gu, dout, rows, hidden);
}
extern "C" __global__ void fleet_swiglu_backward_bf16(unsigned short *__restrict__ dgu, const unsigned short *__restrict__ gu,
	const unsigned short *__restrict__ dout, int rows, int hidden) {
	llama_swiglu_backward_impl<fleet_bf16>(dgu, gu, dout, rows, hidden);
}

// ---------------------------------------------------------------------------
// ReLU² (squared ReLU).
//
// fleet_relu2_<t>: out[i] = r*r with r = max(x[i], 0), over n elements;
// fleet_relu2_backward_<t>: dx[i] = 2*r*dout[i]. The clamp is x < 0 ? 0 :
// x, so a NaN passes through (as on the CPU). Where n is a multiple of 8
// and the arrays are 16-byte aligned, a thread takes 8 consecutive
// elements at a time (llama_ld8, llama_st8), the same arithmetic per
// element. Traffic: x read once, out written once (the backward pass: x
// and dout read once, dx written once). Launch: 1-D blocks of 256
// threads, grid min(ceil(n/256), 8 per SM), grid-stride loop.

__device__ __forceinline__ float llama_relu_clamp(float x) { return x < 0.0f ? 0.0f : x; }
__device__ __forceinline__ float llama_relu2_1(float x) {
	float r = llama_relu_clamp(x);
	return r * r;
}
__device__ __forceinline__ float llama_relu2_grad1(float x, float d) { return 2.0f * llama_relu_clamp(x) * d; }

template <class S>
__device__ __forceinline__ void llama_relu2_impl(typename S::T *__restrict__ out, const typename S::T *__restrict__ x, long long n) {
	if (llama_vec8(n, out, x)) {
		FLEET_FOR_EACH(q, n >> 3) {
			long long i = q << 3;
			float v[8], o[8];
			llama_ld8(x + i, v);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				o[k] = llama_relu2_1(v[k]);
			}
			llama_st8(out + i, o);
		}
		return;
	}
	FLEET_FOR_EACH(i, n) {
		S::st(out, i, llama_relu2_1(S::ld(x, i)));
	}
}

extern "C" __global__ void fleet_relu2_f32(float *__restrict__ out, const float *__restrict__ x, long long n) { llama_relu2_impl<fleet_f32>(out, x, n); }
extern "C" __global__ void fleet_relu2_bf16(unsigned short *__restrict__ out, const unsigned short *__restrict__ x, long long n) {
	llama_relu2_impl<fleet_bf16>(out, x, n);
}

template <class S>
__device__ __forceinline__ void llama_relu2_backward_impl(typename S::T *__restrict__ dx, const typename S::T *__restrict__ x,
	const typename S::T *__restrict__ dout, long long n) {
	if (llama_vec8(n, dx, x, dout)) {
		FLEET_FOR_EACH(q, n >> 3) {
			long long i = q << 3;
			float v[8], d[8], o[8];
			llama_ld8(x + i, v);
			llama_ld8(dout + i, d);
#pragma unroll
			for (int k = 0; k < 8; k++) {
				o[k] = llama_relu2_grad1(v[k], d[k]);
			}
			llama_st8(dx + i, o);
		}
		return;
	}
	FLEET_FOR_EACH(i, n) {
		S::st(dx, i, llama_relu2_grad1(S::ld(x, i), S::ld(dout, i)));
	}
}

extern "C" __global__ void fleet_relu2_backward_f32(float *__restrict__ dx, const float *__restrict__ x, const float *__restrict__ dout, long long n) {
	llama_relu2_backward_impl<fleet_f32>(dx, x, dout, n);
}
extern "C" __global__ void fleet_relu2_backward_bf16(unsigned short *__restrict__ dx, const unsigned short *__restrict__ x,
	const unsigned short *__restrict__ dout, long long n) {
	llama_relu2_backward_impl<fleet_bf16>(dx, x, dout, n);
}

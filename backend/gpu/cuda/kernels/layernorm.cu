// LayerNorm over the last axis of rows x cols. x, out, dout and dx are F32
// or BF16 (suffix); w, b, mean, rstd, dw and db are always F32, and all
// arithmetic is in float.

// fleet_layernorm_<t>: for each row, mean = sum(x)/cols,
// rstd = 1/sqrt(sum((x - mean)^2)/cols + eps) (two passes, as the CPU),
// out = (x - mean)*rstd*w (+ b when b is not null); mean[r] and rstd[r] are
// saved for the backward pass (either may be null to skip it). One warp per
// row, grid-stride over rows; 128-bit loads and stores where the rows are
// whole 16-byte pieces (fleet_layernorm_row). Traffic: x read three times
// (the last two usually from L1/L2), w and b read per row (cached), out
// written once.
// Launch: 1-D blocks of 256 threads (8 rows at a time), grid
// min(ceil(rows/8), 8 per SM).
// fleet_layernorm_row normalises row r (xr, cols wide) into yr with one
// warp, lane being this thread's, and saves its mean and rstd (where not
// null): the row fleet_layernorm_<t> and fleet_add_layernorm_<t> both
// normalise.
template <class S>
__device__ __forceinline__ void fleet_layernorm_row(typename S::T *__restrict__ yr, float *__restrict__ mean, float *__restrict__ rstd, long long r,
	const typename S::T *__restrict__ xr, const float *__restrict__ w, const float *__restrict__ b, int cols, float eps, int lane) {
	// Where the row is whole 16-byte pieces (cols a multiple of 4 F32 or
	// 8 BF16 elements, every pointer aligned), each lane takes pieces of
	// N consecutive elements in 128-bit loads and stores; the arithmetic
	// per element is the same, the sums' order is by piece.
	const int N = 16 / sizeof(typename S::T);
	float m, rs;
	if (cols % N == 0 && fleet_aligned16(xr, yr, w, b)) {
		float s = 0.0f, v[N];
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(xr, j, v);
#pragma unroll
			for (int k = 0; k < N; k++) {
				s += v[k];
			}
		}
		m = fleet_warp_sum(s) / (float)cols;
		float sq = 0.0f;
		for (int j = N * lane; j < cols; j += 32 * N) {
			fleet_ld16<S>(xr, j, v);
#pragma unroll
			for (int k = 0; k < N; k++) {
				float d = v[k] - m;
				sq += d * d;
			}
		}
		rs = 1.0f / sqrtf(fleet_warp_sum(sq) / (float)cols + eps);
		for (int j = N * lane; j < cols; j += 32 * N) {
			float wv[N], bv[N];
			fleet_ld16<S>(xr, j, v);
#pragma unroll
			for (int q = 0; q < N; q += 4) {
				fleet_ld16<fleet_f32>(w, j + q, wv + q);
				if (b != 0) {
					fleet_ld16<fleet_f32>(b, j + q, bv + q);
				}
			}
#pragma unroll
			for (int k = 0; k < N; k++) {
				v[k] = (v[k] - m) * rs * wv[k];
				if (b != 0) {
					v[k] += bv[k];
				}
			}
			fleet_st16<S>(yr, j, v);
		}
	} else {
		float s = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			s += S::ld(xr, j);
		}
		m = fleet_warp_sum(s) / (float)cols;
		float sq = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			float d = S::ld(xr, j) - m;
			sq += d * d;
		}
		rs = 1.0f / sqrtf(fleet_warp_sum(sq) / (float)cols + eps);
		for (int j = lane; j < cols; j += 32) {
			float v = (S::ld(xr, j) - m) * rs * w[j];
			if (b != 0) {
				v += b[j];
			}
			S::st(yr, j, v);
		}
	}
	if (lane == 0) {
		if (mean != 0) {
			mean[r] = m;
		}
		if (rstd != 0) {
			rstd[r] = rs;
		}
	}
}

template <class S>
__device__ __forceinline__ void fleet_layernorm_impl(typename S::T *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const typename S::T *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		fleet_layernorm_row<S>(out + r * cols, mean, rstd, r, x + r * cols, w, b, cols, eps, lane);
	}
}

extern "C" __global__ void fleet_layernorm_f32(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	fleet_layernorm_impl<fleet_f32>(out, mean, rstd, x, w, b, rows, cols, eps);
}
extern "C" __global__ void fleet_layernorm_bf16(unsigned short *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const unsigned short *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	fleet_layernorm_impl<fleet_bf16>(out, mean, rstd, x, w, b, rows, cols, eps);
}

// fleet_add_layernorm_<t>: sum = x + y*f (x null: y*f), f the dropout
// factor of each element (fleet_dropout_factor; 1 for a plain add), then
// out = LayerNorm(sum) as fleet_layernorm_<t> computes it, from sum as
// stored: the bits of fleet_dropout_add_<t> followed by
// fleet_layernorm_<t>, in one launch, the row still in cache (each lane
// reads back only what it wrote). One warp per row, grid-stride over rows.
template <class S>
__device__ __forceinline__ void fleet_add_layernorm_impl(typename S::T *__restrict__ sum, typename S::T *__restrict__ out, float *__restrict__ mean,
	float *__restrict__ rstd, const typename S::T *__restrict__ x, const typename S::T *__restrict__ y, const float *__restrict__ w,
	const float *__restrict__ b, int rows, int cols, float eps, long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	unsigned long long sd = fleet_dropout_seed(seed, seedBase);
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		long long o = r * cols;
		// Four consecutive elements a lane: one Philox call serves them.
		for (int j = 4 * lane; j < cols; j += 128) {
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
		fleet_layernorm_row<S>(out + o, mean, rstd, r, sum + o, w, b, cols, eps, lane);
	}
}

extern "C" __global__ void fleet_add_layernorm_f32(float *__restrict__ sum, float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const float *__restrict__ x, const float *__restrict__ y, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps,
	long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	fleet_add_layernorm_impl<fleet_f32>(sum, out, mean, rstd, x, y, w, b, rows, cols, eps, seed, offset, site, threshold, scale, seedBase);
}
extern "C" __global__ void fleet_add_layernorm_bf16(unsigned short *__restrict__ sum, unsigned short *__restrict__ out, float *__restrict__ mean,
	float *__restrict__ rstd, const unsigned short *__restrict__ x, const unsigned short *__restrict__ y, const float *__restrict__ w,
	const float *__restrict__ b, int rows, int cols, float eps, long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	fleet_add_layernorm_impl<fleet_bf16>(sum, out, mean, rstd, x, y, w, b, rows, cols, eps, seed, offset, site, threshold, scale, seedBase);
}

// fleet_layernorm_backward_<t>: the whole LayerNorm backward in one
// launch. With xhat = (x - mean)*rstd and g = dout, for each row
// dx = rstd*(g*w - mean_j(g*w) - xhat*mean_j(g*w*xhat)), plus dres[same
// element] unless dres is null (the gradient x gathered from its other
// uses; it must not overlap dx); where ddrop is not null it also gets dx as
// stored times fleet_dropout_factor(fleet_dropout_seed(seed, seedBase),
// offset, site, threshold, scale, element) (a dropout's backward pass, for
// the dropout whose output x is). And dw[j] += sum_r g*xhat, and unless db
// is null db[j] += sum_r g, deterministically.
//
// Block c owns the chunk of rows [c*chunkRows, (c+1)*chunkRows) (grid:
// one block per chunk, 256 threads). First its warps take the chunk's
// rows, one warp a row (128-bit loads and stores where the rows are whole
// 16-byte pieces, as fleet_layernorm_row), and write dx. Then, for each
// strip of 32 columns in turn, warp w adds rows w, w+W, ... of the chunk
// with its lanes on adjacent columns (coalesced; x and dout again, from
// cache), the warps' sums are added in warp order, and the chunk's
// partials go to part[c*cols + j] (dw) and part[(C + c)*cols + j] (db), C
// = gridDim.x chunks; the last block to finish a strip (counted in
// done[strip], an integer per strip, the only atomic) adds the strip's C
// partials in chunk order into dw and db, and sets done[strip] back to 0.
// So every sum has a fixed order, whichever block finishes last, and done,
// zero before the first launch, is zero after every launch. Traffic: x
// and dout read twice (the second time from cache), dres read once, dx
// written once, partials written and read once, dw and db read and written
// once.
template <class S>
__device__ __forceinline__ void fleet_layernorm_backward_dx_row(typename S::T *__restrict__ dx, const typename S::T *__restrict__ dres,
	const typename S::T *__restrict__ dout, const typename S::T *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd,
	const float *__restrict__ w, long long r, int cols, bool vec, typename S::T *__restrict__ ddrop, long long seed, long long offset, int site,
	unsigned int threshold, float scale, const int *__restrict__ seedBase, int lane) {
	const int N = 16 / sizeof(typename S::T);
	long long o = r * cols;
	float m = mean[r], rs = rstd[r];
	float s1 = 0.0f, s2 = 0.0f;
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
				float xhat = (xv[k] - m) * rs;
				float gw = gv[k] * wv[k];
				s1 += gw;
				s2 += gw * xhat;
			}
		}
	} else {
		for (int j = lane; j < cols; j += 32) {
			float xhat = (S::ld(x, o + j) - m) * rs;
			float gw = S::ld(dout, o + j) * w[j];
			s1 += gw;
			s2 += gw * xhat;
		}
	}
	s1 = fleet_warp_sum(s1) / (float)cols;
	s2 = fleet_warp_sum(s2) / (float)cols;
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
				float xhat = (xv[k] - m) * rs;
				float v = rs * (gv[k] * wv[k] - s1 - xhat * s2);
				if (dres != 0) {
					v += rv[k];
				}
				xv[k] = v;
			}
			fleet_st16<S>(dx, o + j, xv);
		}
	} else {
		for (int j = lane; j < cols; j += 32) {
			float xhat = (S::ld(x, o + j) - m) * rs;
			float v = rs * (S::ld(dout, o + j) * w[j] - s1 - xhat * s2);
			if (dres != 0) {
				v += S::ld(dres, o + j);
			}
			S::st(dx, o + j, v);
		}
	}
	if (ddrop != 0) {
		// The gradient as stored, as the CPU masks it, four
		// consecutive elements a lane (one Philox call).
		__syncwarp();
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
__device__ __forceinline__ void fleet_layernorm_backward_impl(typename S::T *__restrict__ dx, const typename S::T *__restrict__ dres,
	float *__restrict__ dw, float *__restrict__ db, float *part, unsigned int *done, const typename S::T *__restrict__ dout,
	const typename S::T *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ w, int rows,
	int cols, int chunkRows, typename S::T *__restrict__ ddrop, long long seed, long long offset, int site, unsigned int threshold, float scale,
	const int *__restrict__ seedBase) {
	__shared__ float accw[32][32];
	__shared__ float accb[32][32];
	__shared__ int last;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int nc = gridDim.x, cy = blockIdx.x;
	int r0 = cy * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	const int N = 16 / sizeof(typename S::T);
	bool vec = cols % N == 0 && fleet_aligned16(dx, dres, dout, x, w);
	for (int r = r0 + warp; r < r1; r += nw) {
		fleet_layernorm_backward_dx_row<S>(dx, dres, dout, x, mean, rstd, w, r, cols, vec, ddrop, seed, offset, site, threshold, scale, seedBase, lane);
	}
	for (int strip = 0; strip * 32 < cols; strip++) {
		int j = strip * 32 + lane;
		float sw = 0.0f, sb = 0.0f;
		if (j < cols) {
			for (int r = r0 + warp; r < r1; r += nw) {
				long long o = (long long)r * cols + j;
				float g = S::ld(dout, o);
				sw += g * ((S::ld(x, o) - mean[r]) * rstd[r]);
				sb += g;
			}
		}
		accw[warp][lane] = sw;
		accb[warp][lane] = sb;
		__syncthreads();
		if (warp == 0 && j < cols) {
			float tw = 0.0f, tb = 0.0f;
			for (int k = 0; k < nw; k++) {
				tw += accw[k][lane];
				tb += accb[k][lane];
			}
			part[(long long)cy * cols + j] = tw;
			part[(long long)(nc + cy) * cols + j] = tb;
		}
		__threadfence(); // the partials are visible before the count says so
		__syncthreads();
		if (threadIdx.x == 0) {
			last = atomicAdd(&done[strip], 1u) == (unsigned int)(nc - 1);
		}
		__syncthreads();
		if (last) {
			__threadfence();
			if (warp == 0 && j < cols) {
				const volatile float *vp = part; // written by other blocks: not from this block's cache
				float tw = 0.0f, tb = 0.0f;
				for (int p = 0; p < nc; p++) {
					tw += vp[(long long)p * cols + j];
					tb += vp[(long long)(nc + p) * cols + j];
				}
				dw[j] += tw;
				if (db != 0) {
					db[j] += tb;
				}
			}
			if (threadIdx.x == 0) {
				done[strip] = 0u; // every block has counted: ready for the next launch
			}
		}
		__syncthreads(); // accw, accb and last are this strip's until here
	}
}

extern "C" __global__ void fleet_layernorm_backward_f32(float *__restrict__ dx, const float *__restrict__ dres, float *__restrict__ dw, float *__restrict__ db,
	float *part, unsigned int *done, const float *__restrict__ dout, const float *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd,
	const float *__restrict__ w, int rows, int cols, int chunkRows, float *__restrict__ ddrop, long long seed, long long offset, int site, unsigned int threshold,
	float scale, const int *__restrict__ seedBase) {
	fleet_layernorm_backward_impl<fleet_f32>(dx, dres, dw, db, part, done, dout, x, mean, rstd, w, rows, cols, chunkRows, ddrop, seed, offset, site, threshold, scale, seedBase);
}
extern "C" __global__ void fleet_layernorm_backward_bf16(unsigned short *__restrict__ dx, const unsigned short *__restrict__ dres, float *__restrict__ dw,
	float *__restrict__ db, float *part, unsigned int *done, const unsigned short *__restrict__ dout, const unsigned short *__restrict__ x,
	const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ w, int rows, int cols, int chunkRows,
	unsigned short *__restrict__ ddrop, long long seed, long long offset, int site, unsigned int threshold, float scale, const int *__restrict__ seedBase) {
	fleet_layernorm_backward_impl<fleet_bf16>(dx, dres, dw, db, part, done, dout, x, mean, rstd, w, rows, cols, chunkRows, ddrop, seed, offset, site, threshold, scale, seedBase);
}

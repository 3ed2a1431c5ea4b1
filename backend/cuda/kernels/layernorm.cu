// LayerNorm over the last axis of rows x cols. x, out, dout and dx are F32
// or BF16 (suffix); w, b, mean, rstd, dw and db are always F32, and all
// arithmetic is in float.

// fleet_layernorm_<t>: for each row, mean = sum(x)/cols,
// rstd = 1/sqrt(sum((x - mean)^2)/cols + eps) (two passes, as the CPU),
// out = (x - mean)*rstd*w (+ b when b is not null); mean[r] and rstd[r] are
// saved for the backward pass (either may be null to skip it). One warp per
// row, grid-stride over rows. Traffic: x read three times (the last two
// usually from L1/L2), w and b read per row (cached), out written once.
// Launch: 1-D blocks of 256 threads (8 rows at a time), grid
// min(ceil(rows/8), 8 per SM).
template <class S>
__device__ __forceinline__ void fleet_layernorm_impl(typename S::T *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const typename S::T *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		const typename S::T *xr = x + r * cols;
		typename S::T *yr = out + r * cols;
		float s = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			s += S::ld(xr, j);
		}
		float m = fleet_warp_sum(s) / (float)cols;
		float sq = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			float d = S::ld(xr, j) - m;
			sq += d * d;
		}
		float rs = 1.0f / sqrtf(fleet_warp_sum(sq) / (float)cols + eps);
		for (int j = lane; j < cols; j += 32) {
			float v = (S::ld(xr, j) - m) * rs * w[j];
			if (b != 0) {
				v += b[j];
			}
			S::st(yr, j, v);
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
}

extern "C" __global__ void fleet_layernorm_f32(float *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const float *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	fleet_layernorm_impl<fleet_f32>(out, mean, rstd, x, w, b, rows, cols, eps);
}
extern "C" __global__ void fleet_layernorm_bf16(unsigned short *__restrict__ out, float *__restrict__ mean, float *__restrict__ rstd,
	const unsigned short *__restrict__ x, const float *__restrict__ w, const float *__restrict__ b, int rows, int cols, float eps) {
	fleet_layernorm_impl<fleet_bf16>(out, mean, rstd, x, w, b, rows, cols, eps);
}

// fleet_layernorm_backward_dx_<t>: with xhat = (x - mean)*rstd and g = dout,
// dx = rstd*(g*w - mean_j(g*w) - xhat*mean_j(g*w*xhat)) for each row. One
// warp per row, grid-stride over rows. Traffic: x and dout read twice
// (second time from cache), dx written once. Launch: as fleet_layernorm_<t>.
template <class S>
__device__ __forceinline__ void fleet_layernorm_backward_dx_impl(typename S::T *__restrict__ dx, const typename S::T *__restrict__ dout,
	const typename S::T *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ w, int rows, int cols) {
	int lane = threadIdx.x & 31, wpb = blockDim.x >> 5;
	for (long long r = (long long)blockIdx.x * wpb + (threadIdx.x >> 5); r < rows; r += (long long)gridDim.x * wpb) {
		long long o = r * cols;
		float m = mean[r], rs = rstd[r];
		float s1 = 0.0f, s2 = 0.0f;
		for (int j = lane; j < cols; j += 32) {
			float xhat = (S::ld(x, o + j) - m) * rs;
			float gw = S::ld(dout, o + j) * w[j];
			s1 += gw;
			s2 += gw * xhat;
		}
		s1 = fleet_warp_sum(s1) / (float)cols;
		s2 = fleet_warp_sum(s2) / (float)cols;
		for (int j = lane; j < cols; j += 32) {
			float xhat = (S::ld(x, o + j) - m) * rs;
			S::st(dx, o + j, rs * (S::ld(dout, o + j) * w[j] - s1 - xhat * s2));
		}
	}
}

extern "C" __global__ void fleet_layernorm_backward_dx_f32(float *__restrict__ dx, const float *__restrict__ dout,
	const float *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ w, int rows, int cols) {
	fleet_layernorm_backward_dx_impl<fleet_f32>(dx, dout, x, mean, rstd, w, rows, cols);
}
extern "C" __global__ void fleet_layernorm_backward_dx_bf16(unsigned short *__restrict__ dx, const unsigned short *__restrict__ dout,
	const unsigned short *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, const float *__restrict__ w, int rows, int cols) {
	fleet_layernorm_backward_dx_impl<fleet_bf16>(dx, dout, x, mean, rstd, w, rows, cols);
}

// fleet_layernorm_backward_dwdb_<t>: partial sums of dw = sum_r g*xhat and
// db = sum_r g over one chunk of rows, laid out as fleet_sumrows_partial_<t>:
// blockIdx.y is the chunk (rows [y*chunkRows, (y+1)*chunkRows)), block x
// covers 32 columns, warp w adds rows w, w+W, ... with its lanes on adjacent
// columns (coalesced), and the warps' sums are added in warp order.
// part[y*cols + j] gets the dw partial and part[(C + y)*cols + j] the db
// partial, C = gridDim.y chunks. Traffic: x and dout read once, partials
// written once. Launch: blocks of 256 threads, grid (ceil(cols/32),
// ceil(rows/chunkRows)); then fleet_layernorm_backward_finish_f32.
template <class S>
__device__ __forceinline__ void fleet_layernorm_backward_dwdb_impl(float *__restrict__ part, const typename S::T *__restrict__ dout,
	const typename S::T *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, int rows, int cols, int chunkRows) {
	__shared__ float accw[32][32];
	__shared__ float accb[32][32];
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int j = blockIdx.x * 32 + lane;
	int r0 = blockIdx.y * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
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
		part[(long long)blockIdx.y * cols + j] = tw;
		part[(long long)(gridDim.y + blockIdx.y) * cols + j] = tb;
	}
}

extern "C" __global__ void fleet_layernorm_backward_dwdb_f32(float *__restrict__ part, const float *__restrict__ dout,
	const float *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, int rows, int cols, int chunkRows) {
	fleet_layernorm_backward_dwdb_impl<fleet_f32>(part, dout, x, mean, rstd, rows, cols, chunkRows);
}
extern "C" __global__ void fleet_layernorm_backward_dwdb_bf16(float *__restrict__ part, const unsigned short *__restrict__ dout,
	const unsigned short *__restrict__ x, const float *__restrict__ mean, const float *__restrict__ rstd, int rows, int cols, int chunkRows) {
	fleet_layernorm_backward_dwdb_impl<fleet_bf16>(part, dout, x, mean, rstd, rows, cols, chunkRows);
}

// fleet_layernorm_backward_finish_f32: dw[j] += sum_p part[p*cols + j] and,
// unless db is null, db[j] += sum_p part[(nparts + p)*cols + j], the nparts
// chunk partials added in order. Traffic: partials read once, dw and db read
// and written once. Launch: 1-D blocks of 256 threads, one thread per
// column, grid min(ceil(cols/256), 8 per SM), grid-stride loop.
extern "C" __global__ void fleet_layernorm_backward_finish_f32(float *__restrict__ dw, float *__restrict__ db, const float *__restrict__ part,
	int nparts, int cols) {
	FLEET_FOR_EACH(j, cols) {
		float sw = 0.0f, sb = 0.0f;
		for (int p = 0; p < nparts; p++) {
			sw += part[(long long)p * cols + j];
			sb += part[(long long)(nparts + p) * cols + j];
		}
		dw[j] += sw;
		if (db != 0) {
			db[j] += sb;
		}
	}
}

// LayerNorm over the last axis of rows x cols, as layernorm.cu. x, out,
// sum, dout, dx, dres and ddrop are F32 or BF16 (suffix); w, b, mean,
// rstd, dw, db and the scratch are always F32, and all arithmetic is in
// float.
//
// The row kernels (fleet_layernorm_$S, fleet_add_layernorm_$S, and the
// dx part of fleet_layernorm_backward_$S) give each row to one "warp" of 32
// consecutive work-items, grid-stride over rows: launch 1-D work-groups of
// 256 (8 rows at a time), any grid. The rows loop goes in rounds of one row
// a warp, the same for the whole group, so every work-item meets every
// barrier (a warp past the last row reduces zeros and touches no memory).
// CUDA's warp shuffle sums become local-memory trees that add in the order
// of its xor butterfly. fleet_layernorm_backward_$S's work-groups own
// chunks of rows (see it).

//@for S in f32 bf16
// fleet_ln_row_$S normalises row r (xr, cols wide) into yr with the
// calling warp and saves its mean and rstd (where not null): mean =
// sum(x)/cols, rstd = 1/sqrt(sum((x - mean)^2)/cols + eps) (two passes, as
// the CPU), y = (x - mean)*rstd*w (+ b where b is not null). Every
// work-item of the group calls it (it has barriers); act is whether the
// caller's warp has a row (0: reduce zeros, touch no memory).
inline void fleet_ln_row_$S(__global t_$S *yr, __global float *mean, __global float *rstd, long r, __global t_$S *xr, __global float *w,
	__global float *b, int cols, float eps, int act, __local float *red) {
	int lane = get_local_id(0) & 31;
	float s = 0.0f;
	if (act) {
		for (int j = lane; j < cols; j += 32) {
			s += ld_$S(xr, j);
		}
	}
	float m = fleet_warp_sum(s, red) / (float)cols;
	float sq = 0.0f;
	if (act) {
		for (int j = lane; j < cols; j += 32) {
			float d = ld_$S(xr, j) - m;
			sq += d * d;
		}
	}
	float rs = 1.0f / sqrt(fleet_warp_sum(sq, red) / (float)cols + eps);
	if (!act) {
		return;
	}
	for (int j = lane; j < cols; j += 32) {
		float v = (ld_$S(xr, j) - m) * rs * w[j];
		if (b != 0) {
			v += b[j];
		}
		st_$S(yr, j, v);
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

// fleet_ln_dropout_add_$S: dst[o+j] = y[o+j]·factor(o+j), plus x[o+j]
// where x is given, over the row's cols elements (the factors as
// fleet_dropout_factors gives them under key sd); each lane of the warp
// takes four consecutive elements at a time (one Philox call serves them).
inline void fleet_ln_dropout_add_$S(__global t_$S *dst, __global t_$S *x, __global t_$S *y, long o, int cols, ulong sd, long offset,
	int site, uint threshold, float scale) {
	for (int j = 4 * (get_local_id(0) & 31); j < cols; j += 128) {
		int n = min(cols - j, 4);
		float f[4];
		fleet_dropout_factors(sd, offset, site, threshold, scale, o + j, n, f);
		for (int k = 0; k < n; k++) {
			float v = ld_$S(y, o + j + k) * f[k];
			if (x != 0) {
				v = ld_$S(x, o + j + k) + v;
			}
			st_$S(dst, o + j + k, v);
		}
	}
}

// fleet_layernorm_$S: out = LayerNorm(x) row by row (fleet_ln_row_$S),
// saving mean[r] and rstd[r] for the backward pass (either may be null to
// skip it). x read three times (the last two usually from cache), w and b
// read per row, out written once.
__kernel void fleet_layernorm_$S(BUF(t_$S, out), BUF(float, mean), BUF(float, rstd), BUF(t_$S, x), BUF(float, w), BUF(float, b), int rows,
	int cols, float eps) {
	AT(t_$S, out);
	AT(float, mean);
	AT(float, rstd);
	AT(t_$S, x);
	AT(float, w);
	AT(float, b);
	__local float red[1024];
	int wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		fleet_ln_row_$S(out + r * cols, mean, rstd, r, x + r * cols, w, b, cols, eps, r < rows, red);
	}
}

// fleet_add_layernorm_$S: sum = x + y*f (x null: y*f), f each element's
// dropout factor (fleet_dropout_factor; 1 for a plain add), the product
// rounded before the sum; then out = LayerNorm(sum) as fleet_layernorm_$S
// computes it, from sum as stored: the bits of fleet_dropout_add_$S then
// fleet_layernorm_$S, in one launch, the row still in cache (the adds as
// fleet_ln_dropout_add_$S); a barrier makes the row's sums visible to the
// warp before it normalises them. sum may alias x or y.
__kernel void fleet_add_layernorm_$S(BUF(t_$S, sum), BUF(t_$S, out), BUF(float, mean), BUF(float, rstd), BUF(t_$S, x), BUF(t_$S, y),
	BUF(float, w), BUF(float, b), int rows, int cols, float eps, long seed, long offset, int site, uint threshold, float scale,
	BUF(int, seedBase)) {
	AT(t_$S, sum);
	AT(t_$S, out);
	AT(float, mean);
	AT(float, rstd);
	AT(t_$S, x);
	AT(t_$S, y);
	AT(float, w);
	AT(float, b);
	AT(int, seedBase);
	__local float red[1024];
	ulong sd = fleet_dropout_seed(seed, seedBase);
	int wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		long o = r * cols;
		if (r < rows) {
			fleet_ln_dropout_add_$S(sum, x, y, o, cols, sd, offset, site, threshold, scale);
		}
		barrier(CLK_GLOBAL_MEM_FENCE); // the row's sums, written by other lanes, are read next
		fleet_ln_row_$S(out + o, mean, rstd, r, sum + o, w, b, cols, eps, r < rows, red);
	}
}

// fleet_layernorm_backward_$S: the whole backward in one launch, as
// layernorm.cu's fleet_layernorm_backward_<t>. With xhat = (x -
// mean)*rstd and g = dout, for each row dx = rstd*(g*w - mean_j(g*w) -
// xhat*mean_j(g*w*xhat)), plus dres[same element] unless dres is null (it
// must not overlap dx); where ddrop is not null it also gets dx as stored
// times the element's dropout factor, four consecutive elements a lane
// after a barrier. And dw[j] += sum_r g*xhat, and unless db is null db[j]
// += sum_r g, deterministically. Work-group c owns rows [c*chunkRows,
// (c+1)*chunkRows): its warps first take the chunk's rows, one warp a row
// in rounds the whole group meets (a warp past the chunk reduces zeros);
// then, for each strip of 32 columns in turn, warp w adds rows w, w+W, ...
// of the chunk with its lanes on adjacent columns, the warps' sums are
// added in warp order into part[c*cols + j] (dw) and part[(C + c)*cols +
// j] (db), C the number of groups, and the last group to finish a strip
// (atomic_inc on done[strip], zero before the launch) adds the strip's C
// partials in chunk order into dw and db and sets done[strip] back to 0.
// Launch: work-groups of 256, one per chunk.
__kernel void fleet_layernorm_backward_$S(BUF(t_$S, dx), BUF(t_$S, dres), BUF(float, dw), BUF(float, db), BUF(float, part), BUF(uint, done),
	BUF(t_$S, dout), BUF(t_$S, x), BUF(float, mean), BUF(float, rstd), BUF(float, w), int rows, int cols, int chunkRows, BUF(t_$S, ddrop),
	long seed, long offset, int site, uint threshold, float scale, BUF(int, seedBase)) {
	AT(t_$S, dx);
	AT(t_$S, dres);
	AT(float, dw);
	AT(float, db);
	AT(float, part);
	AT(uint, done);
	AT(t_$S, dout);
	AT(t_$S, x);
	AT(float, mean);
	AT(float, rstd);
	AT(float, w);
	AT(t_$S, ddrop);
	AT(int, seedBase);
	__local float red[1024];
	__local float accw[32 * 32];
	__local float accb[32 * 32];
	__local int last[1]; // an array: clang warns of a __local scalar set by one work-item
	int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5, nw = get_local_size(0) >> 5;
	int nc = get_num_groups(0), cy = get_group_id(0);
	int r0 = cy * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	for (int base = r0; base < r1; base += nw) {
		long r = base + warp;
		int act = r < r1;
		long o = r * cols;
		float m = 0.0f, rs = 0.0f;
		float s1 = 0.0f, s2 = 0.0f;
		if (act) {
			m = mean[r];
			rs = rstd[r];
			for (int j = lane; j < cols; j += 32) {
				float xhat = (ld_$S(x, o + j) - m) * rs;
				float gw = ld_$S(dout, o + j) * w[j];
				s1 += gw;
				s2 += gw * xhat;
			}
		}
		s1 = fleet_warp_sum(s1, red) / (float)cols;
		s2 = fleet_warp_sum(s2, red) / (float)cols;
		if (act) {
			for (int j = lane; j < cols; j += 32) {
				float xhat = (ld_$S(x, o + j) - m) * rs;
				float v = rs * (ld_$S(dout, o + j) * w[j] - s1 - xhat * s2);
				if (dres != 0) {
					v += ld_$S(dres, o + j);
				}
				st_$S(dx, o + j, v);
			}
		}
		// The gradient as stored, as the CPU masks it: the row's dx,
		// written by other lanes, is read next. The barrier is met
		// whether or not ddrop is given (PoCL miscompiles it inside the
		// uniform if, writing out of bounds).
		barrier(CLK_GLOBAL_MEM_FENCE);
		if (ddrop != 0 && act) {
			fleet_ln_dropout_add_$S(ddrop, 0, dx, o, cols, fleet_dropout_seed(seed, seedBase), offset, site, threshold, scale);
		}
	}
	for (int strip = 0; strip * 32 < cols; strip++) {
		int j = strip * 32 + lane;
		float sw = 0.0f, sb = 0.0f;
		if (j < cols) {
			for (int r = r0 + warp; r < r1; r += nw) {
				long o = (long)r * cols + j;
				float g = ld_$S(dout, o);
				sw += g * ((ld_$S(x, o) - mean[r]) * rstd[r]);
				sb += g;
			}
		}
		accw[warp * 32 + lane] = sw;
		accb[warp * 32 + lane] = sb;
		barrier(CLK_LOCAL_MEM_FENCE);
		if (warp == 0 && j < cols) {
			float tw = 0.0f, tb = 0.0f;
			for (int k = 0; k < nw; k++) {
				tw += accw[k * 32 + lane];
				tb += accb[k * 32 + lane];
			}
			part[(long)cy * cols + j] = tw;
			part[(long)(nc + cy) * cols + j] = tb;
		}
		mem_fence(CLK_GLOBAL_MEM_FENCE); // the partials are written before the count says so
		barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
		if (get_local_id(0) == 0) {
			last[0] = atomic_inc((volatile __global uint *)&done[strip]) == (uint)(nc - 1);
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		if (last[0]) {
			mem_fence(CLK_GLOBAL_MEM_FENCE);
			if (warp == 0 && j < cols) {
				volatile __global float *vp = part; // written by other work-groups: read from memory
				float tw = 0.0f, tb = 0.0f;
				for (int p = 0; p < nc; p++) {
					tw += vp[(long)p * cols + j];
					tb += vp[(long)(nc + p) * cols + j];
				}
				dw[j] += tw;
				if (db != 0) {
					db[j] += tb;
				}
			}
			if (get_local_id(0) == 0) {
				done[strip] = 0u; // every group has counted: ready for the next launch
			}
		}
		barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE); // accw, accb and last are this strip's until here
	}
}
//@end

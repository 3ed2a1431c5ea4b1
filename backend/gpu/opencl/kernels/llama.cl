// The kernels of Llama-style blocks, as llama.cu: RMSNorm, its fused
// residual add and backward pass, rotary position embeddings with the
// optional QK-norm, SwiGLU, and ReLU². Activations and their gradients
// are F32 or BF16 (suffix); weights, their gradients, rstd, the rotary
// table and the scratch are F32; every value is computed in float.
//
// The row kernels give a row (or a head) to one "warp" of 32 consecutive
// work-items and go in rounds of one unit a warp, the same for the whole
// work-group, so every work-item meets every barrier (a warp past the last
// unit reduces zeros and touches no memory); CUDA's warp shuffle sums are
// local-memory trees in the order of its xor butterfly. Every reduction
// has a fixed order.

#define LLAMA_ROT_HDMAX 256
#define LLAMA_ROT_NP (LLAMA_ROT_HDMAX / 64) // pairs a lane owns at most
#define LLAMA_ROT_WARPS 8                   // work-items / 32 in fleet_rotary_backward_$S

// llama_sigmoid is 1/(1 + e^-x).
inline float llama_sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

//@for S in f32 bf16
// ---------------------------------------------------------------------------
// RMSNorm.

// llama_rms_row_$S normalises row r (xr, cols wide) into yr with the
// calling warp and saves its rstd: rstd = 1/sqrt(sum(x^2)/cols + eps),
// y = x*rstd*w. Every work-item of the group calls it (it has barriers);
// act is whether the caller's warp has a row (0: reduce zeros, touch no
// memory).
inline void llama_rms_row_$S(__global t_$S *yr, __global float *rstd, long r, __global t_$S *xr, __global float *w, int cols, float eps,
	int act, __local float *red) {
	int lane = get_local_id(0) & 31;
	float ss = 0.0f;
	if (act) {
		for (int j = lane; j < cols; j += 32) {
			float v = ld_$S(xr, j);
			ss += v * v;
		}
	}
	float rs = 1.0f / sqrt(fleet_warp_sum(ss, red) / (float)cols + eps);
	if (act) {
		for (int j = lane; j < cols; j += 32) {
			st_$S(yr, j, ld_$S(xr, j) * rs * w[j]);
		}
		if (lane == 0) {
			rstd[r] = rs;
		}
	}
}

// llama_dropout_add_$S: dst[o+j] = y[o+j]·factor(o+j), plus x[o+j] where
// x is given, over the row's cols elements, the product rounded before the
// sum; each lane takes four consecutive elements at a time (one Philox
// call serves them).
inline void llama_dropout_add_$S(__global t_$S *dst, __global t_$S *x, __global t_$S *y, long o, int cols, ulong sd, long offset, int site,
	uint threshold, float scale) {
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

// fleet_rmsnorm_$S: out = RMSNorm(x) row by row, rstd[r] saved. x read
// twice, w per row, out written once. Launch: 1-D work-groups of 256 (8
// rows at a time), any grid.
__kernel void fleet_rmsnorm_$S(BUF(t_$S, out), BUF(float, rstd), BUF(t_$S, x), BUF(float, w), int rows, int cols, float eps) {
	AT(t_$S, out);
	AT(float, rstd);
	AT(t_$S, x);
	AT(float, w);
	__local float red[1024];
	int wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		llama_rms_row_$S(out + r * cols, rstd, r, x + r * cols, w, cols, eps, r < rows, red);
	}
}

// fleet_add_rmsnorm_$S: sum = x + y*f (x null: y*f), f each element's
// dropout factor, then out = RMSNorm(sum) from sum as stored: the bits of
// fleet_dropout_add_$S then fleet_rmsnorm_$S, in one launch; a barrier
// makes the row's sums visible to the warp before it normalises them.
__kernel void fleet_add_rmsnorm_$S(BUF(t_$S, sum), BUF(t_$S, out), BUF(float, rstd), BUF(t_$S, x), BUF(t_$S, y), BUF(float, w), int rows,
	int cols, float eps, long seed, long offset, int site, uint threshold, float scale, BUF(int, seedBase)) {
	AT(t_$S, sum);
	AT(t_$S, out);
	AT(float, rstd);
	AT(t_$S, x);
	AT(t_$S, y);
	AT(float, w);
	AT(int, seedBase);
	__local float red[1024];
	ulong sd = fleet_dropout_seed(seed, seedBase);
	int wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		long o = r * cols;
		if (r < rows) {
			llama_dropout_add_$S(sum, x, y, o, cols, sd, offset, site, threshold, scale);
		}
		barrier(CLK_GLOBAL_MEM_FENCE); // the row's sums, written by other lanes, are read next
		llama_rms_row_$S(out + o, rstd, r, sum + o, w, cols, eps, r < rows, red);
	}
}

// fleet_rmsnorm_backward_$S: the whole backward in one launch, as llama.cu's
// fleet_rmsnorm_backward_<t> (and layernorm.cl's
// fleet_layernorm_backward_$S). With xhat = x*rstd and g = dout, for each
// row dx = rstd*(g*w - xhat*mean_j(g*w*xhat)), plus dres unless it is
// null; where ddrop is not null it also gets dx as stored times each
// element's dropout factor, after a barrier. And dw[j] += sum_r g*xhat,
// deterministically: work-group c owns rows [c*chunkRows, (c+1)*chunkRows);
// its warps first take the chunk's rows, one warp a row in rounds the
// whole group meets; then, for each strip of 32 columns, warp w adds rows
// w, w+W, ... of the chunk, the warps' sums are added in warp order into
// part[c*cols + j], and the last group to finish a strip (atomic_inc on
// done[strip], zero before the launch) adds the strip's partials in chunk
// order into dw and sets done[strip] back to 0. Launch: work-groups of
// 256, one per chunk.
__kernel void fleet_rmsnorm_backward_$S(BUF(t_$S, dx), BUF(t_$S, dres), BUF(float, dw), BUF(float, part), BUF(uint, done), BUF(t_$S, dout),
	BUF(t_$S, x), BUF(float, rstd), BUF(float, w), int rows, int cols, int chunkRows, BUF(t_$S, ddrop), long seed, long offset, int site,
	uint threshold, float scale, BUF(int, seedBase)) {
	AT(t_$S, dx);
	AT(t_$S, dres);
	AT(float, dw);
	AT(float, part);
	AT(uint, done);
	AT(t_$S, dout);
	AT(t_$S, x);
	AT(float, rstd);
	AT(float, w);
	AT(t_$S, ddrop);
	AT(int, seedBase);
	__local float red[1024];
	__local float acc[32 * 32];
	__local int last[1]; // an array: clang warns of a __local scalar set by one work-item
	int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5, nw = get_local_size(0) >> 5;
	int nc = get_num_groups(0), cy = get_group_id(0);
	int r0 = cy * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	for (int base = r0; base < r1; base += nw) {
		long r = base + warp;
		int act = r < r1;
		long o = r * cols;
		float rs = act ? rstd[r] : 0.0f;
		float s = 0.0f;
		if (act) {
			for (int j = lane; j < cols; j += 32) {
				s += ld_$S(dout, o + j) * w[j] * (ld_$S(x, o + j) * rs);
			}
		}
		s = fleet_warp_sum(s, red) / (float)cols;
		if (act) {
			for (int j = lane; j < cols; j += 32) {
				float v = rs * (ld_$S(dout, o + j) * w[j] - ld_$S(x, o + j) * rs * s);
				if (dres != 0) {
					v += ld_$S(dres, o + j);
				}
				st_$S(dx, o + j, v);
			}
		}
		barrier(CLK_GLOBAL_MEM_FENCE); // the row's dx, written by other lanes, is read next (met whether or not ddrop is given)
		if (ddrop != 0 && act) {
			llama_dropout_add_$S(ddrop, 0, dx, o, cols, fleet_dropout_seed(seed, seedBase), offset, site, threshold, scale);
		}
	}
	for (int strip = 0; strip * 32 < cols; strip++) {
		int j = strip * 32 + lane;
		float sw = 0.0f;
		if (j < cols) {
			for (int r = r0 + warp; r < r1; r += nw) {
				long o = (long)r * cols + j;
				sw += ld_$S(dout, o) * (ld_$S(x, o) * rstd[r]);
			}
		}
		acc[warp * 32 + lane] = sw;
		barrier(CLK_LOCAL_MEM_FENCE);
		if (warp == 0 && j < cols) {
			float t = 0.0f;
			for (int k = 0; k < nw; k++) {
				t += acc[k * 32 + lane];
			}
			part[(long)cy * cols + j] = t;
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
				float t = 0.0f;
				for (int p = 0; p < nc; p++) {
					t += vp[(long)p * cols + j];
				}
				dw[j] += t;
			}
			if (get_local_id(0) == 0) {
				done[strip] = 0u; // every group has counted: ready for the next launch
			}
		}
		barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE); // acc and last are this strip's until here
	}
}

// ---------------------------------------------------------------------------
// Rotary position embeddings with QK-norm (see llama.cu for the layout).

// fleet_rotary_$S: out = the rotation of each q and k head of qkv, after
// QK-norm where qw is not null (rstd saved); the v heads copied. A warp
// per (row, head), lane l the pairs (j, j + HD/2) for j = l, l + 32, ...;
// rounds of one unit a warp (the warp sum of QK-norm is met by every
// work-item, with zeros where there is none). Launch: 1-D work-groups of
// 256, any grid.
__kernel void fleet_rotary_$S(BUF(t_$S, out), BUF(float, rstd), BUF(t_$S, qkv), BUF(float, qw), BUF(float, kw), BUF(float, table), int B, int T,
	int H, int KVH, int HD, int Pos, int MaxPos, float eps) {
	AT(t_$S, out);
	AT(float, rstd);
	AT(t_$S, qkv);
	AT(float, qw);
	AT(float, kw);
	AT(float, table);
	__local float red[1024];
	int lane = get_local_id(0) & 31, wpb = get_local_size(0) >> 5;
	int NH = H + 2 * KVH, half_ = HD / 2;
	long W = (long)NH * HD, units = (long)B * T * NH;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < units; base += step) {
		long u = base + (get_local_id(0) >> 5);
		int act = u < units;
		long r = act ? u / NH : 0;
		int head = act ? (int)(u % NH) : 0;
		__global t_$S *x = qkv + r * W + (long)head * HD;
		__global t_$S *o = out + r * W + (long)head * HD;
		int rot = act && head < H + KVH; // a q or k head; a v head is copied
		if (act && !rot) {
			for (int d = lane; d < HD; d += 32) {
				o[d] = x[d];
			}
		}
		float a[LLAMA_ROT_NP], b[LLAMA_ROT_NP];
		float ss = 0.0f;
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			a[k] = rot && j < half_ ? ld_$S(x, j) : 0.0f;
			b[k] = rot && j < half_ ? ld_$S(x, j + half_) : 0.0f;
			ss += a[k] * a[k] + b[k] * b[k];
		}
		float rs = 1.0f / sqrt(fleet_warp_sum(ss, red) / (float)HD + eps);
		if (rot) {
			if (qw != 0) {
				__global float *nw = head < H ? qw : kw;
				for (int k = 0; k < LLAMA_ROT_NP; k++) {
					int j = lane + 32 * k;
					if (j < half_) {
						a[k] = a[k] * rs * nw[j];
						b[k] = b[k] * rs * nw[j + half_];
					}
				}
				if (lane == 0) {
					rstd[r * (H + KVH) + head] = rs;
				}
			}
			int pos = Pos + (int)(r % T);
			__global float *cs = table + (long)pos * half_, *sn = table + ((long)MaxPos + pos) * half_;
			for (int k = 0; k < LLAMA_ROT_NP; k++) {
				int j = lane + 32 * k;
				if (j < half_) {
					float c = cs[j], s = sn[j];
					st_$S(o, j, a[k] * c - b[k] * s);
					st_$S(o, j + half_, b[k] * c + a[k] * s);
				}
			}
		}
	}
}

// fleet_rotary_backward_$S: dqkv from dout as llama.cu's: the rotation's
// transpose, then QK-norm's backward pass where qw is not null, with the
// chunk's partial sums of dqw and dkw into part[y*2*HD + j]. Work-group y
// owns rows [y*chunkRows, (y+1)*chunkRows); warp w takes the chunk's
// (row, head) units w, w+8, ... in rounds the whole group goes through
// together; each lane keeps its columns' sums, and the warps' sums are
// added in warp order. Launch: work-groups of exactly 256 (others compute
// nothing), grid ceil(B*T/chunkRows).
__kernel void fleet_rotary_backward_$S(BUF(t_$S, dqkv), BUF(float, part), BUF(t_$S, dout), BUF(t_$S, qkv), BUF(float, rstd), BUF(float, qw),
	BUF(float, kw), BUF(float, table), int B, int T, int H, int KVH, int HD, int Pos, int MaxPos, int chunkRows) {
	AT(t_$S, dqkv);
	AT(float, part);
	AT(t_$S, dout);
	AT(t_$S, qkv);
	AT(float, rstd);
	AT(float, qw);
	AT(float, kw);
	AT(float, table);
	__local float red[1024];
	__local float acc[LLAMA_ROT_WARPS * 2 * LLAMA_ROT_HDMAX];
	bool ok = get_local_size(0) == 32 * LLAMA_ROT_WARPS && get_local_size(1) == 1 && get_local_size(2) == 1;
	int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5;
	int NH = H + 2 * KVH, half_ = HD / 2;
	long W = (long)NH * HD, rows = (long)B * T;
	long r0 = (long)get_group_id(0) * chunkRows, r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	float pq[2 * LLAMA_ROT_NP], pk[2 * LLAMA_ROT_NP];
	for (int k = 0; k < 2 * LLAMA_ROT_NP; k++) {
		pq[k] = 0.0f;
		pk[k] = 0.0f;
	}
	long units = ok ? (r1 - r0) * NH : 0;
	for (long u0 = 0; u0 < units; u0 += LLAMA_ROT_WARPS) {
		long u = u0 + warp;
		int act = u < units;
		long r = act ? r0 + u / NH : 0;
		int head = act ? (int)(u % NH) : 0;
		__global t_$S *g = dout + r * W + (long)head * HD;
		__global t_$S *d = dqkv + r * W + (long)head * HD;
		int rot = act && head < H + KVH;
		if (act && !rot) {
			for (int e = lane; e < HD; e += 32) {
				d[e] = g[e];
			}
		}
		int pos = Pos + (int)(r % T);
		__global float *cs = table + (long)pos * half_, *sn = table + ((long)MaxPos + pos) * half_;
		float a[LLAMA_ROT_NP], b[LLAMA_ROT_NP];
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			a[k] = 0.0f;
			b[k] = 0.0f;
			if (rot && j < half_) {
				float ga = ld_$S(g, j), gb = ld_$S(g, j + half_), c = cs[j], s = sn[j];
				a[k] = ga * c + gb * s;
				b[k] = gb * c - ga * s;
			}
		}
		int qk = rot && qw != 0;
		__global t_$S *x = qkv + r * W + (long)head * HD;
		int isq = head < H;
		__global float *nw = isq ? qw : kw;
		float rs = qk ? rstd[r * (H + KVH) + head] : 0.0f;
		float xa[LLAMA_ROT_NP], xb[LLAMA_ROT_NP], s = 0.0f;
		for (int k = 0; k < LLAMA_ROT_NP; k++) {
			int j = lane + 32 * k;
			xa[k] = 0.0f;
			xb[k] = 0.0f;
			if (qk && j < half_) {
				xa[k] = ld_$S(x, j) * rs;
				xb[k] = ld_$S(x, j + half_) * rs;
				s += a[k] * nw[j] * xa[k] + b[k] * nw[j + half_] * xb[k];
			}
		}
		s = fleet_warp_sum(s, red) / (float)HD;
		if (rot) {
			for (int k = 0; k < LLAMA_ROT_NP; k++) {
				int j = lane + 32 * k;
				if (j >= half_) {
					continue;
				}
				if (!qk) {
					st_$S(d, j, a[k]);
					st_$S(d, j + half_, b[k]);
					continue;
				}
				st_$S(d, j, rs * (a[k] * nw[j] - xa[k] * s));
				st_$S(d, j + half_, rs * (b[k] * nw[j + half_] - xb[k] * s));
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
	// The warps' sums, added in warp order (written by every work-group,
	// read only with QK-norm).
	for (int k = 0; k < LLAMA_ROT_NP; k++) {
		int j = lane + 32 * k;
		if (j < half_) {
			acc[warp * 2 * LLAMA_ROT_HDMAX + j] = pq[2 * k];
			acc[warp * 2 * LLAMA_ROT_HDMAX + j + half_] = pq[2 * k + 1];
			acc[warp * 2 * LLAMA_ROT_HDMAX + HD + j] = pk[2 * k];
			acc[warp * 2 * LLAMA_ROT_HDMAX + HD + j + half_] = pk[2 * k + 1];
		}
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	if (ok && qw != 0) {
		for (int c = get_local_id(0); c < 2 * HD; c += get_local_size(0)) {
			float t = 0.0f;
			for (int w = 0; w < LLAMA_ROT_WARPS; w++) {
				t += acc[w * 2 * LLAMA_ROT_HDMAX + c];
			}
			part[(long)get_group_id(0) * 2 * HD + c] = t;
		}
	}
}

// ---------------------------------------------------------------------------
// SwiGLU: gu [rows, 2*hidden] holds the gate's columns, then the up
// projection's; out[r, j] = silu(g)*u. Elementwise, grid-stride: gu read
// once, out written once (backward: gu and dout read once, dgu written
// once). Launch: 1-D work-groups of 256, any grid.

// fleet_swiglu_$S: out = g*sigmoid(g)*u.
__kernel void fleet_swiglu_$S(BUF(t_$S, out), BUF(t_$S, gu), int rows, int hidden) {
	AT(t_$S, out);
	AT(t_$S, gu);
	long n = (long)rows * hidden;
	FLEET_FOR_EACH(i, n) {
		long r = i / hidden, j = i % hidden;
		float g = ld_$S(gu, r * 2 * hidden + j), u = ld_$S(gu, r * 2 * hidden + hidden + j);
		st_$S(out, i, g * llama_sigmoid(g) * u);
	}
}

// fleet_swiglu_backward_$S: dgate = d*u*s*(1 + g*(1 - s)), dup = d*g*s,
// s = sigmoid(g).
__kernel void fleet_swiglu_backward_$S(BUF(t_$S, dgu), BUF(t_$S, gu), BUF(t_$S, dout), int rows, int hidden) {
	AT(t_$S, dgu);
	AT(t_$S, gu);
	AT(t_$S, dout);
	long n = (long)rows * hidden;
	FLEET_FOR_EACH(i, n) {
		long r = i / hidden, j = i % hidden, gi = r * 2 * hidden + j;
		float g = ld_$S(gu, gi), u = ld_$S(gu, gi + hidden), d = ld_$S(dout, i);
		float s = llama_sigmoid(g);
		st_$S(dgu, gi, d * u * s * (1.0f + g * (1.0f - s)));
		st_$S(dgu, gi + hidden, d * g * s);
	}
}

// ---------------------------------------------------------------------------
// ReLU² (squared ReLU), elementwise over n values, as llama.cu: r =
// x < 0 ? 0 : x (a NaN passes through). Grid-stride: x read once, out
// written once (backward: x and dout read once, dx written once).
// Launch: 1-D work-groups of 256, any grid.

// fleet_relu2_$S: out = r*r.
__kernel void fleet_relu2_$S(BUF(t_$S, out), BUF(t_$S, x), long n) {
	AT(t_$S, out);
	AT(t_$S, x);
	FLEET_FOR_EACH(i, n) {
		float r = ld_$S(x, i);
		r = r < 0.0f ? 0.0f : r;
		st_$S(out, i, r * r);
	}
}

// fleet_relu2_backward_$S: dx = 2*r*dout.
__kernel void fleet_relu2_backward_$S(BUF(t_$S, dx), BUF(t_$S, x), BUF(t_$S, dout), long n) {
	AT(t_$S, dx);
	AT(t_$S, x);
	AT(t_$S, dout);
	FLEET_FOR_EACH(i, n) {
		float r = ld_$S(x, i);
		r = r < 0.0f ? 0.0f : r;
		st_$S(dx, i, 2.0f * r * ld_$S(dout, i));
	}
}
//@end

// fleet_rotary_backward_dw_f32: dqw[j] += Σ_p part[p*2*HD + j] and dkw[j]
// += Σ_p part[p*2*HD + HD + j] over the nparts chunks, a warp per column
// (lane l adds chunks l, l+32, ... in order, then the warp's fixed tree),
// in rounds of one column a warp. Launch: 1-D work-groups of 256, any grid.
__kernel void fleet_rotary_backward_dw_f32(BUF(float, dqw), BUF(float, dkw), BUF(float, part), int nparts, int HD) {
	AT(float, dqw);
	AT(float, dkw);
	AT(float, part);
	__local float red[1024];
	int lane = get_local_id(0) & 31, wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < 2 * HD; base += step) {
		long c = base + (get_local_id(0) >> 5);
		float s = 0.0f;
		if (c < 2 * HD) {
			for (int p = lane; p < nparts; p += 32) {
				s += part[(long)p * 2 * HD + c];
			}
		}
		s = fleet_warp_sum(s, red);
		if (c < 2 * HD && lane == 0) {
			if (c < HD) {
				dqw[c] += s;
			} else {
				dkw[c - HD] += s;
			}
		}
	}
}

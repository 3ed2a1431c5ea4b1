// Causal self-attention: the OpenCL twins of attention.cu's CUDA-core
// kernels. attention_mma.cu's tensor-core kernels have none: an OpenCL
// device reports no tensor cores, so attention.go never launches them here.
//
// qkv [B, T, 3C] packs q, k and v, each C wide; head h is the slice
// [h*hd, (h+1)*hd) of each, hd = C/H <= 128. With KVH < H key/value heads
// (grouped-query attention) the rows are C + 2*KVH*hd wide, the keys'
// KVH*hd columns, then the values', after the queries', and query head h
// reads key/value head h/(H/KVH) where it lies; the dk/dv kernel's
// work-groups run over the key/value heads and sum each one's gradient
// over the query heads of its group, in order. Scores are q·k / sqrt(hd),
// masked so that query i sees keys 0..i. No T×T matrix is ever stored: the
// forward kernel runs an online softmax (running maximum and sum per query)
// and saves each row's log-sum-exp lse [B, H, T] (natural log); the
// backward kernels recompute the probabilities from it. Storage is F32 or
// BF16 (suffix _f32, _bf16) for qkv, out, dout and dqkv; lse, the backward
// scratch D and all arithmetic are F32. Scores are kept in base 2 (q or k
// premultiplied by log2(e)/sqrt(hd), exp2 throughout); lse is stored in
// natural-log units.
//
// Tiled kernels (forward, backward dq, backward dk/dv). Launch: NDRange of
// work-groups (B*H, ceil(T/R)), 1-D work-groups of R*G work-items, no
// dynamic local memory, where G = 1, 2, 4 or 8 is the smallest with
// 16*G >= hd and R = 64 rows per work-group (32 when G = 8), as
// attention.go's attnGroup and attnRows. G consecutive work-items own one
// row (a query, or a key in the dk/dv kernel): work-item g of the group
// holds the head dimensions d = 4*(c*G + g) + e, c < 4, e < 4, of its row
// in private arrays (HDP = 16*G dimensions, zero past hd). The other side
// (keys, or queries) is staged through local memory in tiles of
// ATTN_TILE/HDP rows. Without warp shuffles, a dot product over the head is
// summed in local memory: each work-item writes its 16-term share for a
// chunk of rows, one barrier, then every work-item of the group adds the G
// shares in the same fixed order, so all G hold identical bits and do the
// softmax bookkeeping redundantly. Share buffers alternate between two
// halves, so one barrier per chunk suffices. Every sum has a fixed order:
// results are deterministic, with no atomics. Local memory: 24 KiB a
// work-group (25 in dk/dv) whatever hd, inside OpenCL's 32 KiB minimum.
//
// The KV-cache inference kernel: NDRange ceil(B*T*H/8) work-groups of 256,
// each run of 32 work-items (a "warp") owning one (b, t, h), h fastest
// (see fleet_attention_kv_f32).

#define ATTN_HDMAX 128
#define ATTN_TILE 2048 // floats per staged tile: ATTN_TILE/HDP rows
#define ATTN_KC 4      // keys per online-softmax update (forward)
#define ATTN_BKC 2     // rows per barrier in the backward kernels
#define ATTN_PART 2048 // floats of share scratch: 2 halves × ATTN_KC × 256 (or 2 × 2 × ATTN_BKC × 256)
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.69314718055994531f

// attn_scale is 1/sqrt(hd), the score scale.
inline float attn_scale(int hd) { return 1.0f / sqrt((float)hd); }

// attn_group is G for head size hd (0 for hd > ATTN_HDMAX); attn_rows is R.
inline int attn_group(int hd) { return hd <= 16 ? 1 : hd <= 32 ? 2 : hd <= 64 ? 4 : hd <= ATTN_HDMAX ? 8 : 0; }
inline int attn_rows(int G) { return G == 8 ? 32 : 64; }

// attn_launch_group is G for head size hd, or 0 unless the work-group is
// the shape the tiled kernels assume for it (or hd > ATTN_HDMAX). On 0 the
// kernels run with G = 1 and nothing to do, writing nothing (CUDA traps);
// they do not return early, as a return before a barrier miscompiles on
// PoCL 3.1.
inline int attn_launch_group(int hd) {
	int G = attn_group(hd);
	bool ok = G != 0 && get_local_size(0) == (size_t)(attn_rows(G) * G) && get_local_size(1) == 1 && get_local_size(2) == 1;
	return ok ? G : 0;
}

// attn_dot is this work-item's share of x · tile[j] (tile row stride HDP).
inline float attn_dot(const float *x, __local const float *tile, int j, int g, int G) {
	__local const float *row = tile + j * 16 * G;
	float acc = 0.0f;
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			acc += x[4 * c + e] * row[4 * (c * G + g) + e];
		}
	}
	return acc;
}

// attn_axpy adds a * tile[j] to this work-item's dimensions of acc.
inline void attn_axpy(float *acc, float a, __local const float *tile, int j, int g, int G) {
	__local const float *row = tile + j * 16 * G;
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			acc[4 * c + e] += a * row[4 * (c * G + g) + e];
		}
	}
}

// attn_gsum adds the G shares of row r in p (p[r*G + k], k < G), in order
// of k: every work-item of the group gets the same bits.
inline float attn_gsum(__local const float *p, int r, int G) {
	p += r * G;
	float v = p[0];
	for (int k = 1; k < G; k++) {
		v += p[k];
	}
	return v;
}

// attn_drop is attention's dropout on its probabilities, as
// attention.cu's fleet_attn_drop (backend.Attention.Drop): the factor of
// query i and key j of sequence-head bh is the mask's factor of element
// (bh*T + i)*T + j; on is 0 for a threshold of 0 (no dropout).
typedef struct {
	ulong key;
	long offset;
	int site;
	uint threshold;
	float scale;
	int on;
} attn_drop;

inline attn_drop attn_drop_make(long seed, long offset, int site, uint threshold, float scale, __global int *base) {
	attn_drop d;
	d.on = threshold != 0u;
	d.key = d.on ? fleet_dropout_seed(seed, base) : 0ul;
	d.offset = offset;
	d.site = site;
	d.threshold = threshold;
	d.scale = scale;
	return d;
}

inline float attn_drop_factor(attn_drop d, long bh, int T, int i, int j) {
	return fleet_dropout_factor(d.key, d.offset, d.site, d.threshold, d.scale, (bh * T + i) * (long)T + j);
}

//@for S in f32 bf16
// attn_load_tile_$S stages rows [0, rows) of a head slice into dst
// [rows][HDP] as F32, row r read from src + r*stride; columns >= hd are
// zero (no stale NaN reaches a dot product). Rows past rows are left as
// they are: the kernels read only the rows they load. Consecutive
// work-items take consecutive elements (coalesced reads).
inline void attn_load_tile_$S(__local float *dst, __global const t_$S *src, long stride, int rows, int hd, int HDP) {
	int n = rows * HDP;
	for (int e = get_local_id(0); e < n; e += get_local_size(0)) {
		int r = e / HDP, c = e % HDP;
		dst[e] = c < hd ? ld_$S(src, r * stride + c) : 0.0f;
	}
}

// attn_load_row_$S reads this work-item's dimensions of one row into x,
// times mul; dimensions >= hd (all of them when !valid) are zero.
inline void attn_load_row_$S(float *x, __global const t_$S *row, int g, int G, int hd, bool valid, float mul) {
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int d = 4 * (c * G + g) + e;
			x[4 * c + e] = (valid && d < hd) ? ld_$S(row, d) * mul : 0.0f;
		}
	}
}

// attn_store_row_$S writes this work-item's dimensions (those < hd) of one
// row, times mul.
inline void attn_store_row_$S(__global t_$S *row, const float *x, int g, int G, int hd, float mul) {
#pragma unroll
	for (int c = 0; c < 4; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int d = 4 * (c * G + g) + e;
			if (d < hd) {
				st_$S(row, d, x[4 * c + e] * mul);
			}
		}
	}
}

// attn_fwd_$S: work-group (bh, y) handles batch b = bh / H, head h = bh % H
// and query rows [q0, q0+R), numbered so that y = 0 is the last query block
// (the most keys). Each group keeps its query (scaled) and output
// accumulator private and walks the key tiles up to min(T, q0+R): tiles
// wholly above the diagonal are never visited. Every ATTN_KC keys the
// running max m, sum l and output o are rescaled by exp2(m - m') and the
// chunk's probabilities added (in key order). Finally out = o/l and
// lse = (m + log2 l)·ln 2.
inline void attn_fwd_$S(__global t_$S *out, __global float *lse, __global const t_$S *qkv, int T, int C, int H, int KVH, int G0,
	__local float *ks, __local float *vs, __local float *part, attn_drop dr) {
	int G = max(G0, 1);
	int HDP = 16 * G, R = attn_rows(G), n = R * G, bc = ATTN_TILE / HDP;
	int hd = C / H;
	int nqb = (T + R - 1) / R;
	int q0 = (nqb - 1 - (int)get_group_id(1)) * R;
	int bh = get_group_id(0), b = bh / H, h = bh % H, kvh = h / (H / KVH);
	int t = get_local_id(0), g = t % G, r = t / G, i = q0 + r;
	bool valid = G0 != 0 && i < T;
	long stride = (long)C + 2L * KVH * hd;
	__global const t_$S *base = qkv + (long)b * T * stride + (long)h * hd;
	__global const t_$S *kbase = qkv + (long)b * T * stride + C + (long)kvh * hd, *vbase = kbase + (long)KVH * hd;

	float q[16], o[16];
	attn_load_row_$S(q, base + (long)i * stride, g, G, hd, valid, attn_scale(hd) * ATTN_LOG2E);
#pragma unroll
	for (int x = 0; x < 16; x++) {
		o[x] = 0.0f;
	}
	float m = FLEET_NEG_INF, l = 0.0f;
	int half_ = 0; // which half of part this chunk's shares go to

	int kend = G0 != 0 ? min(T, q0 + R) : 0;
	for (int k0 = 0; k0 < kend; k0 += bc) {
		barrier(CLK_LOCAL_MEM_FENCE); // the previous tile is no longer read
		// Keys from kend on are masked for every row of the work-group:
		// neither loaded nor visited. jn is uniform, so every work-item
		// meets the barriers.
		int jn = min(bc, kend - k0);
		attn_load_tile_$S(ks, kbase + k0 * stride, stride, jn, hd, HDP);
		attn_load_tile_$S(vs, vbase + k0 * stride, stride, jn, hd, HDP);
		barrier(CLK_LOCAL_MEM_FENCE);

		for (int j0 = 0; j0 < jn; j0 += ATTN_KC) {
			__local float *p = part + half_ * (ATTN_KC * n);
			half_ ^= 1;
#pragma unroll
			for (int jj = 0; jj < ATTN_KC; jj++) {
				if (j0 + jj < jn) {
					p[jj * n + t] = attn_dot(q, ks, j0 + jj, g, G);
				}
			}
			barrier(CLK_LOCAL_MEM_FENCE);
			float s[ATTN_KC];
			float mt = FLEET_NEG_INF;
#pragma unroll
			for (int jj = 0; jj < ATTN_KC; jj++) {
				int j = j0 + jj;
				s[jj] = FLEET_NEG_INF;
				if (j < jn && k0 + j <= i) {
					s[jj] = attn_gsum(p + jj * n, r, G);
				}
				mt = fmax(mt, s[jj]);
			}
			// Key 0 is in the first chunk and visible to every row, so
			// mn is finite from the first chunk on and the exponents
			// below never see -inf - -inf.
			float mn = fmax(m, mt);
			float a = exp2(m - mn);
			l *= a;
#pragma unroll
			for (int x = 0; x < 16; x++) {
				o[x] *= a;
			}
#pragma unroll
			for (int jj = 0; jj < ATTN_KC; jj++) {
				int j = j0 + jj;
				if (j < jn) {
					float pr = exp2(s[jj] - mn);
					l += pr;
					if (dr.on && k0 + j <= i) { // the probability dropped for the product with V
						pr *= attn_drop_factor(dr, bh, T, i, k0 + j);
					}
					attn_axpy(o, pr, vs, j, g, G);
				}
			}
			m = mn;
		}
	}
	if (valid) {
		attn_store_row_$S(out + ((long)b * T + i) * C + (long)h * hd, o, g, G, hd, 1.0f / l);
		if (g == 0) {
			lse[(long)bh * T + i] = (m + log2(l)) * ATTN_LN2;
		}
	}
}

// fleet_attention_fwd_$S: out [B,T,C] and lse [B,H,T] (F32) from qkv
// [B,T,3C]; out rounded to nearest even for BF16.
__kernel void fleet_attention_fwd_$S(BUF(t_$S, out), BUF(float, lse), BUF(t_$S, qkv), int B, int T, int C, int H, int KVH, long dropSeed, long dropOffset, int dropSite, uint dropThreshold, float dropScale, BUF(int, seedBase)) {
	AT(int, seedBase);
	AT(t_$S, out);
	AT(float, lse);
	AT(t_$S, qkv);
	__local float ks[ATTN_TILE];
	__local float vs[ATTN_TILE];
	__local float part[ATTN_PART];
	attn_fwd_$S(out, lse, qkv, T, C, H, KVH, attn_launch_group(C / H), ks, vs, part, attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// Backward. With P = softmax(scale·QKᵀ) (masked) recomputed as
// exp(scale·q·k − lse):
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − D),  D_i = Σ_d dO_i·O_i,
//   dQ = scale·dS K,  dK = scale·dSᵀ Q.
// Every output element is a sum owned by one work-item and accumulated in
// a fixed order: one kernel parallel over query tiles sums dQ over keys
// (and writes D to the scratch), then one parallel over key tiles sums dK
// and dV over queries, reading D. P is computed twice, but there are no
// float atomics.

// attn_bwd_dq_$S: work-group (bh, y) owns query rows [q0, q0+R) (largest
// q0 first); each group holds q (scaled), dO and its dq accumulator and
// walks the key tiles up to its diagonal, K and V staged in local memory.
inline void attn_bwd_dq_$S(__global t_$S *dqkv, __global float *D, __global const t_$S *dout, __global const t_$S *out,
	__global const float *lse, __global const t_$S *qkv, int T, int C, int H, int KVH, int G0,
	__local float *ks, __local float *vs, __local float *part, attn_drop dr) {
	int G = max(G0, 1);
	int HDP = 16 * G, R = attn_rows(G), n = R * G, bc = ATTN_TILE / HDP;
	int hd = C / H;
	int nqb = (T + R - 1) / R;
	int q0 = (nqb - 1 - (int)get_group_id(1)) * R;
	int bh = get_group_id(0), b = bh / H, h = bh % H, kvh = h / (H / KVH);
	int t = get_local_id(0), g = t % G, r = t / G, i = q0 + r;
	bool valid = G0 != 0 && i < T;
	long stride = (long)C + 2L * KVH * hd;
	__global const t_$S *base = qkv + (long)b * T * stride + (long)h * hd;
	__global const t_$S *kbase = qkv + (long)b * T * stride + C + (long)kvh * hd, *vbase = kbase + (long)KVH * hd;
	long orow = ((long)b * T + i) * C + (long)h * hd; // row i of out, dout (only read when valid)
	float scale = attn_scale(hd);

	float q[16], dO[16], dq[16];
	attn_load_row_$S(q, base + (long)i * stride, g, G, hd, valid, scale * ATTN_LOG2E);
	attn_load_row_$S(dO, dout + orow, g, G, hd, valid, 1.0f);
	// D_i = dO_i · O_i; dq holds O_i for now.
	attn_load_row_$S(dq, out + orow, g, G, hd, valid, 1.0f);
	float Di = 0.0f;
#pragma unroll
	for (int x = 0; x < 16; x++) {
		Di += dO[x] * dq[x];
		dq[x] = 0.0f;
	}
	if (G0 != 0) {
		part[t] = Di;
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	if (G0 != 0) {
		Di = attn_gsum(part, r, G); // part is next written after the tile loop's first barrier
	}
	float lse2 = valid ? lse[(long)bh * T + i] * ATTN_LOG2E : 0.0f;
	if (valid && g == 0) {
		D[(long)bh * T + i] = Di;
	}
	int half_ = 0;

	int kend = G0 != 0 ? min(T, q0 + R) : 0;
	for (int k0 = 0; k0 < kend; k0 += bc) {
		barrier(CLK_LOCAL_MEM_FENCE);
		int jn = min(bc, kend - k0); // keys past kend: masked for the whole work-group
		attn_load_tile_$S(ks, kbase + k0 * stride, stride, jn, hd, HDP);
		attn_load_tile_$S(vs, vbase + k0 * stride, stride, jn, hd, HDP);
		barrier(CLK_LOCAL_MEM_FENCE);
		for (int j0 = 0; j0 < jn; j0 += ATTN_BKC) {
			__local float *p = part + half_ * (2 * ATTN_BKC * n);
			half_ ^= 1;
#pragma unroll
			for (int jj = 0; jj < ATTN_BKC; jj++) {
				if (j0 + jj < jn) {
					p[(2 * jj) * n + t] = attn_dot(q, ks, j0 + jj, g, G);
					p[(2 * jj + 1) * n + t] = attn_dot(dO, vs, j0 + jj, g, G);
				}
			}
			barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
			for (int jj = 0; jj < ATTN_BKC; jj++) {
				int j = j0 + jj;
				if (j < jn) {
					float s = attn_gsum(p + (2 * jj) * n, r, G);
					float dp = attn_gsum(p + (2 * jj + 1) * n, r, G);
					float pr = (k0 + j <= i) ? exp2(s - lse2) : 0.0f;
					if (dr.on && k0 + j <= i) { // dS = P ⊙ (F ⊙ dO·Vᵀ − D)
						dp *= attn_drop_factor(dr, bh, T, i, k0 + j);
					}
					attn_axpy(dq, pr * (dp - Di), ks, j, g, G);
				}
			}
		}
	}
	if (valid) {
		attn_store_row_$S(dqkv + ((long)b * T + i) * stride + (long)h * hd, dq, g, G, hd, scale);
	}
}

// attn_bwd_dkdv_$S: work-group (bk, y) owns key rows [k0, k0+R) (smallest
// k0, the most work, first) of batch bk / KVH, key/value head bk % KVH;
// each group holds k (scaled), v and the dk, dv accumulators and, for each
// query head of the head's group in order, walks the query tiles from k0
// on (earlier queries see none of these keys), with Q and dO staged in
// local memory and lse, D beside them.
inline void attn_bwd_dkdv_$S(__global t_$S *dqkv, __global const float *D, __global const t_$S *dout,
	__global const float *lse, __global const t_$S *qkv, int T, int C, int H, int KVH, int G0,
	__local float *qs, __local float *dos, __local float *ls, __local float *Ds, __local float *part, attn_drop dr) {
	int G = max(G0, 1);
	int HDP = 16 * G, R = attn_rows(G), n = R * G, bc = ATTN_TILE / HDP;
	int hd = C / H, grp = H / KVH;
	int k0 = (int)get_group_id(1) * R;
	int bk = get_group_id(0), b = bk / KVH, kvh = bk % KVH;
	int t = get_local_id(0), g = t % G, r = t / G, j = k0 + r;
	bool valid = G0 != 0 && j < T;
	long stride = (long)C + 2L * KVH * hd;
	__global const t_$S *kbase = qkv + (long)b * T * stride + C + (long)kvh * hd, *vbase = kbase + (long)KVH * hd;
	float scale = attn_scale(hd);

	float k[16], v[16], dk[16], dv[16];
	attn_load_row_$S(k, kbase + (long)j * stride, g, G, hd, valid, scale * ATTN_LOG2E);
	attn_load_row_$S(v, vbase + (long)j * stride, g, G, hd, valid, 1.0f);
#pragma unroll
	for (int x = 0; x < 16; x++) {
		dk[x] = 0.0f;
		dv[x] = 0.0f;
	}
	int half_ = 0;

	int iend = G0 != 0 ? T : 0;
	for (int h = kvh * grp; h < (kvh + 1) * grp; h++) { // the group's query heads, in order
		long bh = (long)b * H + h;
		__global const t_$S *base = qkv + (long)b * T * stride + (long)h * hd;
		__global const t_$S *dbase = dout + (long)b * T * C + (long)h * hd;
		for (int i0 = k0; i0 < iend; i0 += bc) {
			barrier(CLK_LOCAL_MEM_FENCE);
			int ni = min(bc, T - i0);
			attn_load_tile_$S(qs, base + i0 * stride, stride, ni, hd, HDP);
			attn_load_tile_$S(dos, dbase + (long)i0 * C, C, ni, hd, HDP);
			for (int x = t; x < bc; x += n) {
				ls[x] = x < ni ? lse[(long)bh * T + i0 + x] * ATTN_LOG2E : 0.0f;
				Ds[x] = x < ni ? D[(long)bh * T + i0 + x] : 0.0f;
			}
			barrier(CLK_LOCAL_MEM_FENCE);
			for (int x0 = 0; x0 < ni; x0 += ATTN_BKC) { // ni is uniform over the work-group
				__local float *p = part + half_ * (2 * ATTN_BKC * n);
				half_ ^= 1;
#pragma unroll
				for (int xx = 0; xx < ATTN_BKC; xx++) {
					if (x0 + xx < ni) {
						p[(2 * xx) * n + t] = attn_dot(k, qs, x0 + xx, g, G);
						p[(2 * xx + 1) * n + t] = attn_dot(v, dos, x0 + xx, g, G);
					}
				}
				barrier(CLK_LOCAL_MEM_FENCE);
#pragma unroll
				for (int xx = 0; xx < ATTN_BKC; xx++) {
					int x = x0 + xx;
					if (x < ni) {
						float s = attn_gsum(p + (2 * xx) * n, r, G);
						float dp = attn_gsum(p + (2 * xx + 1) * n, r, G);
						float pr = i0 + x >= j ? exp2(s - ls[x]) : 0.0f;
						float f = (dr.on && i0 + x >= j) ? attn_drop_factor(dr, bh, T, i0 + x, j) : 1.0f;
						attn_axpy(dv, dr.on ? pr * f : pr, dos, x, g, G);
						attn_axpy(dk, pr * (dr.on ? dp * f - Ds[x] : dp - Ds[x]), qs, x, g, G);
					}
				}
			}
		}
	}
	if (valid) {
		__global t_$S *row = dqkv + ((long)b * T + j) * stride + C + (long)kvh * hd;
		attn_store_row_$S(row, dk, g, G, hd, scale);
		attn_store_row_$S(row + (long)KVH * hd, dv, g, G, hd, 1.0f);
	}
}

// fleet_attention_bwd_dq_$S: writes the q third of dqkv [B,T,3C] and D
// [B,H,T] (F32 scratch) from dout, out [B,T,C], lse [B,H,T] and qkv. Run
// before fleet_attention_bwd_dkdv_$S, which reads D.
__kernel void fleet_attention_bwd_dq_$S(BUF(t_$S, dqkv), BUF(float, D), BUF(t_$S, dout), BUF(t_$S, out), BUF(float, lse),
	BUF(t_$S, qkv), int B, int T, int C, int H, int KVH, long dropSeed, long dropOffset, int dropSite, uint dropThreshold, float dropScale, BUF(int, seedBase)) {
	AT(int, seedBase);
	AT(t_$S, dqkv);
	AT(float, D);
	AT(t_$S, dout);
	AT(t_$S, out);
	AT(float, lse);
	AT(t_$S, qkv);
	__local float ks[ATTN_TILE];
	__local float vs[ATTN_TILE];
	__local float part[ATTN_PART];
	attn_bwd_dq_$S(dqkv, D, dout, out, lse, qkv, T, C, H, KVH, attn_launch_group(C / H), ks, vs, part, attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_bwd_dkdv_$S: writes the k and v thirds of dqkv from dout,
// lse, D (from fleet_attention_bwd_dq_$S) and qkv.
__kernel void fleet_attention_bwd_dkdv_$S(BUF(t_$S, dqkv), BUF(float, D), BUF(t_$S, dout), BUF(float, lse), BUF(t_$S, qkv),
	int B, int T, int C, int H, int KVH, long dropSeed, long dropOffset, int dropSite, uint dropThreshold, float dropScale, BUF(int, seedBase)) {
	AT(int, seedBase);
	AT(t_$S, dqkv);
	AT(float, D);
	AT(t_$S, dout);
	AT(float, lse);
	AT(t_$S, qkv);
	__local float qs[ATTN_TILE];
	__local float dos[ATTN_TILE];
	__local float ls[ATTN_TILE / 16];
	__local float Ds[ATTN_TILE / 16];
	__local float part[ATTN_PART];
	attn_bwd_dkdv_$S(dqkv, D, dout, lse, qkv, T, C, H, KVH, attn_launch_group(C / H), qs, dos, ls, Ds, part, attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_kv_$S: inference against a key/value cache (AttentionKV):
// out [B,T,C] from qkv [B,T,3C]; the caches kc, vc [B,MaxT,C] get this
// call's k and v rows at positions [Pos, Pos+T), copied element for element
// (bit for bit); with KVH key/value heads, qkv is [B,T,C+2*KVH*C/H], the
// caches [B,MaxT,KVH*C/H], and the warp of each group's first query head
// copies the group's key and value. Each run of 32 work-items (a warp) owns one (b, t, h), h
// fastest, and attends over positions 0..Pos+t; positions >= Pos are read
// from qkv itself rather than the cache, so no warp reads a cache row
// another writes in this launch. Keys go 32 at a time: lane l computes
// the whole score of key s0+l (q staged in local memory, a sum over the
// head in dimension order), the 32 scores are shared through local memory,
// and every lane folds the chunk into the online softmax in key order for
// its dimensions l, l+32, ... Launch: ceil(B*T*H/8) work-groups of 256
// (any multiple of 32 up to 256 works; other shapes write nothing, where
// CUDA would misbehave).
__kernel void fleet_attention_kv_$S(BUF(t_$S, out), BUF(t_$S, qkv), BUF(t_$S, kc), BUF(t_$S, vc), int B, int T, int C, int H,
	int KVH, int Pos, int MaxT) {
	AT(t_$S, out);
	AT(t_$S, qkv);
	AT(t_$S, kc);
	AT(t_$S, vc);
	__local float qsh[8 * ATTN_HDMAX];
	__local float ssh[2 * 8 * 32];
	int nl = get_local_size(0);
	// Work-groups of other shapes than whole warps, at most 8, and heads
	// over ATTN_HDMAX (which attention.go refuses) do nothing, without an
	// early return: one before a barrier miscompiles on PoCL 3.1.
	bool ok = nl <= 256 && nl % 32 == 0 && get_local_size(1) == 1 && get_local_size(2) == 1 && C / H <= ATTN_HDMAX;
	int nw = nl / 32;
	int lt = get_local_id(0), lane = lt % 32, wl = lt / 32;
	long nwarps = ok ? (long)B * T * H : 0;
	long w0 = (long)get_group_id(0) * nw, w = w0 + wl;
	bool valid = w < nwarps;
	int hd = C / H, grp = H / KVH;
	long stride = (long)C + 2L * KVH * hd, KC = (long)KVH * hd; // a row of qkv, of a cache
	// The most keys any warp of the work-group visits: every work-item
	// loops that often, so all meet the same barriers.
	int nmax = 0;
	for (int k = 0; k < nw; k++) {
		if (w0 + k < nwarps) {
			int tk = (int)(((w0 + k) / H) % T);
			nmax = max(nmax, Pos + tk + 1);
		}
	}
	long wv = valid ? w : 0; // an idle warp computes on warp 0's indices (and writes nothing)
	int h = (int)(wv % H), t = (int)((wv / H) % T), b = (int)(wv / ((long)H * T)), kvh = h / grp;
	int nkeys = valid ? Pos + t + 1 : 0;
	__global const t_$S *row = qkv + ((long)b * T + t) * stride + (long)h * hd;
	__local float *qw = qsh + wl * ATTN_HDMAX;
	float sc = attn_scale(hd) * ATTN_LOG2E;
	if (valid) {
		__global const t_$S *krow = qkv + ((long)b * T + t) * stride + C + (long)kvh * hd;
		long crow = ((long)b * MaxT + Pos + t) * KC + (long)kvh * hd;
		for (int d = lane; d < hd; d += 32) {
			if (h % grp == 0) {
				kc[crow + d] = krow[d];
				vc[crow + d] = krow[KC + d];
			}
			qw[d] = ld_$S(row, d) * sc;
		}
	}
	barrier(CLK_LOCAL_MEM_FENCE);

	float o[ATTN_HDMAX / 32];
#pragma unroll
	for (int c = 0; c < ATTN_HDMAX / 32; c++) {
		o[c] = 0.0f;
	}
	float m = FLEET_NEG_INF, l = 0.0f;
	int half_ = 0;
	for (int s0 = 0; s0 < nmax; s0 += 32) {
		__local float *sw = ssh + half_ * (8 * 32) + wl * 32;
		half_ ^= 1;
		int s = s0 + lane;
		if (s < nkeys) {
			__global const t_$S *kr;
			if (s < Pos) {
				kr = kc + ((long)b * MaxT + s) * KC + (long)kvh * hd;
			} else {
				kr = qkv + ((long)b * T + (s - Pos)) * stride + C + (long)kvh * hd;
			}
			float dot = 0.0f;
			for (int d = 0; d < hd; d++) {
				dot += qw[d] * ld_$S(kr, d);
			}
			sw[lane] = dot;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		int cn = min(32, nkeys - s0); // keys of this chunk for this warp (none when <= 0)
		if (cn > 0) {
			float mt = FLEET_NEG_INF;
			for (int jj = 0; jj < cn; jj++) {
				mt = fmax(mt, sw[jj]);
			}
			// Key 0 is in the first chunk: mn is finite from then on.
			float mn = fmax(m, mt);
			float a = exp2(m - mn);
			l *= a;
#pragma unroll
			for (int c = 0; c < ATTN_HDMAX / 32; c++) {
				o[c] *= a;
			}
			for (int jj = 0; jj < cn; jj++) {
				int sj = s0 + jj;
				__global const t_$S *vr;
				if (sj < Pos) {
					vr = vc + ((long)b * MaxT + sj) * KC + (long)kvh * hd;
				} else {
					vr = qkv + ((long)b * T + (sj - Pos)) * stride + C + KC + (long)kvh * hd;
				}
				float pr = exp2(sw[jj] - mn);
				l += pr;
#pragma unroll
				for (int c = 0; c < ATTN_HDMAX / 32; c++) {
					int d = lane + 32 * c;
					if (d < hd) {
						o[c] += pr * ld_$S(vr, d);
					}
				}
			}
			m = mn;
		}
	}
	if (valid) {
		__global t_$S *orow = out + ((long)b * T + t) * C + (long)h * hd;
		float inv = 1.0f / l;
#pragma unroll
		for (int c = 0; c < ATTN_HDMAX / 32; c++) {
			int d = lane + 32 * c;
			if (d < hd) {
				st_$S(orow, d, o[c] * inv);
			}
		}
	}
}
//@end

// Fused causal self-attention (FlashAttention style) over a packed
// qkv [B, T, 3C]: q, k and v are each C wide, and head h is the contiguous
// slice [h*hd, (h+1)*hd) of each, hd = C/H <= 128. With KVH < H key/value
// heads (grouped-query attention; KVH = H is the plain case) the rows are
// C + 2*KVH*hd wide, the keys' KVH*hd columns after the queries' C, then
// the values', and query head h reads key/value head h/(H/KVH) where it
// lies: nothing is repeated in memory. Scores are
// q·k / sqrt(hd), masked so position i sees keys 0..i. The T×T matrix never
// reaches global memory: the forward pass keeps a running maximum and sum
// per query row (online softmax) and saves only each row's log-sum-exp,
// lse [B, H, T] (natural log); the backward pass recomputes the
// probabilities from it. Storage is F32 or BF16 (qkv, out, dout, dqkv);
// lse, the backward scratch and all arithmetic are F32.
//
// Thread layout shared by the tiled kernels: a group of G consecutive
// threads owns one row (a query, or a key in the dk/dv kernel). Thread g of
// the group owns the head dimensions d = 4*(c*G + g) + e for c < NC = 4,
// e < 4, i.e. every G-th run of four: 16 dimensions per thread, HDP =
// 16*G >= hd. G is the smallest of 1, 2, 4, 8 with 16*G >= hd, picked at
// run time (ATTN_DISPATCH below; the Go launcher uses the same rule). A dot
// product over the head is 16 multiply-adds per thread and log2(G)
// xor-shuffles inside the group; every thread of the group then holds the
// whole value (a butterfly of commutative adds gives identical bits on
// every lane), so the softmax bookkeeping is done redundantly and
// identically by all G. Per-thread state stays in registers for any
// hd <= 128; small heads need no shuffles at all.
//
// Scores are kept in base 2: q (or k) is pre-multiplied by
// log2(e)/sqrt(hd) and exp2f is used throughout; lse is stored in natural
// log units, as the CPU backend saves it.
//
// Launch shape of the tiled kernels: a block covers R = 64 rows (32 when
// G = 8) with R*G threads (64, 128, 256 or 256), and stages ATTN_BC = 32
// rows of the other side per shared-memory tile: two tiles of 32×HDP
// floats, 32 KiB of static shared memory at most, so no opt-in above
// 48 KiB is needed and several blocks fit per SM. Grid (B*H, ceil(T/R)).

#define ATTN_BC 32
#define ATTN_KC 8 // keys per online-softmax update in the forward pass
#define ATTN_HDMAX 128
#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.69314718055994531f
#define ATTN_NEG_INF (__uint_as_float(0xff800000u))

__device__ __forceinline__ int attn_imin(int a, int b) { return a < b ? a : b; }

// Storage loads and stores: F32 as is, BF16 as unsigned short bits.
__device__ __forceinline__ float attn_ld(const float *p) { return *p; }
__device__ __forceinline__ float attn_ld(const unsigned short *p) { return fleet_bf16_to_f32(*p); }
__device__ __forceinline__ void attn_st(float *p, float v) { *p = v; }
__device__ __forceinline__ void attn_st(unsigned short *p, float v) { *p = fleet_f32_to_bf16(v); }

// attn_scale is 1/sqrt(hd), the score scale.
__device__ __forceinline__ float attn_scale(int hd) { return 1.0f / sqrtf((float)hd); }

// attn_rows is the number of rows a tiled block covers with G threads per
// row: 64, or 32 when G is 8, so a block has 64 to 256 threads.
template <int G>
__device__ __forceinline__ int attn_rows() { return G == 8 ? 32 : 64; }

// attn_check_block traps unless the block is the 1-D shape the kernels
// assume for G threads per row.
template <int G>
__device__ __forceinline__ void attn_check_block() {
	if (blockDim.x != attn_rows<G>() * G || blockDim.y != 1 || blockDim.z != 1) {
		__trap();
	}
}

// attn_group_sum returns the sum of v over the G consecutive lanes of a
// row group (G divides 32; every lane of the warp must call it).
template <int G>
__device__ __forceinline__ float attn_group_sum(float v) {
#pragma unroll
	for (int o = G / 2; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

// attn_load_tile stages rows [0, nvalid) of a head slice into dst
// [ATTN_BC][HDP] as F32, row r read from src + r*stride; columns >= hd and
// rows >= nvalid are zero so they add nothing (and no stale NaN) to the
// dot products. Consecutive threads take consecutive elements, so the
// global reads of each row are coalesced and the shared writes conflict-free.
template <int HDP, typename S>
__device__ __forceinline__ void attn_load_tile(float *dst, const S *src, long long stride, int nvalid, int hd) {
	for (int e = threadIdx.x; e < ATTN_BC * HDP; e += blockDim.x) {
		int r = e / HDP, c = e % HDP;
		float v = 0.0f;
		if (r < nvalid && c < hd) {
			v = attn_ld(src + r * stride + c);
		}
		dst[e] = v;
	}
}

// attn_load_row reads this thread's dimensions of one row into x, times
// mul; dimensions >= hd (and every dimension when !valid) are zero.
template <int G, int NC, typename S>
__device__ __forceinline__ void attn_load_row(float *x, const S *row, int g, int hd, bool valid, float mul) {
#pragma unroll
	for (int c = 0; c < NC; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int d = 4 * (c * G + g) + e;
			x[4 * c + e] = (valid && d < hd) ? attn_ld(row + d) * mul : 0.0f;
		}
	}
}

// attn_store_row writes this thread's dimensions (those < hd) of one row, times mul.
template <int G, int NC, typename S>
__device__ __forceinline__ void attn_store_row(S *row, const float *x, int g, int hd, float mul) {
#pragma unroll
	for (int c = 0; c < NC; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int d = 4 * (c * G + g) + e;
			if (d < hd) {
				attn_st(row + d, x[4 * c + e] * mul);
			}
		}
	}
}

// attn_dot is this thread's share of x · tile[j] (tile row stride HDP).
template <int G, int NC, int HDP>
__device__ __forceinline__ float attn_dot(const float *x, const float *tile, int j, int g) {
	float acc = 0.0f;
#pragma unroll
	for (int c = 0; c < NC; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			acc += x[4 * c + e] * tile[j * HDP + 4 * (c * G + g) + e];
		}
	}
	return acc;
}

// attn_axpy adds a * tile[j] to this thread's dimensions of acc.
template <int G, int NC, int HDP>
__device__ __forceinline__ void attn_axpy(float *acc, float a, const float *tile, int j, int g) {
#pragma unroll
	for (int c = 0; c < NC; c++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			acc[4 * c + e] += a * tile[j * HDP + 4 * (c * G + g) + e];
		}
	}
}

// ---------------------------------------------------------------------------
// Forward.
//
// Block (bh, y) handles batch b = bh / H, head h = bh % H and the query rows
// [q0, q0+R), R = attn_rows<G>(); blocks are numbered so the last query
// block (the one with the most keys to visit) starts first. Each thread
// group keeps its query (scaled) and output accumulator in registers and
// walks the key tiles [k0, k0+ATTN_BC) for k0 < min(T, q0+R): tiles wholly
// above the diagonal are never visited, and only diagonal tiles mask.
// For each chunk of ATTN_KC keys the running max m, sum l and output o
// are rescaled by exp2(m - m') and the chunk's probabilities added.
// Finally out = o/l and lse = (m + log2 l)·ln 2.
//
// Memory traffic: each block reads its R query rows once and every key and
// value row up to its diagonal once (so K and V are read about T/(2R) times
// per head, mostly from L2); writes out once and lse once.
template <int G, int NC, typename S>
__device__ void attn_fwd(S *__restrict__ out, float *__restrict__ lse, const S *__restrict__ qkv, int B, int T, int C, int H, int KVH,
			 float *ks, float *vs, fleet_attn_drop dr) {
	const int HDP = 4 * G * NC;
	const int R = attn_rows<G>();
	int hd = C / H;
	int nqb = (T + R - 1) / R;
	int q0 = (nqb - 1 - (int)blockIdx.y) * R;
	int bh = blockIdx.x, b = bh / H, h = bh % H, kvh = h / (H / KVH);
	int g = threadIdx.x % G, i = q0 + (int)threadIdx.x / G;
	bool valid = i < T;
	long long stride = (long long)C + 2LL * KVH * hd;
	const S *base = qkv + (long long)b * T * stride + (long long)h * hd;
	const S *kbase = qkv + (long long)b * T * stride + C + (long long)kvh * hd, *vbase = kbase + (long long)KVH * hd;

	float q[4 * NC], o[4 * NC];
	attn_load_row<G, NC>(q, base + (long long)i * stride, g, hd, valid, attn_scale(hd) * ATTN_LOG2E);
#pragma unroll
	for (int x = 0; x < 4 * NC; x++) {
		o[x] = 0.0f;
	}
	float m = ATTN_NEG_INF, l = 0.0f;

	int kend = attn_imin(T, q0 + R);
	for (int k0 = 0; k0 < kend; k0 += ATTN_BC) {
		__syncthreads(); // the previous tile is no longer read
		int nk = attn_imin(ATTN_BC, T - k0);
		attn_load_tile<HDP>(ks, kbase + k0 * stride, stride, nk, hd);
		attn_load_tile<HDP>(vs, vbase + k0 * stride, stride, nk, hd);
		__syncthreads();

		// Keys from kend on are masked for every row of the block (and
		// zero padding past T): skip them. jn is uniform over the block,
		// so the shuffles stay convergent. The tile is taken ATTN_KC keys
		// at a time, each chunk one online-softmax update.
		int jn = attn_imin(ATTN_BC, kend - k0);
#pragma unroll 1
		for (int j0 = 0; j0 < jn; j0 += ATTN_KC) {
			float s[ATTN_KC];
			float mt = ATTN_NEG_INF;
#pragma unroll
			for (int jj = 0; jj < ATTN_KC; jj++) {
				int j = j0 + jj;
				s[jj] = ATTN_NEG_INF;
				if (j < jn) {
					float v = attn_group_sum<G>(attn_dot<G, NC, HDP>(q, ks, j, g));
					s[jj] = (k0 + j <= i) ? v : ATTN_NEG_INF;
				}
				mt = fmaxf(mt, s[jj]);
			}
			// Key 0 is in the first chunk and visible to every row, so
			// mn is finite from the first chunk on and the exponents
			// below never see -inf - -inf.
			float mn = fmaxf(m, mt);
			float a = exp2f(m - mn);
			l *= a;
#pragma unroll
			for (int x = 0; x < 4 * NC; x++) {
				o[x] *= a;
			}
#pragma unroll
			for (int jj = 0; jj < ATTN_KC; jj++) {
				int j = j0 + jj;
				if (j < jn) {
					float p = exp2f(s[jj] - mn);
					l += p;
					if (dr.on && k0 + j <= i) { // the probability dropped for the product with V
						p *= dr.factor(bh, T, i, k0 + j);
					}
					attn_axpy<G, NC, HDP>(o, p, vs, j, g);
				}
			}
			m = mn;
		}
	}
	if (valid) {
		attn_store_row<G, NC>(out + ((long long)b * T + i) * C + (long long)h * hd, o, g, hd, 1.0f / l);
		if (g == 0) {
			lse[(long long)bh * T + i] = (m + log2f(l)) * ATTN_LN2;
		}
	}
}

// Dispatch on hd: G = 1, 2, 4 or 8 threads per row for hd up to 16, 32, 64
// or 128, each holding NC = 4 runs of four dimensions. Larger hd is not
// supported (the launcher refuses it; the kernel traps). The block must have
// attn_rows<G>()*G threads; anything else traps rather than compute
// garbage.
#define ATTN_DISPATCH(FN, S, ...)                                   \
	do {                                                        \
		int hd_ = C / H;                                    \
		if (hd_ <= 16) {                                    \
			attn_check_block<1>();                      \
			FN<1, 4, S>(__VA_ARGS__);                   \
		} else if (hd_ <= 32) {                             \
			attn_check_block<2>();                      \
			FN<2, 4, S>(__VA_ARGS__);                   \
		} else if (hd_ <= 64) {                             \
			attn_check_block<4>();                      \
			FN<4, 4, S>(__VA_ARGS__);                   \
		} else if (hd_ <= ATTN_HDMAX) {                     \
			attn_check_block<8>();                      \
			FN<8, 4, S>(__VA_ARGS__);                   \
		} else {                                            \
			__trap();                                   \
		}                                                   \
	} while (0)

// fleet_attention_fwd_f32: out [B,T,C], lse [B,H,T] from qkv [B,T,3C], all F32.
// Launch: grid (B*H, ceil(T/R)), block R*G (see the top of the file); no
// dynamic shared memory.
extern "C" __global__ void fleet_attention_fwd_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
						   int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float ks[ATTN_BC * ATTN_HDMAX];
	__shared__ float vs[ATTN_BC * ATTN_HDMAX];
	ATTN_DISPATCH(attn_fwd, float, out, lse, qkv, B, T, C, H, KVH, ks, vs, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_fwd_bf16: as fleet_attention_fwd_f32 with qkv and out
// stored as BF16 (out rounded to nearest even); lse and all math F32.
extern "C" __global__ void fleet_attention_fwd_bf16(unsigned short *__restrict__ out, float *__restrict__ lse,
						    const unsigned short *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float ks[ATTN_BC * ATTN_HDMAX];
	__shared__ float vs[ATTN_BC * ATTN_HDMAX];
	ATTN_DISPATCH(attn_fwd, unsigned short, out, lse, qkv, B, T, C, H, KVH, ks, vs, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// ---------------------------------------------------------------------------
// Backward.
//
// With P = softmax(scale·QKᵀ) (masked) recomputed as exp(scale·q·k − lse):
//   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ⊙ (dP − D),  D_i = Σ_d dO_i·O_i,
//   dQ = scale·dS K,  dK = scale·dSᵀ Q.
// Every output element is a sum owned by exactly one thread, accumulated
// in a fixed order, so the result is bit-for-bit repeatable without float
// atomics (DESIGN decision 12). The price is computing P twice: once in a
// kernel parallel over query tiles that sums dQ over keys, once in a kernel
// parallel over key tiles that sums dK and dV over queries. FlashAttention-2
// instead adds dQ with atomics from the key-parallel kernel, which is
// faster but not repeatable.
//
// The launch order is dq then dkdv: the dq kernel already holds dO_i in
// registers, so it also computes D_i (reading O once) and writes it to the
// scratch buffer D [B,H,T] the dkdv kernel reads; no separate preprocessing
// pass over dO is needed.

// attn_bwd_dq: block (bh, y) owns query rows [q0, q0+R) (largest q0
// first); each group holds q (scaled), dO and its dq accumulator in
// registers and walks the key tiles up to its diagonal, K and V staged in
// shared memory. Traffic: reads q, dO, O and lse for its rows once and the
// K, V rows up to the diagonal once; writes dq and D once.
template <int G, int NC, typename S>
__device__ void attn_bwd_dq(S *__restrict__ dqkv, float *__restrict__ D, const S *__restrict__ dout, const S *__restrict__ out,
			    const float *__restrict__ lse, const S *__restrict__ qkv, int B, int T, int C, int H, int KVH, float *ks,
			    float *vs, fleet_attn_drop dr) {
	const int HDP = 4 * G * NC;
	const int R = attn_rows<G>();
	int hd = C / H;
	int nqb = (T + R - 1) / R;
	int q0 = (nqb - 1 - (int)blockIdx.y) * R;
	int bh = blockIdx.x, b = bh / H, h = bh % H, kvh = h / (H / KVH);
	int g = threadIdx.x % G, i = q0 + (int)threadIdx.x / G;
	bool valid = i < T;
	long long stride = (long long)C + 2LL * KVH * hd;
	const S *base = qkv + (long long)b * T * stride + (long long)h * hd;
	const S *kbase = qkv + (long long)b * T * stride + C + (long long)kvh * hd, *vbase = kbase + (long long)KVH * hd;
	long long orow = ((long long)b * T + i) * C + (long long)h * hd; // row i of out, dout (only read when valid)
	float scale = attn_scale(hd);

	float q[4 * NC], dO[4 * NC], dq[4 * NC];
	attn_load_row<G, NC>(q, base + (long long)i * stride, g, hd, valid, scale * ATTN_LOG2E);
	attn_load_row<G, NC>(dO, dout + orow, g, hd, valid, 1.0f);
	// D_i = dO_i · O_i; dq temporarily holds O_i.
	attn_load_row<G, NC>(dq, out + orow, g, hd, valid, 1.0f);
	float Di = 0.0f;
#pragma unroll
	for (int x = 0; x < 4 * NC; x++) {
		Di += dO[x] * dq[x];
		dq[x] = 0.0f;
	}
	Di = attn_group_sum<G>(Di);
	float lse2 = valid ? lse[(long long)bh * T + i] * ATTN_LOG2E : 0.0f;
	if (valid && g == 0) {
		D[(long long)bh * T + i] = Di;
	}

	int kend = attn_imin(T, q0 + R);
	for (int k0 = 0; k0 < kend; k0 += ATTN_BC) {
		__syncthreads();
		int nk = attn_imin(ATTN_BC, T - k0);
		attn_load_tile<HDP>(ks, kbase + k0 * stride, stride, nk, hd);
		attn_load_tile<HDP>(vs, vbase + k0 * stride, stride, nk, hd);
		__syncthreads();
		int jn = attn_imin(ATTN_BC, kend - k0); // keys past kend: masked for the whole block
#pragma unroll 4
		for (int j = 0; j < jn; j++) {
			float s = attn_group_sum<G>(attn_dot<G, NC, HDP>(q, ks, j, g));
			float dp = attn_group_sum<G>(attn_dot<G, NC, HDP>(dO, vs, j, g));
			float p = (k0 + j <= i) ? exp2f(s - lse2) : 0.0f;
			if (dr.on && k0 + j <= i) { // dS = P ⊙ (F ⊙ dO·Vᵀ − D)
				dp *= dr.factor(bh, T, i, k0 + j);
			}
			attn_axpy<G, NC, HDP>(dq, p * (dp - Di), ks, j, g);
		}
	}
	if (valid) {
		attn_store_row<G, NC>(dqkv + ((long long)b * T + i) * stride + (long long)h * hd, dq, g, hd, scale);
	}
}

// attn_bwd_dkdv: block (bk, y) owns key rows [k0, k0+R) (smallest k0, the
// most work, first) of batch b = bk / KVH, key/value head bk % KVH; each
// group holds k (scaled), v and the dk, dv accumulators in registers and,
// for each query head of the head's group in order, walks the query tiles
// [i0, i0+ATTN_BC) for i0 = k0, k0+ATTN_BC, ... < T (queries before k0 see
// none of these keys), with Q and dO staged in shared memory and lse, D
// beside them: dK and dV are summed over the group in a fixed order, no
// atomics. Traffic: reads its k, v rows once and, per query head of the
// group, the q, dO, lse and D rows from its first key on once; writes dk
// and dv once.
template <int G, int NC, typename S>
__device__ void attn_bwd_dkdv(S *__restrict__ dqkv, const float *__restrict__ D, const S *__restrict__ dout,
			      const float *__restrict__ lse, const S *__restrict__ qkv, int B, int T, int C, int H, int KVH, float *qs,
			      float *dos, float *ls, float *Ds, fleet_attn_drop dr) {
	const int HDP = 4 * G * NC;
	const int R = attn_rows<G>();
	int hd = C / H, grp = H / KVH;
	int k0 = (int)blockIdx.y * R;
	int bk = blockIdx.x, b = bk / KVH, kvh = bk % KVH;
	int g = threadIdx.x % G, j = k0 + (int)threadIdx.x / G;
	bool valid = j < T;
	long long stride = (long long)C + 2LL * KVH * hd;
	const S *kbase = qkv + (long long)b * T * stride + C + (long long)kvh * hd, *vbase = kbase + (long long)KVH * hd;
	float scale = attn_scale(hd);

	float k[4 * NC], v[4 * NC], dk[4 * NC], dv[4 * NC];
	attn_load_row<G, NC>(k, kbase + (long long)j * stride, g, hd, valid, scale * ATTN_LOG2E);
	attn_load_row<G, NC>(v, vbase + (long long)j * stride, g, hd, valid, 1.0f);
#pragma unroll
	for (int x = 0; x < 4 * NC; x++) {
		dk[x] = 0.0f;
		dv[x] = 0.0f;
	}

	for (int h = kvh * grp; h < (kvh + 1) * grp; h++) { // the group's query heads, in order
		long long bh = (long long)b * H + h;
		const S *base = qkv + (long long)b * T * stride + (long long)h * hd;
		const S *dbase = dout + (long long)b * T * C + (long long)h * hd;
		for (int i0 = k0; i0 < T; i0 += ATTN_BC) {
			__syncthreads();
			int ni = attn_imin(ATTN_BC, T - i0);
			attn_load_tile<HDP>(qs, base + i0 * stride, stride, ni, hd);
			attn_load_tile<HDP>(dos, dbase + (long long)i0 * C, C, ni, hd);
			for (int r = threadIdx.x; r < ATTN_BC; r += blockDim.x) {
				ls[r] = r < ni ? lse[(long long)bh * T + i0 + r] * ATTN_LOG2E : 0.0f;
				Ds[r] = r < ni ? D[(long long)bh * T + i0 + r] : 0.0f;
			}
			__syncthreads();
			// Not unrolled: k, v, dk and dv already hold 64 registers, and
			// unrolling pushes the kernel past 128 (one block per SM).
#pragma unroll 1
			for (int x = 0; x < ni; x++) { // queries past T: none (ni is uniform over the block)
				int i = i0 + x;
				float s = attn_group_sum<G>(attn_dot<G, NC, HDP>(k, qs, x, g));
				float dp = attn_group_sum<G>(attn_dot<G, NC, HDP>(v, dos, x, g));
				float p = i >= j ? exp2f(s - ls[x]) : 0.0f;
				float f = (dr.on && i >= j) ? dr.factor(bh, T, i, j) : 1.0f;
				attn_axpy<G, NC, HDP>(dv, dr.on ? p * f : p, dos, x, g);
				attn_axpy<G, NC, HDP>(dk, p * (dr.on ? dp * f - Ds[x] : dp - Ds[x]), qs, x, g);
			}
		}
	}
	if (valid) {
		S *row = dqkv + ((long long)b * T + j) * stride + C + (long long)kvh * hd;
		attn_store_row<G, NC>(row, dk, g, hd, scale);
		attn_store_row<G, NC>(row + (long long)KVH * hd, dv, g, hd, 1.0f);
	}
}

// fleet_attention_bwd_dq_f32: writes the q third of dqkv [B,T,3C] and
// D [B,H,T] (F32 scratch) from dout, out [B,T,C], lse [B,H,T] and qkv.
// Launch: grid (B*H, ceil(T/R)), block R*G. Run before
// fleet_attention_bwd_dkdv_f32, which reads D.
extern "C" __global__ void fleet_attention_bwd_dq_f32(float *__restrict__ dqkv, float *__restrict__ D, const float *__restrict__ dout,
						      const float *__restrict__ out, const float *__restrict__ lse,
						      const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float ks[ATTN_BC * ATTN_HDMAX];
	__shared__ float vs[ATTN_BC * ATTN_HDMAX];
	ATTN_DISPATCH(attn_bwd_dq, float, dqkv, D, dout, out, lse, qkv, B, T, C, H, KVH, ks, vs, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_bwd_dkdv_f32: writes the k and v thirds of dqkv from
// dout, lse, D (from fleet_attention_bwd_dq_f32) and qkv.
// Launch: grid (B*KVH, ceil(T/R)), block R*G.
extern "C" __global__ void fleet_attention_bwd_dkdv_f32(float *__restrict__ dqkv, const float *__restrict__ D,
							const float *__restrict__ dout, const float *__restrict__ lse,
							const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float qs[ATTN_BC * ATTN_HDMAX];
	__shared__ float dos[ATTN_BC * ATTN_HDMAX];
	__shared__ float ls[ATTN_BC];
	__shared__ float Ds[ATTN_BC];
	ATTN_DISPATCH(attn_bwd_dkdv, float, dqkv, D, dout, lse, qkv, B, T, C, H, KVH, qs, dos, ls, Ds, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_bwd_dq_bf16: fleet_attention_bwd_dq_f32 with dqkv, dout,
// out and qkv stored as BF16; lse and D F32.
extern "C" __global__ void fleet_attention_bwd_dq_bf16(unsigned short *__restrict__ dqkv, float *__restrict__ D,
						       const unsigned short *__restrict__ dout, const unsigned short *__restrict__ out,
						       const float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B,
						       int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float ks[ATTN_BC * ATTN_HDMAX];
	__shared__ float vs[ATTN_BC * ATTN_HDMAX];
	ATTN_DISPATCH(attn_bwd_dq, unsigned short, dqkv, D, dout, out, lse, qkv, B, T, C, H, KVH, ks, vs, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// fleet_attention_bwd_dkdv_bf16: fleet_attention_bwd_dkdv_f32 with dqkv,
// dout and qkv stored as BF16; lse and D F32.
extern "C" __global__ void fleet_attention_bwd_dkdv_bf16(unsigned short *__restrict__ dqkv, const float *__restrict__ D,
							 const unsigned short *__restrict__ dout, const float *__restrict__ lse,
							 const unsigned short *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	__shared__ float qs[ATTN_BC * ATTN_HDMAX];
	__shared__ float dos[ATTN_BC * ATTN_HDMAX];
	__shared__ float ls[ATTN_BC];
	__shared__ float Ds[ATTN_BC];
	ATTN_DISPATCH(attn_bwd_dkdv, unsigned short, dqkv, D, dout, lse, qkv, B, T, C, H, KVH, qs, dos, ls, Ds, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
}

// ---------------------------------------------------------------------------
// Inference against a key/value cache.
//
// One warp per (b, t, h), warps numbered with h fastest. The warp of the
// first query head of each key/value head's group copies this call's k
// and v row slice for position Pos+t into kc and vc [B, MaxT, KVH*hd]
// (C wide for KVH = H), then every warp attends over positions 0..Pos+t
// one key at a time (lane l owns dimensions l, l+32, ...; a warp sum per
// key; online softmax). Positions >= Pos are read from qkv itself rather than from the
// cache, so no warp reads a cache row another warp of this launch writes:
// one launch, no ordering between blocks needed. Traffic: each warp reads
// its q row and Pos+t+1 key and value rows; writes one out row and one
// k and v cache row. Launch: grid ceil(B*T*H/8), block 256.
template <typename S>
__device__ void attn_kv(S *__restrict__ out, const S *__restrict__ qkv, S *__restrict__ kc, S *__restrict__ vc, int B, int T, int C,
			int H, int KVH, int Pos, int MaxT) {
	long long w = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
	int lane = threadIdx.x % 32;
	if (w >= (long long)B * T * H) {
		return; // whole warps leave together: B*T*H warps exactly are live
	}
	int h = (int)(w % H), t = (int)((w / H) % T), b = (int)(w / ((long long)H * T));
	int hd = C / H, grp = H / KVH, kvh = h / grp;
	long long stride = (long long)C + 2LL * KVH * hd, KC = (long long)KVH * hd; // a row of qkv, of a cache
	const S *row = qkv + ((long long)b * T + t) * stride + (long long)h * hd;
	const S *krow = qkv + ((long long)b * T + t) * stride + C + (long long)kvh * hd;
	long long crow = ((long long)b * MaxT + Pos + t) * KC + (long long)kvh * hd;
	if (h % grp == 0) {
		for (int d = lane; d < hd; d += 32) {
			kc[crow + d] = krow[d];
			vc[crow + d] = krow[KC + d];
		}
	}

	const int NQ = ATTN_HDMAX / 32;
	float q[NQ], o[NQ];
	float sc = attn_scale(hd) * ATTN_LOG2E;
#pragma unroll
	for (int c = 0; c < NQ; c++) {
		int d = lane + 32 * c;
		q[c] = d < hd ? attn_ld(row + d) * sc : 0.0f;
		o[c] = 0.0f;
	}
	float m = ATTN_NEG_INF, l = 0.0f;
	for (int s = 0; s <= Pos + t; s++) {
		const S *kr, *vr;
		if (s < Pos) {
			kr = kc + ((long long)b * MaxT + s) * KC + (long long)kvh * hd;
			vr = vc + ((long long)b * MaxT + s) * KC + (long long)kvh * hd;
		} else {
			kr = qkv + ((long long)b * T + (s - Pos)) * stride + C + (long long)kvh * hd;
			vr = kr + KC;
		}
		float dot = 0.0f;
#pragma unroll
		for (int c = 0; c < NQ; c++) {
			int d = lane + 32 * c;
			if (d < hd) {
				dot += q[c] * attn_ld(kr + d);
			}
		}
		dot = fleet_warp_sum(dot);
		float mn = fmaxf(m, dot);
		float a = exp2f(m - mn), p = exp2f(dot - mn);
		l = l * a + p;
#pragma unroll
		for (int c = 0; c < NQ; c++) {
			int d = lane + 32 * c;
			o[c] = o[c] * a + (d < hd ? p * attn_ld(vr + d) : 0.0f);
		}
		m = mn;
	}
	S *orow = out + ((long long)b * T + t) * C + (long long)h * hd;
	float inv = 1.0f / l;
#pragma unroll
	for (int c = 0; c < NQ; c++) {
		int d = lane + 32 * c;
		if (d < hd) {
			attn_st(orow + d, o[c] * inv);
		}
	}
}

// fleet_attention_kv_f32: AttentionKV with everything F32: out [B,T,C] from
// qkv [B,T,3C], caches kc, vc [B,MaxT,C] updated at [Pos, Pos+T) (with
// KVH key/value heads, qkv [B,T,C+2*KVH*C/H] and caches [B,MaxT,KVH*C/H]).
extern "C" __global__ void fleet_attention_kv_f32(float *__restrict__ out, const float *__restrict__ qkv, float *__restrict__ kc,
						  float *__restrict__ vc, int B, int T, int C, int H, int KVH, int Pos, int MaxT) {
	attn_kv<float>(out, qkv, kc, vc, B, T, C, H, KVH, Pos, MaxT);
}

// fleet_attention_kv_bf16: fleet_attention_kv_f32 with out, qkv and the
// caches stored as BF16 (cache rows are copied bit for bit).
extern "C" __global__ void fleet_attention_kv_bf16(unsigned short *__restrict__ out, const unsigned short *__restrict__ qkv,
						   unsigned short *__restrict__ kc, unsigned short *__restrict__ vc, int B, int T,
						   int C, int H, int KVH, int Pos, int MaxT) {
	attn_kv<unsigned short>(out, qkv, kc, vc, B, T, C, H, KVH, Pos, MaxT);
}

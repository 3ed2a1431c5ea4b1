// Causal self-attention on tensor cores (FlashAttention-2 style): the same
// operation, layout and saved log-sum-exp as attention.cu's kernels (qkv
// [B, T, 3C], or [B, T, C + 2*KVH*hd] with KVH key/value heads, query
// head h reading key/value head h/(H/KVH) where it lies; out and dout
// [B, T, C], lse [B, H, T] in natural log units, F32), with every product on mma.sync m16n8k16 (bf16 operands, f32
// accumulation). Storage is bf16 (the _bf16 kernels) or F32 (the _f32
// kernels: autocast's bf16 products on F32 activations, which round q, k,
// v and dout to bf16 as they load them and write f32 results; the
// mma<HDP>f16_f32 kernels do the same with f16 operands, for fp16's
// autocast, on mma.sync's f16 form). Softmax, the log-sum-exp, the
// row sums D_i = dO_i·O_i and every accumulator are f32; the probabilities
// and dS are rounded to bf16 only as operands of the next product, as
// FlashAttention-2 does.
//
// Tile shapes. The head is padded to HDP, the smallest of 32, 64 and 128
// that holds hd (columns past hd are zero in shared memory, so they add
// nothing); each HDP is its own instantiation, so a small head pays for
// no large one. A block is FA_WARPS = 4 warps and owns 64 rows (queries in
// the forward pass, keys in the backward pass), 16 per warp; it streams
// the other side through shared memory BC rows at a time: BC = 64, or 32
// (forward) and 16 (backward) for HDP = 128, so that every tile fits the
// 48 KiB of static shared memory. Rows of shared memory are HDP + 8
// halves long, so the eight row addresses of an ldmatrix fall in distinct
// banks.
//
// Loads are 16-byte cp.async copies of bf16 (two 16-byte loads of F32,
// rounded) where the head slices are 16-byte aligned (hd and C multiples
// of 8, an aligned base); otherwise, and for rows past T and columns past
// hd, element by element (zeros for the padding).
// Each K tile and V tile is its own cp.async group, so the forward pass
// computes the scores while V is still landing.
//
// Fragment layouts are mma.cuh's. Scores are kept in base 2 (scaled by
// log2(e)/sqrt(hd), exp2f throughout), as in attention.cu.
//
// Forward, fleet_attention_fwd_mma<HDP>_<t>: o_i = Σ_j P_ij·v_j with
// P_ij = exp(s_ij - lse_i), s_ij = q_i·k_j/sqrt(hd) for j <= i, by the
// online softmax over key tiles. Per pair 4·HDP FLOPs on tensor cores
// (Q·Kᵀ and P·V). Traffic: q, o and lse of the block's rows once, k and v
// of the keys up to its last row once per query block (from L2 after the
// first). Launch: grid (B·H, ceil(T/64)), the last query block first.
//
// Backward, FlashAttention-2's: S and dP computed once per pair, in three
// launches.
//   - fleet_attention_bwd_pre_<t>: D_i = dO_i·O_i into scratch (B·H·T
//     floats), and the dq accumulator after it (B·T·C floats) zeroed.
//     Traffic: dO and O read once, D and the accumulator written once.
//     Launch: grid (B·H, ceil(T/64)).
//   - fleet_attention_bwd_mma<HDP>_<t>: a block owns 64 keys of one
//     key/value head and loops over the query heads of its group and the
//     query tiles that see its keys: Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ,
//     P = exp(S - lse), dS = P⊙(F⊙dP - D) (F the dropout factors, 1
//     without dropout), dV += (P⊙F)ᵀ·dO, dK += dSᵀ·Q/sqrt(hd), then dS
//     through shared memory and dQ += dS·K added to the accumulator with
//     atomicAdd. 10·HDP FLOPs a pair (five products of 2·HDP), against
//     14·HDP for the two-kernel split that computes S and dP in each (the
//     CUDA-core kernels of attention.cu still do). Traffic: k and v of the
//     block's rows read and dk, dv written once; q, dO, lse and D of the
//     queries from the block's first on, once per key block (from L2
//     after the first); the accumulator's rows added to in L2.
//     Launch: grid (ceil(T/64), B·KVH), a (b, key/value head)'s key blocks
//     next to each other and the first (the one with the most queries)
//     first, as FlashAttention-2 orders them.
//   - fleet_attention_bwd_post_<t>: dq = accumulator/sqrt(hd) into q's
//     third of dqkv. Traffic: the accumulator read once, dq written once.
//     Launch: grid (B·H, ceil(T/64)).
// dk and dv are deterministic: each key/value head's sums over its
// group's query heads and over the queries run in a fixed order in one
// block's registers. dq is not on a GPU: the key blocks' shares of an
// element are added in the order the blocks happen to run, so its bits
// may differ from run to run (in the emulator, which runs blocks one at a
// time in order, they do not). A deterministic dq would need the shares
// kept apart and summed in a fixed order: at GPT-2's shape (T 1024, 16
// key blocks, B·T·C of 12.6M) the triangular set of per-key-block partials
// is 8.5 times the accumulator, about 430 MB per layer written and read
// again, more time than the recomputation it saves.

#define FA_WARPS 4
#define FA_ROWS 64 // rows a block owns: 16 per warp
#define FA_PAD 8   // halves of padding per shared-memory row
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.69314718055994531f

__device__ __forceinline__ int fa_imin(int a, int b) { return a < b ? a : b; }

// The products' operand type: bf16 (fa_bf) or f16 (fa_hf, for fp16's
// autocast; F32 storage only): rounding to it, widening from it, and the
// product.
struct fa_bf {
	static __device__ __forceinline__ unsigned short h(float v) { return fleet_f32_to_bf16(v); }
	static __device__ __forceinline__ float f(unsigned short v) { return fleet_bf16_to_f32(v); }
	static __device__ __forceinline__ void mma(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { fleet_mma_bf16(d, a, b, c); }
};
struct fa_hf {
	static __device__ __forceinline__ unsigned short h(float v) { return fleet_f32_to_f16(v); }
	static __device__ __forceinline__ float f(unsigned short v) { return fleet_f16_to_f32(v); }
	static __device__ __forceinline__ void mma(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) { fleet_mma_f16(d, a, b, c); }
};

// fa_pack rounds two floats to the operand type and packs them, lo in the
// low half.
template <class P>
__device__ __forceinline__ unsigned fa_pack(float lo, float hi) {
	return (unsigned)P::h(lo) | ((unsigned)P::h(hi) << 16);
}

// fa_check_block traps unless the block is FA_WARPS warps in one dimension.
__device__ __forceinline__ void fa_check_block() {
	if (blockDim.x != 32 * FA_WARPS || blockDim.y != 1 || blockDim.z != 1) {
		__trap();
	}
}

// Storage: bf16 (unsigned short bits) as the operands are (P fa_bf), or
// F32, which the loads round to the operand type (autocast's products on
// F32 activations). fa_op is a stored value as the products see it.
template <class P>
__device__ __forceinline__ unsigned short fa_h(unsigned short v) { return v; }
template <class P>
__device__ __forceinline__ unsigned short fa_h(float v) { return P::h(v); }
template <class P>
__device__ __forceinline__ float fa_op(unsigned short v) { return fleet_bf16_to_f32(v); }
template <class P>
__device__ __forceinline__ float fa_op(float v) { return P::f(P::h(v)); }
__device__ __forceinline__ float fa_f32(unsigned short v) { return fleet_bf16_to_f32(v); }
__device__ __forceinline__ float fa_f32(float v) { return v; }
__device__ __forceinline__ void fa_put(unsigned short *p, float v) { *p = fleet_f32_to_bf16(v); }
__device__ __forceinline__ void fa_put(float *p, float v) { *p = v; }

// fa_vec reports whether a head slice of rows stride elements apart, hd
// wide, at column offsets that are multiples of hd, can be read in
// 16-byte pieces.
template <typename S>
__device__ __forceinline__ bool fa_vec(const S *base, long long stride, int hd) {
	return hd % 8 == 0 && stride % 8 == 0 && ((unsigned long long)base & 15) == 0;
}

// fa_copy8 stages 8 elements (16-byte aligned) into shared memory as
// operands: a cp.async of bf16, not yet committed, or two 16-byte loads of
// F32, rounded, and one 16-byte store.
template <class P>
__device__ __forceinline__ void fa_copy8(unsigned short *d, const unsigned short *src) { fleet_cp_async16(d, src); }
template <class P>
__device__ __forceinline__ void fa_copy8(unsigned short *d, const float *src) {
	float4 a = *(const float4 *)src, b = *(const float4 *)(src + 4);
	uint4 v;
	v.x = fa_pack<P>(a.x, a.y), v.y = fa_pack<P>(a.z, a.w), v.z = fa_pack<P>(b.x, b.y), v.w = fa_pack<P>(b.z, b.w);
	*(uint4 *)d = v;
}

// fa_load stages rows [0, R) of a head slice into dst [R][HDP + FA_PAD]
// as bf16: row r comes from src + r*stride where r < nvalid, columns < hd;
// the rest of each row up to HDP, and rows from nvalid on, are zero.
// bf16 copies are cp.async where vec; the caller commits and waits.
template <int R, int HDP, class P, typename S>
__device__ __forceinline__ void fa_load(unsigned short *dst, const S *src, long long stride, int nvalid, int hd, bool vec) {
	const int LD = HDP + FA_PAD, CH = HDP / 8;
	for (int i = threadIdx.x; i < R * CH; i += blockDim.x) {
		int r = i / CH, c = (i % CH) * 8;
		unsigned short *d = dst + r * LD + c;
		if (vec && r < nvalid && c < hd) { // vec: hd is a multiple of 8
			fa_copy8<P>(d, src + r * stride + c);
		} else {
#pragma unroll
			for (int e = 0; e < 8; e++) {
				d[e] = (r < nvalid && c + e < hd) ? fa_h<P>(src[r * stride + c + e]) : (unsigned short)0;
			}
		}
	}
}

// fa_ldA loads the A fragment (16x16, row-major) at rows [row0, row0+16),
// columns [col0, col0+16) of a tile with LD halves per row.
template <int LD>
__device__ __forceinline__ void fa_ldA(unsigned a[4], const unsigned short *tile, int row0, int col0) {
	int lane = threadIdx.x & 31, m = lane >> 3;
	fleet_ldmatrix_x4(a, tile + (row0 + (m & 1) * 8 + (lane & 7)) * LD + col0 + (m >> 1) * 8);
}

// fa_ldBt loads B fragments for two n-tiles from a tile that holds B
// transposed (n rows, k columns: the keys of S = Q·Kᵀ): b0 for n-tile rows
// [n0, n0+8), b1 for [n0+8, n0+16), k columns [k0, k0+16).
template <int LD>
__device__ __forceinline__ void fa_ldBt(unsigned b0[2], unsigned b1[2], const unsigned short *tile, int n0, int k0) {
	int lane = threadIdx.x & 31, m = lane >> 3;
	unsigned r[4];
	fleet_ldmatrix_x4(r, tile + (n0 + (m >> 1) * 8 + (lane & 7)) * LD + k0 + (m & 1) * 8);
	b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// fa_ldB loads B fragments for two n-tiles from a tile that holds B as is
// (k rows, n columns: the values of P·V): columns [n0, n0+8) into b0 and
// [n0+8, n0+16) into b1, k rows [k0, k0+16).
template <int LD>
__device__ __forceinline__ void fa_ldB(unsigned b0[2], unsigned b1[2], const unsigned short *tile, int k0, int n0) {
	int lane = threadIdx.x & 31, m = lane >> 3;
	unsigned r[4];
	fleet_ldmatrix_x4_trans(r, tile + (k0 + (m & 1) * 8 + (lane & 7)) * LD + n0 + (m >> 1) * 8);
	b0[0] = r[0], b0[1] = r[1], b1[0] = r[2], b1[1] = r[3];
}

// fa_mma_abt accumulates acc[N/8] += A·Bᵀ for this warp's 16 rows of A
// (tile a, rows [arow0, arow0+16)) against N rows of b (tile b, rows
// [0, N)), over K columns: a 16xN block of scores.
template <int LD, int N, int K, class P>
__device__ __forceinline__ void fa_mma_abt(float acc[N / 8][4], const unsigned short *a, int arow0, const unsigned short *b) {
#pragma unroll
	for (int kk = 0; kk < K; kk += 16) {
		unsigned af[4];
		fa_ldA<LD>(af, a, arow0, kk);
#pragma unroll
		for (int j = 0; j < N / 8; j += 2) {
			unsigned b0[2], b1[2];
			fa_ldBt<LD>(b0, b1, b, 8 * j, kk);
			P::mma(acc[j], af, b0, acc[j]);
			P::mma(acc[j + 1], af, b1, acc[j + 1]);
		}
	}
}

// fa_mma_pb accumulates acc[HDP/8] += P·V for this warp: P is 16xN in
// registers as score-shaped accumulators (rounded to bf16 here), V the
// tile v with N rows and HDP columns.
template <int LD, int N, int HDP, class P>
__device__ __forceinline__ void fa_mma_pb(float acc[HDP / 8][4], const float p[N / 8][4], const unsigned short *v) {
#pragma unroll
	for (int kk = 0; kk < N / 16; kk++) {
		unsigned af[4] = {fa_pack<P>(p[2 * kk][0], p[2 * kk][1]), fa_pack<P>(p[2 * kk][2], p[2 * kk][3]),
			fa_pack<P>(p[2 * kk + 1][0], p[2 * kk + 1][1]), fa_pack<P>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
		for (int j = 0; j < HDP / 8; j += 2) {
			unsigned b0[2], b1[2];
			fa_ldB<LD>(b0, b1, v, 16 * kk, 8 * j);
			P::mma(acc[j], af, b0, acc[j]);
			P::mma(acc[j + 1], af, b1, acc[j + 1]);
		}
	}
}

template <int N>
__device__ __forceinline__ void fa_zero(float x[N][4]) {
#pragma unroll
	for (int j = 0; j < N; j++) {
		x[j][0] = x[j][1] = x[j][2] = x[j][3] = 0.0f;
	}
}

// fa_store writes this warp's 16xHDP accumulator block, times scale, as
// rows [row0, row0+16) of a head slice (row r at dst + r*stride), rows <
// nrows and columns < hd only.
template <int HDP, typename S>
__device__ __forceinline__ void fa_store(S *dst, long long stride, const float acc[HDP / 8][4], int row0, int nrows, int hd,
	float scale0, float scale1) {
	int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
	for (int j = 0; j < HDP / 8; j++) {
#pragma unroll
		for (int e = 0; e < 4; e++) {
			int r = row0 + g + (e >> 1) * 8, c = 8 * j + 2 * t + (e & 1);
			if (r < nrows && c < hd) {
				fa_put(dst + r * stride + c, acc[j][e] * ((e >> 1) ? scale1 : scale0));
			}
		}
	}
}

// fa_quad_max and fa_quad_sum reduce over the four lanes that share a row
// of a fragment (lanes 4g..4g+3); every one of them gets the result.
__device__ __forceinline__ float fa_quad_max(float v) {
	v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
	return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float fa_quad_sum(float v) {
	v += __shfl_xor_sync(0xffffffffu, v, 1);
	return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Forward: out and lse for the 64 queries [q0, q0+64) of one (b, h), the
// last query block first (blockIdx.y = 0 has the most keys).
template <int HDP, int BC, class P, typename S>
__device__ __forceinline__ void fa_fwd(S *__restrict__ out, float *__restrict__ lse, const S *__restrict__ qkv, int B, int T, int C, int H, int KVH,
	unsigned short *sQ, unsigned short *sK, unsigned short *sV, fleet_attn_drop dr) {
	const int LD = HDP + FA_PAD;
	fa_check_block();
	int bh = blockIdx.x, b = bh / H, h = bh % H, hd = C / H, kvh = h / (H / KVH);
	int q0 = ((T + FA_ROWS - 1) / FA_ROWS - 1 - (int)blockIdx.y) * FA_ROWS;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	long long stride = (long long)C + 2LL * KVH * hd;
	const S *base = qkv + (long long)b * T * stride + (long long)h * hd;
	const S *kbase = qkv + (long long)b * T * stride + C + (long long)kvh * hd, *vbase = kbase + (long long)KVH * hd;
	bool vec = fa_vec(base, stride, hd) && fa_vec(kbase, stride, hd);
	float scale2 = FA_LOG2E / sqrtf((float)hd);

	fa_load<FA_ROWS, HDP, P>(sQ, base + q0 * stride, stride, T - q0, hd, vec);
	fleet_cp_async_commit();

	float o[HDP / 8][4];
	fa_zero<HDP / 8>(o);
	float m[2] = {FLEET_NEG_INF, FLEET_NEG_INF}, l[2] = {0.0f, 0.0f}; // l: this lane's share of the row sum
	int wq = q0 + 16 * warp;                                            // the warp's first query
	int kend = fa_imin(T, q0 + FA_ROWS);
	for (int k0 = 0; k0 < kend; k0 += BC) {
		__syncthreads(); // every warp is done with the previous tiles
		fa_load<BC, HDP, P>(sK, kbase + k0 * stride, stride, T - k0, hd, vec);
		fleet_cp_async_commit();
		fa_load<BC, HDP, P>(sV, vbase + k0 * stride, stride, T - k0, hd, vec);
		fleet_cp_async_commit();
		fleet_cp_async_wait<1>(); // Q and K have landed; V may not have
		__syncthreads();
		bool active = k0 <= wq + 15; // some query of the warp sees some key of the tile
		float s[BC / 8][4];
		if (active) {
			fa_zero<BC / 8>(s);
			fa_mma_abt<LD, BC, HDP, P>(s, sQ, 16 * warp, sK);
#pragma unroll
			for (int r = 0; r < 2; r++) {
				int qi = wq + g + 8 * r;
				float mx = FLEET_NEG_INF;
#pragma unroll
				for (int j = 0; j < BC / 8; j++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						int key = k0 + 8 * j + 2 * t + e;
						float v = key > qi ? FLEET_NEG_INF : s[j][2 * r + e] * scale2;
						s[j][2 * r + e] = v;
						mx = fmaxf(mx, v);
					}
				}
				float mnew = fmaxf(m[r], fa_quad_max(mx)); // finite: key 0 is in the first tile
				float alpha = exp2f(m[r] - mnew), sum = 0.0f;
#pragma unroll
				for (int j = 0; j < BC / 8; j++) {
#pragma unroll
					for (int e = 0; e < 2; e++) {
						float p = exp2f(s[j][2 * r + e] - mnew);
						sum += p;
						int key = k0 + 8 * j + 2 * t + e;
						if (dr.on && key <= qi) { // the probability dropped for the product with V
							p *= dr.factor(bh, T, qi, key);
						}
						s[j][2 * r + e] = p;
					}
				}
				l[r] = l[r] * alpha + sum;
				m[r] = mnew;
#pragma unroll
				for (int j = 0; j < HDP / 8; j++) {
					o[j][2 * r] *= alpha;
					o[j][2 * r + 1] *= alpha;
				}
			}
		}
		fleet_cp_async_wait<0>(); // V has landed
		__syncthreads();
		if (active) {
			fa_mma_pb<LD, BC, HDP, P>(o, s, sV);
		}
	}
	float inv[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		float sum = fa_quad_sum(l[r]);
		inv[r] = 1.0f / sum;
		int qi = wq + g + 8 * r;
		if (t == 0 && qi < T) {
			lse[(long long)bh * T + qi] = (m[r] + log2f(sum)) * FA_LN2;
		}
	}
	fa_store<HDP>(out + (long long)b * T * C + (long long)h * hd, C, o, wq, T, hd, inv[0], inv[1]);
}

// fa_rows_load stages per-row scalars of the rows [r0, r0+R) into dst:
// lse in base 2 (from natural log) or D as is; 0 past T.
template <int R>
__device__ __forceinline__ void fa_rows_load(float *dst, const float *src, int r0, int T, float mul) {
	for (int i = threadIdx.x; i < R; i += blockDim.x) {
		dst[i] = r0 + i < T ? src[r0 + i] * mul : 0.0f;
	}
}

// Backward, first launch (fleet_attention_bwd_pre_<t>): for the 64
// queries [q0, q0+64) of one (b, h), D_i = dO_i·O_i into scratch's first
// B·H·T floats, and the same rows of the dq accumulator (the B·T·C floats
// after them, laid out as dq [B, T, C]) set to zero.
template <class P, typename S>
__device__ __forceinline__ void fa_bwd_pre(float *__restrict__ scratch, const S *__restrict__ dout, const S *__restrict__ out, int B, int T, int C, int H) {
	fa_check_block();
	int bh = blockIdx.x, b = bh / H, h = bh % H, hd = C / H;
	int q0 = (int)blockIdx.y * FA_ROWS;
	const S *dob = dout + (long long)b * T * C + (long long)h * hd, *ob = out + (long long)b * T * C + (long long)h * hd;
	float *acc = scratch + (long long)B * H * T + (long long)b * T * C + (long long)h * hd;
	// D: two threads per row, each summing every other column, then one
	// shuffle (a fixed order).
	{
		int r = threadIdx.x >> 1, qi = q0 + r;
		float s = 0.0f;
		if (qi < T) {
			for (int c = threadIdx.x & 1; c < hd; c += 2) {
				s += fa_op<P>(dob[(long long)qi * C + c]) * fa_f32(ob[(long long)qi * C + c]);
			}
		}
		s += __shfl_xor_sync(0xffffffffu, s, 1);
		if ((threadIdx.x & 1) == 0 && qi < T) {
			scratch[(long long)bh * T + qi] = s;
		}
	}
	for (int i = threadIdx.x; i < FA_ROWS * hd; i += blockDim.x) {
		int qi = q0 + i / hd, c = i % hd;
		if (qi < T) {
			acc[(long long)qi * C + c] = 0.0f;
		}
	}
}

// Backward, last launch (fleet_attention_bwd_post_<t>): the q third of
// dqkv for the 64 queries [q0, q0+64) of one (b, h), from the dq
// accumulator, times 1/sqrt(hd), in the storage type.
template <typename S>
__device__ __forceinline__ void fa_bwd_post(S *__restrict__ dqkv, const float *__restrict__ scratch, int B, int T, int C, int H, int KVH) {
	fa_check_block();
	int bh = blockIdx.x, b = bh / H, h = bh % H, hd = C / H;
	int q0 = (int)blockIdx.y * FA_ROWS;
	long long stride = (long long)C + 2LL * KVH * hd;
	const float *acc = scratch + (long long)B * H * T + (long long)b * T * C + (long long)h * hd;
	S *dq = dqkv + (long long)b * T * stride + (long long)h * hd;
	float sc = 1.0f / sqrtf((float)hd);
	for (int i = threadIdx.x; i < FA_ROWS * hd; i += blockDim.x) {
		int qi = q0 + i / hd, c = i % hd;
		if (qi < T) {
			fa_put(dq + (long long)qi * stride + c, acc[(long long)qi * C + c] * sc);
		}
	}
}

// Backward, the main launch (FlashAttention-2's): for the block's 64 keys
// [k0, k0+64) of key/value head kvh, the first key block first
// (blockIdx.x = 0 has the most queries), looping over the query heads of
// kvh's group in order and, for each, over the query tiles that see the
// keys. Each tile's Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ are computed once, with
// P = exp2(S·scale2 - lse2), F the dropout factors (1 without dropout)
// and dS = P⊙(F⊙dP - D); then dv += (P⊙F)ᵀ·dO and dk += dSᵀ·Q/sqrt(hd)
// in registers (each warp its 16 keys; the group's heads summed in a fixed
// order), and dS goes through shared memory (rows the tile's queries,
// columns the block's keys) for the tile's share of dq, dS·K, which is
// added to the f32 dq accumulator with atomicAdd: each element by one
// thread of the block, the key blocks in whatever order they run.
template <int HDP, int BQ, class P, typename S>
__device__ __forceinline__ void fa_bwd(S *__restrict__ dqkv, float *__restrict__ scratch, const S *__restrict__ dout, const float *__restrict__ lse,
	const S *__restrict__ qkv, int B, int T, int C, int H, int KVH, unsigned short *sK, unsigned short *sV, unsigned short *sQ, unsigned short *sdO,
	unsigned short *sdS, float *sL, float *sD, fleet_attn_drop dr) {
	const int LD = HDP + FA_PAD, LDS = FA_ROWS + FA_PAD;
	// dq's tile is BQ queries by HDP columns: BQ/16 row groups of 16, the
	// warps spread over them and then over the columns, NC each.
	const int RG = BQ / 16, NC = HDP * RG / FA_WARPS;
	fa_check_block();
	int bk = blockIdx.y, b = bk / KVH, kvh = bk % KVH, hd = C / H, grp = H / KVH;
	int k0 = (int)blockIdx.x * FA_ROWS;
	int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
	long long stride = (long long)C + 2LL * KVH * hd;
	const S *kbase = qkv + (long long)b * T * stride + C + (long long)kvh * hd, *vbase = kbase + (long long)KVH * hd;
	const S *qb0 = qkv + (long long)b * T * stride + (long long)kvh * grp * hd, *db0 = dout + (long long)b * T * C + (long long)kvh * grp * hd;
	const float *D = scratch;
	float *acc0 = scratch + (long long)B * H * T + (long long)b * T * C;
	bool vec = fa_vec(qb0, stride, hd) && fa_vec(kbase, stride, hd) && fa_vec(db0, C, hd);
	float scale2 = FA_LOG2E / sqrtf((float)hd);

	fa_load<FA_ROWS, HDP, P>(sK, kbase + k0 * stride, stride, T - k0, hd, vec);
	fa_load<FA_ROWS, HDP, P>(sV, vbase + k0 * stride, stride, T - k0, hd, vec);
	fleet_cp_async_commit();

	float dk[HDP / 8][4], dv[HDP / 8][4];
	fa_zero<HDP / 8>(dk);
	fa_zero<HDP / 8>(dv);
	int wk = k0 + 16 * warp;                                  // the warp's first key
	int qrow = 16 * (warp % RG), qcol = NC * (warp / RG);     // the warp's part of dq's tile
	for (int h = kvh * grp; h < (kvh + 1) * grp; h++) { // the group's query heads, in order
		long long bh = (long long)b * H + h;
		const S *base = qkv + (long long)b * T * stride + (long long)h * hd;
		const S *dob = dout + (long long)b * T * C + (long long)h * hd;
		float *acc = acc0 + (long long)h * hd;
		for (int q0 = k0; q0 < T; q0 += BQ) { // BQ divides 64: the first tile starts at k0
			__syncthreads();
			fa_load<BQ, HDP, P>(sQ, base + q0 * stride, stride, T - q0, hd, vec);
			fa_load<BQ, HDP, P>(sdO, dob + (long long)q0 * C, C, T - q0, hd, vec);
			fleet_cp_async_commit();
			fa_rows_load<BQ>(sL, lse + bh * T, q0, T, FA_LOG2E);
			fa_rows_load<BQ>(sD, D + bh * T, q0, T, 1.0f);
			fleet_cp_async_wait<0>();
			__syncthreads();
			// Some query of the tile sees some key of the warp; else the
			// warp's columns of dS are zero.
			bool active = wk < T && q0 + BQ - 1 >= wk;
			if (active) {
				float s[BQ / 8][4], dp[BQ / 8][4]; // Sᵀ and dPᵀ: rows are keys, columns queries
				fa_zero<BQ / 8>(s);
				fa_zero<BQ / 8>(dp);
				fa_mma_abt<LD, BQ, HDP, P>(s, sK, 16 * warp, sQ);
				fa_mma_abt<LD, BQ, HDP, P>(dp, sV, 16 * warp, sdO);
				float ds[BQ / 8][4];
#pragma unroll
				for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
					for (int e = 0; e < 4; e++) {
						int key = wk + g + 8 * (e >> 1), qc = 8 * j + 2 * t + (e & 1), qi = q0 + qc;
						float p = (key > qi || qi >= T) ? 0.0f : exp2f(s[j][e] * scale2 - sL[qc]);
						float f = (dr.on && key <= qi && qi < T) ? dr.factor(bh, T, qi, key) : 1.0f;
						s[j][e] = dr.on ? p * f : p; // dV from the dropped probabilities
						ds[j][e] = p * (dr.on ? dp[j][e] * f - sD[qc] : dp[j][e] - sD[qc]);
						sdS[qc * LDS + 16 * warp + g + 8 * (e >> 1)] = P::h(ds[j][e]);
					}
				}
				fa_mma_pb<LD, BQ, HDP, P>(dv, s, sdO);
				fa_mma_pb<LD, BQ, HDP, P>(dk, ds, sQ);
			} else {
#pragma unroll
				for (int j = 0; j < BQ / 8; j++) {
#pragma unroll
					for (int e = 0; e < 4; e++) {
						sdS[(8 * j + 2 * t + (e & 1)) * LDS + 16 * warp + g + 8 * (e >> 1)] = 0;
					}
				}
			}
			__syncthreads(); // dS is whole
			float dq[NC / 8][4];
			fa_zero<NC / 8>(dq);
#pragma unroll
			for (int kk = 0; kk < FA_ROWS; kk += 16) {
				unsigned af[4];
				fa_ldA<LDS>(af, sdS, qrow, kk);
#pragma unroll
				for (int j = 0; j < NC / 8; j += 2) {
					unsigned b0[2], b1[2];
					fa_ldB<LD>(b0, b1, sK, kk, qcol + 8 * j);
					P::mma(dq[j], af, b0, dq[j]);
					P::mma(dq[j + 1], af, b1, dq[j + 1]);
				}
			}
#pragma unroll
			for (int j = 0; j < NC / 8; j++) {
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int qi = q0 + qrow + g + 8 * (e >> 1), c = qcol + 8 * j + 2 * t + (e & 1);
					if (qi < T && c < hd) {
						atomicAdd(acc + (long long)qi * C + c, dq[j][e]);
					}
				}
			}
		}
	}
	float sc = 1.0f / sqrtf((float)hd);
	S *d = dqkv + (long long)b * T * stride + C + (long long)kvh * hd;
	fa_store<HDP>(d, stride, dk, wk, T, hd, sc, sc);
	fa_store<HDP>(d + (long long)KVH * hd, stride, dv, wk, T, hd, 1.0f, 1.0f);
}

// The kernels, one per head padding and storage type: HDP, then the
// column tile of the forward (BCF) and backward (BQ: the queries the main
// backward kernel streams) passes. Shared tiles are declared in the
// kernels themselves (a template's static would be one object across
// every emulator module of a process); the parameter lists are written
// out, as the launchers and the emulator read them from the source.
#define FA_FWD(HDP, BCF, P)                                                   \
	__shared__ __align__(16) unsigned short sQ[FA_ROWS * (HDP + FA_PAD)]; \
	__shared__ __align__(16) unsigned short sK[BCF * (HDP + FA_PAD)];     \
	__shared__ __align__(16) unsigned short sV[BCF * (HDP + FA_PAD)];     \
	fa_fwd<HDP, BCF, P>(out, lse, qkv, B, T, C, H, KVH, sQ, sK, sV, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));
#define FA_BWD(HDP, BQ, P)                                                       \
	__shared__ __align__(16) unsigned short sK[FA_ROWS * (HDP + FA_PAD)];    \
	__shared__ __align__(16) unsigned short sV[FA_ROWS * (HDP + FA_PAD)];    \
	__shared__ __align__(16) unsigned short sQ[BQ * (HDP + FA_PAD)];         \
	__shared__ __align__(16) unsigned short sdO[BQ * (HDP + FA_PAD)];        \
	__shared__ __align__(16) unsigned short sdS[BQ * (FA_ROWS + FA_PAD)];    \
	__shared__ float sL[BQ];                                                 \
	__shared__ float sD[BQ];                                                 \
	fa_bwd<HDP, BQ, P>(dqkv, scratch, dout, lse, qkv, B, T, C, H, KVH, sK, sV, sQ, sdO, sdS, sL, sD, fleet_attn_drop_make(dropSeed, dropOffset, dropSite, dropThreshold, dropScale, seedBase));

extern "C" __global__ void fleet_attention_fwd_mma32_bf16(unsigned short *__restrict__ out, float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(32, 64, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma32_bf16(unsigned short *__restrict__ dqkv, float *__restrict__ scratch, const unsigned short *__restrict__ dout,
	const float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(32, 64, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma64_bf16(unsigned short *__restrict__ out, float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(64, 64, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma64_bf16(unsigned short *__restrict__ dqkv, float *__restrict__ scratch, const unsigned short *__restrict__ dout,
	const float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(64, 64, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma128_bf16(unsigned short *__restrict__ out, float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(128, 32, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma128_bf16(unsigned short *__restrict__ dqkv, float *__restrict__ scratch, const unsigned short *__restrict__ dout,
	const float *__restrict__ lse, const unsigned short *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(128, 16, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma32_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(32, 64, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma32_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(32, 64, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma64_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(64, 64, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma64_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(64, 64, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma128_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(128, 32, fa_bf)
}
extern "C" __global__ void fleet_attention_bwd_mma128_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(128, 16, fa_bf)
}

extern "C" __global__ void fleet_attention_fwd_mma32f16_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(32, 64, fa_hf)
}
extern "C" __global__ void fleet_attention_bwd_mma32f16_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(32, 64, fa_hf)
}

extern "C" __global__ void fleet_attention_fwd_mma64f16_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(64, 64, fa_hf)
}
extern "C" __global__ void fleet_attention_bwd_mma64f16_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(64, 64, fa_hf)
}

extern "C" __global__ void fleet_attention_fwd_mma128f16_f32(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv, int B,
	int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_FWD(128, 32, fa_hf)
}
extern "C" __global__ void fleet_attention_bwd_mma128f16_f32(float *__restrict__ dqkv, float *__restrict__ scratch, const float *__restrict__ dout,
	const float *__restrict__ lse, const float *__restrict__ qkv, int B, int T, int C, int H, int KVH, long long dropSeed, long long dropOffset, int dropSite, unsigned int dropThreshold, float dropScale, const int *seedBase) {
	FA_BWD(128, 16, fa_hf)
}

// The first and last backward launches do no products: one kernel per
// storage type, whatever the head padding. f16 (F32 storage only) rounds
// dO to f16 for D, as the main kernel's f16 products see it; else to bf16.
extern "C" __global__ void fleet_attention_bwd_pre_bf16(float *__restrict__ scratch, const unsigned short *__restrict__ dout, const unsigned short *__restrict__ out,
	int B, int T, int C, int H) {
	fa_bwd_pre<fa_bf>(scratch, dout, out, B, T, C, H);
}
extern "C" __global__ void fleet_attention_bwd_pre_f32(float *__restrict__ scratch, const float *__restrict__ dout, const float *__restrict__ out,
	int B, int T, int C, int H, int f16) {
	if (f16) {
		fa_bwd_pre<fa_hf>(scratch, dout, out, B, T, C, H);
	} else {
		fa_bwd_pre<fa_bf>(scratch, dout, out, B, T, C, H);
	}
}
extern "C" __global__ void fleet_attention_bwd_post_bf16(unsigned short *__restrict__ dqkv, const float *__restrict__ scratch, int B, int T, int C, int H, int KVH) {
	fa_bwd_post(dqkv, scratch, B, T, C, H, KVH);
}
extern "C" __global__ void fleet_attention_bwd_post_f32(float *__restrict__ dqkv, const float *__restrict__ scratch, int B, int T, int C, int H, int KVH) {
	fa_bwd_post(dqkv, scratch, B, T, C, H, KVH);
}

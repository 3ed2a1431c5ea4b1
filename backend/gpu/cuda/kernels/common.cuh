// Helpers shared by every kernel. Plain CUDA C: it builds under NVRTC and
// under the emulation prelude alike.

// bf16 and fp16 travel as unsigned short bit patterns.
__device__ __forceinline__ float fleet_bf16_to_f32(unsigned short h) {
	return __uint_as_float(((unsigned int)h) << 16);
}

// fleet_f32_to_bf16 rounds to nearest even; NaN stays a quiet NaN.
__device__ __forceinline__ unsigned short fleet_f32_to_bf16(float f) {
	unsigned int u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (unsigned short)((u >> 16) | 0x40u);
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}

// fleet_warp_sum returns the sum of v over the 32 lanes of a full warp.
__device__ __forceinline__ float fleet_warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

// fleet_warp_max returns the maximum of v over the 32 lanes of a full warp.
__device__ __forceinline__ float fleet_warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	}
	return v;
}

// Negative infinity, without math headers.
#define FLEET_NEG_INF __uint_as_float(0xff800000u)

// fleet_f32_to_f16 rounds to IEEE half with round to nearest even, giving
// subnormals, infinity on overflow and a quiet NaN for NaN; bit for bit
// backend.F32ToF16.
__device__ __forceinline__ unsigned short fleet_f32_to_f16(float f) {
	unsigned int b = __float_as_uint(f);
	unsigned int sign = (b >> 16) & 0x8000u;
	int exp = (int)((b >> 23) & 0xffu);
	unsigned int man = b & 0x7fffffu;
	if (exp == 0xff) {
		return (unsigned short)(sign | (man != 0u ? 0x7e00u : 0x7c00u));
	}
	if (exp == 0 && man == 0u) {
		return (unsigned short)sign;
	}
	int e = exp - 127 + 15;
	if (e >= 0x1f) {
		return (unsigned short)(sign | 0x7c00u);
	}
	if (e <= 0) {
		// Subnormal half, or zero: shift the mantissa with its implicit
		// bit right by 14 - e, rounding to nearest even.
		if (e < -10) {
			return (unsigned short)sign;
		}
		unsigned int m = man | 0x800000u;
		unsigned int shift = (unsigned int)(14 - e);
		unsigned int half = 1u << (shift - 1u);
		unsigned int rest = m & ((1u << shift) - 1u);
		unsigned int r = m >> shift;
		if (rest > half || (rest == half && (r & 1u) != 0u)) {
			r++;
		}
		return (unsigned short)(sign | r);
	}
	unsigned int r = ((unsigned int)e << 10) | (man >> 13);
	unsigned int rest = man & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (r & 1u) != 0u)) {
		r++; // may carry into the exponent, giving infinity at the top
	}
	return (unsigned short)(sign | r);
}

// fleet_f16_to_f32 widens an IEEE half exactly (NaN payloads kept).
__device__ __forceinline__ float fleet_f16_to_f32(unsigned short h) {
	unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
	unsigned int exp = ((unsigned int)h >> 10) & 0x1fu;
	unsigned int man = (unsigned int)h & 0x3ffu;
	if (exp == 0x1fu) {
		return __uint_as_float(sign | 0x7f800000u | (man << 13));
	}
	if (exp == 0u) {
		if (man == 0u) {
			return __uint_as_float(sign);
		}
		float v = (float)man * 5.9604644775390625e-8f; // man * 2^-24, exact
		return sign != 0u ? -v : v;
	}
	return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// Storage tags. A kernel templated over a tag S reads element i of an
// S::T array as a float with S::ld and stores a float with S::st (rounding
// to nearest even for 16-bit types); arithmetic is always in float.
struct fleet_f32 {
	typedef float T;
	static __device__ __forceinline__ float ld(const float *p, long long i) { return p[i]; }
	static __device__ __forceinline__ void st(float *p, long long i, float v) { p[i] = v; }
};

struct fleet_bf16 {
	typedef unsigned short T;
	static __device__ __forceinline__ float ld(const unsigned short *p, long long i) { return fleet_bf16_to_f32(p[i]); }
	static __device__ __forceinline__ void st(unsigned short *p, long long i, float v) { p[i] = fleet_f32_to_bf16(v); }
};

struct fleet_f16 {
	typedef unsigned short T;
	static __device__ __forceinline__ float ld(const unsigned short *p, long long i) { return fleet_f16_to_f32(p[i]); }
	static __device__ __forceinline__ void st(unsigned short *p, long long i, float v) { p[i] = fleet_f32_to_f16(v); }
};

// fleet_i32 holds token ids and integer fills: ld converts to the nearest
// float, st truncates toward zero (v must fit in an int).
struct fleet_i32 {
	typedef int T;
	static __device__ __forceinline__ float ld(const int *p, long long i) { return (float)p[i]; }
	static __device__ __forceinline__ void st(int *p, long long i, float v) { p[i] = (int)v; }
};

// Grid-stride loop over [0, n) for 1-D launches.
#define FLEET_FOR_EACH(i, n) \
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (long long)gridDim.x * blockDim.x)

// fleet_block_sum returns the sum of v over a 1-D block (blockDim.x a
// multiple of 32, at most 1024) to every thread. red is __shared__ float[32]
// scratch; the call begins with a barrier, so red may be reused by
// consecutive calls. The order of additions is fixed: deterministic.
__device__ __forceinline__ float fleet_block_sum(float v, float *red) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	v = fleet_warp_sum(v);
	__syncthreads();
	if (lane == 0) {
		red[warp] = v;
	}
	__syncthreads();
	v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
	return fleet_warp_sum(v);
}

// Online softmax statistics: a running maximum m and the sum s of
// exp(x - m) over the values seen. fleet_maxsum_add folds in one value x.
__device__ __forceinline__ void fleet_maxsum_add(float &m, float &s, float x) {
	if (x > m) {
		s = s * expf(m - x) + 1.0f;
		m = x;
	} else if (x != FLEET_NEG_INF) {
		s += expf(x - m); // NaN x gives NaN
	}
}

// fleet_maxsum_merge folds the statistics (m2, s2) into (m, s). The two
// operands are put in a canonical order first, so the result does not
// depend on which is which (even if the compiler fuses a multiply-add):
// both lanes of a butterfly get identical results.
__device__ __forceinline__ void fleet_maxsum_merge(float &m, float &s, float m2, float s2) {
	if (m2 < m || (m2 == m && s2 < s)) {
		float t = m;
		m = m2;
		m2 = t;
		t = s;
		s = s2;
		s2 = t;
	}
	float mm = fmaxf(m, m2);
	if (mm == FLEET_NEG_INF) {
		s = 0.0f;
	} else {
		s = s * expf(m - mm) + s2 * expf(m2 - mm);
	}
	m = mm;
}

// fleet_warp_maxsum merges (m, s) over the 32 lanes of a full warp; every
// lane gets the result.
__device__ __forceinline__ void fleet_warp_maxsum(float &m, float &s) {
	for (int o = 16; o > 0; o >>= 1) {
		float m2 = __shfl_xor_sync(0xffffffffu, m, o);
		float s2 = __shfl_xor_sync(0xffffffffu, s, o);
		fleet_maxsum_merge(m, s, m2, s2);
	}
}

// fleet_block_maxsum merges (m, s) over a 1-D block (as fleet_block_sum);
// redm and reds are __shared__ float[32] scratch.
__device__ __forceinline__ void fleet_block_maxsum(float &m, float &s, float *redm, float *reds) {
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	fleet_warp_maxsum(m, s);
	__syncthreads();
	if (lane == 0) {
		redm[warp] = m;
		reds[warp] = s;
	}
	__syncthreads();
	if (lane < (int)(blockDim.x >> 5)) {
		m = redm[lane];
		s = reds[lane];
	} else {
		m = FLEET_NEG_INF;
		s = 0.0f;
	}
	fleet_warp_maxsum(m, s);
}

// fleet_philox4x32 is rng.Philox4x32, Philox4x32-10: c becomes the four
// words of counter c under key (k0, k1).
__device__ __forceinline__ void fleet_philox4x32(unsigned c[4], unsigned k0, unsigned k1) {
#pragma unroll
	for (int r = 0; r < 10; r++) {
		if (r > 0) {
			k0 += 0x9E3779B9u;
			k1 += 0xBB67AE85u;
		}
		unsigned long long p0 = (unsigned long long)0xD2511F53u * c[0], p1 = (unsigned long long)0xCD9E8D57u * c[2];
		unsigned n0 = (unsigned)(p1 >> 32) ^ c[1] ^ k0, n2 = (unsigned)(p0 >> 32) ^ c[3] ^ k1;
		c[0] = n0, c[1] = (unsigned)p1, c[2] = n2, c[3] = (unsigned)p0;
	}
}

// fleet_dropout_factors fills f[0..n) (n <= 4) with
// backend.DropoutMask.Factor(i0 + k): element i is element g = offset + i
// of the step's global batch, whose number is word g%4 of Philox4x32 at
// counter (g/4 low, high, site, 0) under key; it is kept (factor scale)
// where that word is at least threshold, else dropped (factor 0). Every
// element draws on its own, so any thread can draw any element, and the
// mask is the CPU's; one Philox call serves the elements of one counter.
__device__ __forceinline__ void fleet_dropout_factors(unsigned long long key, long long offset, int site, unsigned threshold, float scale, long long i0,
	int n, float f[4]) {
	if (threshold == 0u) { // p 0 (a fused residual add's): every element kept, no draws
		for (int k = 0; k < n; k++) {
			f[k] = scale;
		}
		return;
	}
	unsigned long long g = (unsigned long long)(offset + i0);
	unsigned c[4];
	unsigned long long q = ~0ull;
	for (int k = 0; k < n; k++, g++) {
		if ((g >> 2) != q) {
			q = g >> 2;
			c[0] = (unsigned)q, c[1] = (unsigned)(q >> 32), c[2] = (unsigned)site, c[3] = 0u;
			fleet_philox4x32(c, (unsigned)key, (unsigned)(key >> 32));
		}
		f[k] = c[g & 3] >= threshold ? scale : 0.0f;
	}
}

// fleet_dropout_factor is fleet_dropout_factors for one element.
__device__ __forceinline__ float fleet_dropout_factor(unsigned long long key, long long offset, int site, unsigned threshold, float scale, long long i) {
	float f[4];
	fleet_dropout_factors(key, offset, site, threshold, scale, i, 1, f);
	return f[0];
}

// fleet_dropout_seed is a dropout's key: seed, plus the key its step
// draws with where base is given (two ints on the device, the low half
// first: backend.DropoutMask.Base).
__device__ __forceinline__ unsigned long long fleet_dropout_seed(long long seed, const int *base) {
	unsigned long long s = (unsigned long long)seed;
	if (base != 0) {
		s += (unsigned long long)(unsigned int)base[0] | ((unsigned long long)(unsigned int)base[1] << 32);
	}
	return s;
}

// fleet_attn_drop is attention's dropout on its probabilities
// (backend.Attention.Drop): the factor of query i and key j of
// sequence-head bh (b*H + h) is the mask's factor of element
// (bh*T + i)*T + j. on is false for a threshold of 0 (no dropout), and the
// kernels then skip the draws and the multiplies.
struct fleet_attn_drop {
	unsigned long long key;
	long long offset;
	int site;
	unsigned threshold;
	float scale;
	bool on;
	__device__ __forceinline__ float factor(long long bh, int T, int i, int j) const {
		return fleet_dropout_factor(key, offset, site, threshold, scale, (bh * T + i) * (long long)T + j);
	}
};

__device__ __forceinline__ fleet_attn_drop fleet_attn_drop_make(long long seed, long long offset, int site, unsigned threshold, float scale, const int *base) {
	fleet_attn_drop d;
	d.on = threshold != 0u;
	d.key = d.on ? fleet_dropout_seed(seed, base) : 0ull;
	d.offset = offset, d.site = site, d.threshold = threshold, d.scale = scale;
	return d;
}

// fleet_word16 packs element pairs (or one 4-byte element) into the 32-bit
// word i of a 16-byte piece, and fleet_unword16 unpacks word w into piece
// e: the low half is the lower element.
__device__ __forceinline__ unsigned fleet_word16(const float *e, int i) { return __float_as_uint(e[i]); }
__device__ __forceinline__ unsigned fleet_word16(const unsigned short *e, int i) { return (unsigned)e[2 * i] | ((unsigned)e[2 * i + 1] << 16); }
__device__ __forceinline__ void fleet_unword16(float *e, int i, unsigned w) { e[i] = __uint_as_float(w); }
__device__ __forceinline__ void fleet_unword16(unsigned short *e, int i, unsigned w) {
	e[2 * i] = (unsigned short)(w & 0xffffu);
	e[2 * i + 1] = (unsigned short)(w >> 16);
}

// fleet_ld16<S> reads the 16 bytes at p + i (p 16-byte aligned, i a
// multiple of N = 16 / sizeof(S::T)) as
// 16 / sizeof(S::T) floats into v, and fleet_st16<S> writes v there: one
// 128-bit access each (ld.global.v4, st.global.v4), each element converted
// as S::ld and S::st convert it. The piece is element i / N of p seen as
// uint4s: so NVRTC keeps the store whole (through a cast pointer p + i, or
// a union, it split the store into four).
template <class S>
__device__ __forceinline__ void fleet_ld16(const typename S::T *p, long long i, float *v) {
	const int N = 16 / sizeof(typename S::T);
	typename S::T e[N];
	uint4 q = ((const uint4 *)p)[i / N];
	fleet_unword16(e, 0, q.x), fleet_unword16(e, 1, q.y), fleet_unword16(e, 2, q.z), fleet_unword16(e, 3, q.w);
#pragma unroll
	for (int k = 0; k < N; k++) {
		v[k] = S::ld(e, k);
	}
}
template <class S>
__device__ __forceinline__ void fleet_st16(typename S::T *p, long long i, const float *v) {
	const int N = 16 / sizeof(typename S::T);
	typename S::T e[N];
#pragma unroll
	for (int k = 0; k < N; k++) {
		S::st(e, k, v[k]);
	}
	uint4 q = make_uint4(fleet_word16(e, 0), fleet_word16(e, 1), fleet_word16(e, 2), fleet_word16(e, 3));
	((uint4 *)p)[i / N] = q;
}

// fleet_aligned16 reports whether every pointer (null ones aside) is
// 16-byte aligned.
__device__ __forceinline__ bool fleet_aligned16(const void *a, const void *b = 0, const void *c = 0, const void *d = 0, const void *e = 0) {
	return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c | (unsigned long long)d | (unsigned long long)e) & 15) == 0;
}

// fleet_vec4 reports whether n elements of 4 bytes at each of the pointers
// (null ones aside) can go as 16-byte vectors: every pointer 16-byte
// aligned and n a multiple of 4. Kernels take a vectorised loop then, with
// the same arithmetic per element; the test is uniform over the launch.
__device__ __forceinline__ bool fleet_vec4(long long n, const void *a, const void *b = 0, const void *c = 0, const void *d = 0) {
	unsigned long long bits = (unsigned long long)a | (unsigned long long)b | (unsigned long long)c | (unsigned long long)d;
	return (n & 3) == 0 && (bits & 15) == 0;
}

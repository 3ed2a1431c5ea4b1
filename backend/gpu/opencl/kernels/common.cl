// Helpers every OpenCL kernel may use: OpenCL C 1.2, no extension needed.
//
// fleet's OpenCL kernels are the CUDA kernels' twins (backend/gpu/kernels):
// the same names, the same parameters in the same order, the same launch
// shapes (a CUDA grid of blocks is an NDRange of work-groups), so that one
// set of op functions drives both. Two things differ in the signatures:
//  - a buffer is two parameters, BUF(type, name): the cl_mem and a byte
//    offset into it (OpenCL has no pointers into buffers on the host), made
//    a pointer again by AT(type, name) at the top of the kernel;
//  - a kernel that uses dynamic shared memory takes a last parameter,
//    __local uchar *dyn, which the launcher sizes.
// Warp shuffles become local-memory reductions; every reduction keeps a
// fixed order (deterministic), as the CUDA kernels do.
//
// No kernel returns before a barrier, even where all work-items of the
// group would return together, and no barrier sits inside a branch, even
// one every work-item of the group takes alike: PoCL 3.1 miscompiles both
// (values computed before the barrier came back as another work-item's;
// writes went out of bounds). Kernels with nothing to do run through with
// their work guarded, and barriers are met unconditionally.
//
// Files are templated before they are built: a block between
// "//@for X in a b c" and "//@end" is repeated for each word, with $X
// replaced by it (blocks nest). Storage tags are f32, bf16, f16 and i32:
// t_<tag> is the stored type, ld_<tag>(p, i) reads element i as a float,
// st_<tag>(p, i, v) stores a float (rounded to nearest even for 16-bit
// types, truncated for i32).

// No fused multiply-adds behind the source's back: products are rounded
// before sums, as on the CPU.
#pragma OPENCL FP_CONTRACT OFF

#define BUF(T, name) __global T *name##_b, long name##_o
#define AT(T, name) __global T *name = name##_b == 0 ? (__global T *)0 : (__global T *)((__global uchar *)name##_b + name##_o)

// Negative infinity, without math constants.
#define FLEET_NEG_INF as_float(0xff800000u)

// bf16 and fp16 travel as ushort bit patterns.
inline float fleet_bf16_to_f32(ushort h) { return as_float(((uint)h) << 16); }

// fleet_f32_to_bf16 rounds to nearest even; NaN stays a quiet NaN.
inline ushort fleet_f32_to_bf16(float f) {
	uint u = as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (ushort)((u >> 16) | 0x40u);
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return (ushort)(u >> 16);
}

// fleet_f32_to_f16 rounds to IEEE half with round to nearest even, giving
// subnormals, infinity on overflow and a quiet NaN for NaN; bit for bit
// backend.F32ToF16.
inline ushort fleet_f32_to_f16(float f) {
	uint b = as_uint(f);
	uint sign = (b >> 16) & 0x8000u;
	int exp = (int)((b >> 23) & 0xffu);
	uint man = b & 0x7fffffu;
	if (exp == 0xff) {
		return (ushort)(sign | (man != 0u ? 0x7e00u : 0x7c00u));
	}
	if (exp == 0 && man == 0u) {
		return (ushort)sign;
	}
	int e = exp - 127 + 15;
	if (e >= 0x1f) {
		return (ushort)(sign | 0x7c00u);
	}
	if (e <= 0) {
		if (e < -10) {
			return (ushort)sign;
		}
		uint m = man | 0x800000u;
		uint shift = (uint)(14 - e);
		uint halfway = 1u << (shift - 1u);
		uint rest = m & ((1u << shift) - 1u);
		uint r = m >> shift;
		if (rest > halfway || (rest == halfway && (r & 1u) != 0u)) {
			r++;
		}
		return (ushort)(sign | r);
	}
	uint r = ((uint)e << 10) | (man >> 13);
	uint rest = man & 0x1fffu;
	if (rest > 0x1000u || (rest == 0x1000u && (r & 1u) != 0u)) {
		r++;
	}
	return (ushort)(sign | r);
}

// fleet_f16_to_f32 widens an IEEE half exactly (NaN payloads kept).
inline float fleet_f16_to_f32(ushort h) {
	uint sign = ((uint)h & 0x8000u) << 16;
	uint exp = ((uint)h >> 10) & 0x1fu;
	uint man = (uint)h & 0x3ffu;
	if (exp == 0x1fu) {
		return as_float(sign | 0x7f800000u | (man << 13));
	}
	if (exp == 0u) {
		if (man == 0u) {
			return as_float(sign);
		}
		float v = (float)man * 5.9604644775390625e-8f; // man * 2^-24, exact
		return sign != 0u ? -v : v;
	}
	return as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

typedef float t_f32;
typedef ushort t_bf16;
typedef ushort t_f16;
typedef int t_i32;
#define ld_f32(p, i) ((p)[i])
#define st_f32(p, i, v) ((p)[i] = (v))
#define ld_bf16(p, i) fleet_bf16_to_f32((p)[i])
#define st_bf16(p, i, v) ((p)[i] = fleet_f32_to_bf16(v))
#define ld_f16(p, i) fleet_f16_to_f32((p)[i])
#define st_f16(p, i, v) ((p)[i] = fleet_f32_to_f16(v))
#define ld_i32(p, i) ((float)(p)[i])
#define st_i32(p, i, v) ((p)[i] = (int)(v))

// Grid-stride loop over [0, n) for 1-D launches.
#define FLEET_FOR_EACH(i, n) for (long i = get_global_id(0); i < (n); i += get_global_size(0))

// fleet_warp_sum returns to each work-item the sum of v over its "warp"
// (the 32 work-items 32w .. 32w+31 of the group), added as CUDA's
// fleet_warp_sum adds lane 0's: v[l] + v[l+16], then + the value 8 lanes
// on, and so on. red is __local float scratch, one per work-item of the
// group. Every work-item of the group must call it (it has barriers); it
// begins by writing red and ends with a barrier, so consecutive calls may
// share red; after it, red[32w] holds warp w's sum.
inline float fleet_warp_sum(float v, __local float *red) {
	int t = get_local_id(0), lane = t & 31;
	red[t] = v;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int s = 16; s > 0; s >>= 1) {
		if (lane < s) {
			red[t] += red[t + s];
		}
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	float r = red[t & ~31];
	barrier(CLK_LOCAL_MEM_FENCE);
	return r;
}

// Online softmax statistics: a running maximum m and the sum s of
// exp(x - m) over the values seen. fleet_maxsum_add folds in one value x.
inline void fleet_maxsum_add(float *m, float *s, float x) {
	if (x > *m) {
		*s = *s * exp(*m - x) + 1.0f;
		*m = x;
	} else if (x != FLEET_NEG_INF) {
		*s += exp(x - *m); // NaN x gives NaN
	}
}

// fleet_maxsum_merge folds (m2, s2) into (m, s), in a canonical order of
// the two so that the result does not depend on which is which.
inline void fleet_maxsum_merge(float *m, float *s, float m2, float s2) {
	if (m2 < *m || (m2 == *m && s2 < *s)) {
		float t = *m;
		*m = m2;
		m2 = t;
		t = *s;
		*s = s2;
		s2 = t;
	}
	float mm = fmax(*m, m2);
	if (mm == FLEET_NEG_INF) {
		*s = 0.0f;
	} else {
		*s = *s * exp(*m - mm) + s2 * exp(m2 - mm);
	}
	*m = mm;
}

// fleet_warp_maxsum merges the online softmax statistics (m, s) over
// a warp, as CUDA's fleet_warp_maxsum merges them, and gives every
// work-item the result; redm and reds as red of fleet_warp_sum; after it,
// redm[32w] and reds[32w] hold warp w's result.
inline void fleet_warp_maxsum(float *m, float *s, __local float *redm, __local float *reds) {
	int t = get_local_id(0), lane = t & 31;
	redm[t] = *m;
	reds[t] = *s;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (int k = 16; k > 0; k >>= 1) {
		if (lane < k) {
			float a = redm[t], b = reds[t];
			fleet_maxsum_merge(&a, &b, redm[t + k], reds[t + k]);
			redm[t] = a;
			reds[t] = b;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	*m = redm[t & ~31];
	*s = reds[t & ~31];
	barrier(CLK_LOCAL_MEM_FENCE);
}

// fleet_philox4x32 is rng.Philox4x32, Philox4x32-10: c becomes the four
// words of counter c under key (k0, k1).
inline void fleet_philox4x32(uint c[4], uint k0, uint k1) {
	for (int r = 0; r < 10; r++) {
		if (r > 0) {
			k0 += 0x9E3779B9u;
			k1 += 0xBB67AE85u;
		}
		ulong p0 = (ulong)0xD2511F53u * c[0], p1 = (ulong)0xCD9E8D57u * c[2];
		uint n0 = (uint)(p1 >> 32) ^ c[1] ^ k0, n2 = (uint)(p0 >> 32) ^ c[3] ^ k1;
		c[0] = n0;
		c[1] = (uint)p1;
		c[2] = n2;
		c[3] = (uint)p0;
	}
}

// fleet_dropout_factors fills f[0..n) (n <= 4) with
// backend.DropoutMask.Factor(i0 + k): element i is element g = offset + i
// of the step's global batch, whose number is word g%4 of Philox4x32 at
// counter (g/4 low, high, site, 0) under key; it is kept (factor scale)
// where that word is at least threshold, else dropped (factor 0). One
// Philox call serves the elements of one counter.
inline void fleet_dropout_factors(ulong key, long offset, int site, uint threshold, float scale, long i0, int n, float *f) {
	if (threshold == 0u) { // p 0 (a fused residual add's): every element kept, no draws
		for (int k = 0; k < n; k++) {
			f[k] = scale;
		}
		return;
	}
	ulong g = (ulong)(offset + i0);
	uint c[4] = {0u, 0u, 0u, 0u};
	ulong q = ~(ulong)0;
	for (int k = 0; k < n; k++, g++) {
		if ((g >> 2) != q) {
			q = g >> 2;
			c[0] = (uint)q;
			c[1] = (uint)(q >> 32);
			c[2] = (uint)site;
			c[3] = 0u;
			fleet_philox4x32(c, (uint)key, (uint)(key >> 32));
		}
		f[k] = c[g & 3] >= threshold ? scale : 0.0f;
	}
}

// fleet_dropout_factor is fleet_dropout_factors for one element.
inline float fleet_dropout_factor(ulong key, long offset, int site, uint threshold, float scale, long i) {
	float f[4];
	fleet_dropout_factors(key, offset, site, threshold, scale, i, 1, f);
	return f[0];
}

// fleet_dropout_seed is a dropout's key: seed, plus the key its step
// draws with where base is given (two ints on the device, the low half
// first: backend.DropoutMask.Base).
inline ulong fleet_dropout_seed(long seed, __global int *base) {
	ulong s = (ulong)seed;
	if (base != 0) {
		s += (ulong)(uint)base[0] | ((ulong)(uint)base[1] << 32);
	}
	return s;
}

// Elementwise kernels over n elements, for F32 and BF16 storage (suffix
// _f32, _bf16); BF16 values are widened to float, computed on in float and
// rounded to nearest even on store. Each thread handles elements i,
// i+stride, ... (a grid-stride loop), so any grid covers any n. Memory
// traffic is one read per input and one write per output element. Launch:
// 1-D blocks of 256 threads, grid min(ceil(n/256), 8 per SM).

// fleet_fill_<t>: dst[i] = v, rounded to the storage type (truncated toward
// zero for i32).
template <class S>
__device__ __forceinline__ void fleet_fill_impl(typename S::T *__restrict__ dst, float v, long long n) {
	FLEET_FOR_EACH(i, n) {
		S::st(dst, i, v);
	}
}

extern "C" __global__ void fleet_fill_f32(float *__restrict__ dst, float v, long long n) { fleet_fill_impl<fleet_f32>(dst, v, n); }
extern "C" __global__ void fleet_fill_bf16(unsigned short *__restrict__ dst, float v, long long n) { fleet_fill_impl<fleet_bf16>(dst, v, n); }
extern "C" __global__ void fleet_fill_f16(unsigned short *__restrict__ dst, float v, long long n) { fleet_fill_impl<fleet_f16>(dst, v, n); }
extern "C" __global__ void fleet_fill_i32(int *__restrict__ dst, float v, long long n) { fleet_fill_impl<fleet_i32>(dst, v, n); }

// fleet_binary_<t>: dst[i] = a[i] op b[i]; op is 0 add, 1 sub, 2 mul, 3 div
// (backend.BinaryOp). dst may alias a or b. The op is uniform across the
// launch, so the switch does not diverge.
template <class S>
__device__ __forceinline__ void fleet_binary_impl(typename S::T *dst, const typename S::T *a, const typename S::T *b, int op, long long n) {
	if constexpr (sizeof(typename S::T) == 4) {
		if (fleet_vec4(n, dst, a, b)) { // 16-byte accesses
			long long n4 = n >> 2;
			FLEET_FOR_EACH(q, n4) {
				float4 x = ((const float4 *)a)[q], y = ((const float4 *)b)[q], r;
				const float *xs = &x.x, *ys = &y.x;
				float *rs = &r.x;
				for (int k = 0; k < 4; k++) {
					switch (op) {
					case 0: rs[k] = xs[k] + ys[k]; break;
					case 1: rs[k] = xs[k] - ys[k]; break;
					case 2: rs[k] = xs[k] * ys[k]; break;
					default: rs[k] = xs[k] / ys[k]; break;
					}
				}
				((float4 *)dst)[q] = r;
			}
			return;
		}
	}
	FLEET_FOR_EACH(i, n) {
		float x = S::ld(a, i), y = S::ld(b, i), r;
		switch (op) {
		case 0: r = x + y; break;
		case 1: r = x - y; break;
		case 2: r = x * y; break;
		default: r = x / y; break;
		}
		S::st(dst, i, r);
	}
}

extern "C" __global__ void fleet_binary_f32(float *dst, const float *a, const float *b, int op, long long n) { fleet_binary_impl<fleet_f32>(dst, a, b, op, n); }
extern "C" __global__ void fleet_binary_bf16(unsigned short *dst, const unsigned short *a, const unsigned short *b, int op, long long n) { fleet_binary_impl<fleet_bf16>(dst, a, b, op, n); }

// fleet_dropout_add_<t>: dst[i] = x[i] + y[i]*f(i), or y[i]*f(i) where x
// is null, with f(i) the mask's factor (fleet_dropout_factors with key
// fleet_dropout_seed(seed, seedBase), offset, site, threshold, scale)
// (backend.DropoutAdd). The product is rounded before the sum (no fused
// multiply-add), as the CPU does it. dst may alias x or y.
template <class S>
__device__ __forceinline__ void fleet_dropout_add_impl(typename S::T *dst, const typename S::T *x, const typename S::T *y, long long seed,
	long long offset, int site, unsigned threshold, float scale, long long n, const int *seedBase) {
	unsigned long long s = fleet_dropout_seed(seed, seedBase);
	if constexpr (sizeof(typename S::T) == 4) {
		if (fleet_vec4(n, dst, x, y)) { // 16-byte accesses
			long long n4 = n >> 2;
			FLEET_FOR_EACH(q, n4) {
				float4 yv = ((const float4 *)y)[q], xv = x != 0 ? ((const float4 *)x)[q] : float4{0, 0, 0, 0}, r;
				const float *ys = &yv.x, *xs = &xv.x;
				float *rs = &r.x, f[4];
				fleet_dropout_factors(s, offset, site, threshold, scale, 4 * q, 4, f);
				for (int k = 0; k < 4; k++) {
					float v = __fmul_rn(ys[k], f[k]);
					rs[k] = x != 0 ? __fadd_rn(xs[k], v) : v;
				}
				((float4 *)dst)[q] = r;
			}
			return;
		}
	}
	FLEET_FOR_EACH(i, n) {
		float v = __fmul_rn(S::ld(y, i), fleet_dropout_factor(s, offset, site, threshold, scale, i));
		if (x != 0) {
			v = __fadd_rn(S::ld(x, i), v);
		}
		S::st(dst, i, v);
	}
}

extern "C" __global__ void fleet_dropout_add_f32(float *dst, const float *x, const float *y, long long seed, long long offset, int site,
	unsigned int threshold, float scale, long long n, const int *seedBase) {
	fleet_dropout_add_impl<fleet_f32>(dst, x, y, seed, offset, site, threshold, scale, n, seedBase);
}
extern "C" __global__ void fleet_dropout_add_bf16(unsigned short *dst, const unsigned short *x, const unsigned short *y, long long seed,
	long long offset, int site, unsigned int threshold, float scale, long long n, const int *seedBase) {
	fleet_dropout_add_impl<fleet_bf16>(dst, x, y, seed, offset, site, threshold, scale, n, seedBase);
}

// fleet_axpy_<t>: dst[i] += alpha * x[i] (dst is read and written).
template <class S>
__device__ __forceinline__ void fleet_axpy_impl(typename S::T *__restrict__ dst, const typename S::T *__restrict__ x, float alpha, long long n) {
	FLEET_FOR_EACH(i, n) {
		S::st(dst, i, S::ld(dst, i) + alpha * S::ld(x, i));
	}
}

extern "C" __global__ void fleet_axpy_f32(float *__restrict__ dst, const float *__restrict__ x, float alpha, long long n) { fleet_axpy_impl<fleet_f32>(dst, x, alpha, n); }
extern "C" __global__ void fleet_axpy_bf16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ x, float alpha, long long n) { fleet_axpy_impl<fleet_bf16>(dst, x, alpha, n); }

// fleet_scale_<t>: dst[i] = alpha * src[i]; dst may alias src.
template <class S>
__device__ __forceinline__ void fleet_scale_impl(typename S::T *dst, const typename S::T *src, float alpha, long long n) {
	FLEET_FOR_EACH(i, n) {
		S::st(dst, i, alpha * S::ld(src, i));
	}
}

extern "C" __global__ void fleet_scale_f32(float *dst, const float *src, float alpha, long long n) { fleet_scale_impl<fleet_f32>(dst, src, alpha, n); }
extern "C" __global__ void fleet_scale_bf16(unsigned short *dst, const unsigned short *src, float alpha, long long n) { fleet_scale_impl<fleet_bf16>(dst, src, alpha, n); }

// fleet_unary_<t>: dst[i] = op(src[i]); op is 0 neg, 1 exp, 2 log, 3 tanh,
// 4 sqrt (backend.UnaryOp). dst may alias src. Uses the accurate float
// library functions (expf, logf, tanhf: a few ulp; sqrtf: correctly rounded).
template <class S>
__device__ __forceinline__ void fleet_unary_impl(typename S::T *dst, const typename S::T *src, int op, long long n) {
	FLEET_FOR_EACH(i, n) {
		float x = S::ld(src, i);
		switch (op) {
		case 0: x = -x; break;
		case 1: x = expf(x); break;
		case 2: x = logf(x); break;
		case 3: x = tanhf(x); break;
		default: x = sqrtf(x); break;
		}
		S::st(dst, i, x);
	}
}

extern "C" __global__ void fleet_unary_f32(float *dst, const float *src, int op, long long n) { fleet_unary_impl<fleet_f32>(dst, src, op, n); }
extern "C" __global__ void fleet_unary_bf16(unsigned short *dst, const unsigned short *src, int op, long long n) { fleet_unary_impl<fleet_bf16>(dst, src, op, n); }

// GELU, tanh approximation (GPT-2), elementwise over n values in F32 or
// BF16 storage with float arithmetic. As the CPU backend writes it,
// gelu(x) = x*sigmoid(2u) = 0.5x(1 + tanh u), u = sqrt(2/pi)*(x + 0.044715x^3).
// Memory traffic: one read per input, one write per output element.
// Launch: 1-D blocks of 256 threads, grid min(ceil(n/256), 8 per SM),
// grid-stride loop.

#define FLEET_GELU_C 0.7978845608028654f // sqrt(2/pi)

// F32 arrays that are 16-byte aligned, with counts that are multiples of
// 4, move 16 bytes at a time (fleet_vec4), the same arithmetic per element.

__device__ __forceinline__ float fleet_gelu1(float x) {
	float u = FLEET_GELU_C * (x + 0.044715f * x * x * x);
	return x / (1.0f + expf(-2.0f * u));
}

// fleet_gelu_grad1 is dy*gelu'(v).
__device__ __forceinline__ float fleet_gelu_grad1(float v, float dy) {
	float u = FLEET_GELU_C * (v + 0.044715f * v * v * v);
	float sg = 1.0f / (1.0f + expf(-2.0f * u));
	float du = FLEET_GELU_C * (1.0f + 3.0f * 0.044715f * v * v);
	return dy * (sg + 2.0f * v * sg * (1.0f - sg) * du);
}

// fleet_gelu_<t>: dst[i] = gelu(src[i]); dst may alias src.
template <class S>
__device__ __forceinline__ void fleet_gelu_impl(typename S::T *dst, const typename S::T *src, long long n) {
	if constexpr (sizeof(typename S::T) == 4) {
		if (fleet_vec4(n, dst, src)) {
			FLEET_FOR_EACH(q, n >> 2) {
				float4 x = ((const float4 *)src)[q];
				((float4 *)dst)[q] = make_float4(fleet_gelu1(x.x), fleet_gelu1(x.y), fleet_gelu1(x.z), fleet_gelu1(x.w));
			}
			return;
		}
	}
	FLEET_FOR_EACH(i, n) {
		S::st(dst, i, fleet_gelu1(S::ld(src, i)));
	}
}

extern "C" __global__ void fleet_gelu_f32(float *dst, const float *src, long long n) { fleet_gelu_impl<fleet_f32>(dst, src, n); }
extern "C" __global__ void fleet_gelu_bf16(unsigned short *dst, const unsigned short *src, long long n) { fleet_gelu_impl<fleet_bf16>(dst, src, n); }

// fleet_bias_gelu_<t>: a Linear's bias added, then GELU, in one pass over
// pre [rows, cols]: pre[i] += bias[i % cols] (in place: GELU's backward
// reads it), h[i] = gelu(pre[i]). The fused form of a product without a
// bias epilogue followed by GELU.
template <class S>
__device__ __forceinline__ void fleet_bias_gelu_impl(typename S::T *pre, typename S::T *h, const typename S::T *bias, int rows, int cols) {
	long long n = (long long)rows * cols;
	if constexpr (sizeof(typename S::T) == 4) {
		if (cols % 4 == 0 && fleet_vec4(n, pre, h, bias)) {
			FLEET_FOR_EACH(q, n >> 2) {
				float4 x = ((const float4 *)pre)[q], b = ((const float4 *)bias)[(q * 4) % cols / 4];
				x = make_float4(x.x + b.x, x.y + b.y, x.z + b.z, x.w + b.w);
				((float4 *)pre)[q] = x;
				((float4 *)h)[q] = make_float4(fleet_gelu1(x.x), fleet_gelu1(x.y), fleet_gelu1(x.z), fleet_gelu1(x.w));
			}
			return;
		}
	}
	FLEET_FOR_EACH(i, n) {
		float x = S::ld(pre, i) + S::ld(bias, i % cols);
		S::st(pre, i, x);
		S::st(h, i, fleet_gelu1(S::ld(pre, i))); // GELU of pre as stored: what the backward reads
	}
}

extern "C" __global__ void fleet_bias_gelu_f32(float *pre, float *h, const float *bias, int rows, int cols) {
	fleet_bias_gelu_impl<fleet_f32>(pre, h, bias, rows, cols);
}
extern "C" __global__ void fleet_bias_gelu_bf16(unsigned short *pre, unsigned short *h, const unsigned short *bias, int rows, int cols) {
	fleet_bias_gelu_impl<fleet_bf16>(pre, h, bias, rows, cols);
}

// fleet_gelu_backward_<t>: dx[i] = dy[i]*gelu'(x[i]) with s = sigmoid(2u):
// gelu' = s + 2x*s*(1 - s)*u', u' = sqrt(2/pi)*(1 + 3*0.044715x^2).
// dx may alias dy.
template <class S>
__device__ __forceinline__ void fleet_gelu_backward_impl(typename S::T *dx, const typename S::T *x, const typename S::T *dy, long long n) {
	if constexpr (sizeof(typename S::T) == 4) {
		if (fleet_vec4(n, dx, x, dy)) {
			FLEET_FOR_EACH(q, n >> 2) {
				float4 v = ((const float4 *)x)[q], g = ((const float4 *)dy)[q];
				((float4 *)dx)[q] =
					make_float4(fleet_gelu_grad1(v.x, g.x), fleet_gelu_grad1(v.y, g.y), fleet_gelu_grad1(v.z, g.z), fleet_gelu_grad1(v.w, g.w));
			}
			return;
		}
	}
	FLEET_FOR_EACH(i, n) {
		S::st(dx, i, fleet_gelu_grad1(S::ld(x, i), S::ld(dy, i)));
	}
}

extern "C" __global__ void fleet_gelu_backward_f32(float *dx, const float *x, const float *dy, long long n) {
	fleet_gelu_backward_impl<fleet_f32>(dx, x, dy, n);
}
extern "C" __global__ void fleet_gelu_backward_bf16(unsigned short *dx, const unsigned short *x, const unsigned short *dy, long long n) {
	fleet_gelu_backward_impl<fleet_bf16>(dx, x, dy, n);
}

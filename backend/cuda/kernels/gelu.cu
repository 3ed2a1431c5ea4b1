// GELU, tanh approximation (GPT-2), elementwise over n values in F32 or
// BF16 storage with float arithmetic. As the CPU backend writes it,
// gelu(x) = x*sigmoid(2u) = 0.5x(1 + tanh u), u = sqrt(2/pi)*(x + 0.044715x^3).
// Memory traffic: one read per input, one write per output element.
// Launch: 1-D blocks of 256 threads, grid min(ceil(n/256), 8 per SM),
// grid-stride loop.

#define FLEET_GELU_C 0.7978845608028654f // sqrt(2/pi)

// fleet_gelu_<t>: dst[i] = gelu(src[i]); dst may alias src.
template <class S>
__device__ __forceinline__ void fleet_gelu_impl(typename S::T *dst, const typename S::T *src, long long n) {
	FLEET_FOR_EACH(i, n) {
		float x = S::ld(src, i);
		float u = FLEET_GELU_C * (x + 0.044715f * x * x * x);
		S::st(dst, i, x / (1.0f + expf(-2.0f * u)));
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
	FLEET_FOR_EACH(i, n) {
		float x = S::ld(pre, i) + S::ld(bias, i % cols);
		S::st(pre, i, x);
		x = S::ld(pre, i); // as stored, so GELU's input is what the backward reads
		float u = FLEET_GELU_C * (x + 0.044715f * x * x * x);
		S::st(h, i, x / (1.0f + expf(-2.0f * u)));
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
	FLEET_FOR_EACH(i, n) {
		float v = S::ld(x, i);
		float u = FLEET_GELU_C * (v + 0.044715f * v * v * v);
		float sg = 1.0f / (1.0f + expf(-2.0f * u));
		float du = FLEET_GELU_C * (1.0f + 3.0f * 0.044715f * v * v);
		S::st(dx, i, S::ld(dy, i) * (sg + 2.0f * v * sg * (1.0f - sg) * du));
	}
}

extern "C" __global__ void fleet_gelu_backward_f32(float *dx, const float *x, const float *dy, long long n) {
	fleet_gelu_backward_impl<fleet_f32>(dx, x, dy, n);
}
extern "C" __global__ void fleet_gelu_backward_bf16(unsigned short *dx, const unsigned short *x, const unsigned short *dy, long long n) {
	fleet_gelu_backward_impl<fleet_bf16>(dx, x, dy, n);
}

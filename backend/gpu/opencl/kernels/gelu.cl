// GELU, tanh approximation (GPT-2), as gelu.cu: elementwise over n values
// in F32 or BF16 storage with float arithmetic,
// gelu(x) = x*sigmoid(2u) = 0.5x(1 + tanh u), u = sqrt(2/pi)*(x + 0.044715x^3).
// Launch: 1-D work-groups of 256, any grid (grid-stride loops).

#define FLEET_GELU_C 0.7978845608028654f // sqrt(2/pi)

inline float fleet_gelu1(float x) {
	float u = FLEET_GELU_C * (x + 0.044715f * x * x * x);
	return x / (1.0f + exp(-2.0f * u));
}

// fleet_gelu_grad1 is dy*gelu'(v): with s = sigmoid(2u),
// gelu' = s + 2v*s*(1 - s)*u', u' = sqrt(2/pi)*(1 + 3*0.044715v^2).
inline float fleet_gelu_grad1(float v, float dy) {
	float u = FLEET_GELU_C * (v + 0.044715f * v * v * v);
	float sg = 1.0f / (1.0f + exp(-2.0f * u));
	float du = FLEET_GELU_C * (1.0f + 3.0f * 0.044715f * v * v);
	return dy * (sg + 2.0f * v * sg * (1.0f - sg) * du);
}

//@for S in f32 bf16
// fleet_gelu_$S: dst[i] = gelu(src[i]); dst may alias src.
__kernel void fleet_gelu_$S(BUF(t_$S, dst), BUF(t_$S, src), long n) {
	AT(t_$S, dst);
	AT(t_$S, src);
	FLEET_FOR_EACH(i, n) {
		st_$S(dst, i, fleet_gelu1(ld_$S(src, i)));
	}
}

// fleet_bias_gelu_$S: pre[i] += bias[i % cols] in place (GELU's backward
// reads it), then h[i] = gelu(pre[i]) as stored, over pre [rows, cols].
__kernel void fleet_bias_gelu_$S(BUF(t_$S, pre), BUF(t_$S, h), BUF(t_$S, bias), int rows, int cols) {
	AT(t_$S, pre);
	AT(t_$S, h);
	AT(t_$S, bias);
	long n = (long)rows * cols;
	FLEET_FOR_EACH(i, n) {
		st_$S(pre, i, ld_$S(pre, i) + ld_$S(bias, i % cols));
		st_$S(h, i, fleet_gelu1(ld_$S(pre, i)));
	}
}

// fleet_gelu_backward_$S: dx[i] = dy[i]*gelu'(x[i]); dx may alias dy.
__kernel void fleet_gelu_backward_$S(BUF(t_$S, dx), BUF(t_$S, x), BUF(t_$S, dy), long n) {
	AT(t_$S, dx);
	AT(t_$S, x);
	AT(t_$S, dy);
	FLEET_FOR_EACH(i, n) {
		st_$S(dx, i, fleet_gelu_grad1(ld_$S(x, i), ld_$S(dy, i)));
	}
}
//@end

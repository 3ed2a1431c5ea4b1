// fleet_adamw_f32: one AdamW step (PyTorch's, with bias correction and
// decoupled weight decay) on n F32 parameters, in place, with the
// gradient g = grad * gradScale[0] when gradScale is given (the clip
// coefficient, computed on the device); a gradScale that is not finite
// skips the step, leaving param, m and v as they are:
//   m = b1*m + c1*g,  v = b2*v + c2*g^2,
//   w = w*decay - stepSize * m / (sqrt(v)*invBC2Sqrt + eps),
// with the per-step constants folded on the host exactly as the CPU
// backend does: c1 = 1-b1, c2 = 1-b2, invBC2Sqrt = 1/sqrt(1-b2^t),
// decay = 1 - lr*wd, stepSize = lr/(1-b1^t); elements from decayEnd on
// (where it is positive) take decay = 1, no weight decay. Where sched is
// given (three floats on the device, from fleet_scaler_coef_f32: lr,
// stepSize, invBC2Sqrt), they replace the host's, and decay = 1 - lr*wd.
// Where half is given, each updated parameter is also written there
// rounded to bf16 (a copy for the products to read; left as it is when the
// step is skipped).
// Memory traffic: param, m and v
// read and written once, grad read once. Launch: 1-D blocks of 256 threads,
// grid min(ceil(n/256), 8 per SM), grid-stride loop.
// fleet_adamw_elem updates element i of the parameters (its weight w, its
// moments m and v, from its gradient g before the scale): the one update
// both of fleet_adamw_f32's loops apply.
__device__ __forceinline__ void fleet_adamw_elem(float &w, float &m, float &v, float g, long long i, float scale, float b1, float c1, float b2, float c2,
	float invBC2Sqrt, float eps, float decay, float stepSize, long long decayEnd) {
	g *= scale;
	float mi = b1 * m + c1 * g;
	float vi = b2 * v + c2 * g * g;
	m = mi;
	v = vi;
	float denom = sqrtf(vi) * invBC2Sqrt + eps;
	float d = decayEnd > 0 && i >= decayEnd ? 1.0f : decay;
	w = w * d - stepSize * (mi / denom);
}

extern "C" __global__ void fleet_adamw_f32(float *__restrict__ param, const float *__restrict__ grad, float *__restrict__ m, float *__restrict__ v,
	const float *__restrict__ gradScale, float b1, float c1, float b2, float c2, float invBC2Sqrt, float eps, float decay, float stepSize,
	long long decayEnd, long long n, const float *__restrict__ sched, float wd, unsigned short *__restrict__ half) {
	float scale = gradScale ? gradScale[0] : 1.0f;
	if (!isfinite(scale)) {
		return;
	}
	if (sched != 0) {
		decay = __fsub_rn(1.0f, __fmul_rn(sched[0], wd));
		stepSize = sched[1];
		invBC2Sqrt = sched[2];
	}
	if (fleet_vec4(n, param, grad, m, v)) { // 16-byte accesses (the packed buffers)
		long long n4 = n >> 2;
		FLEET_FOR_EACH(q, n4) {
			float4 pw = ((float4 *)param)[q], pg = ((const float4 *)grad)[q], pm = ((float4 *)m)[q], pv = ((float4 *)v)[q];
			float *w4 = &pw.x, *g4 = &pg.x, *m4 = &pm.x, *v4 = &pv.x;
			for (int k = 0; k < 4; k++) {
				fleet_adamw_elem(w4[k], m4[k], v4[k], g4[k], 4 * q + k, scale, b1, c1, b2, c2, invBC2Sqrt, eps, decay, stepSize, decayEnd);
				if (half != 0) {
					half[4 * q + k] = fleet_f32_to_bf16(w4[k]);
				}
			}
			((float4 *)param)[q] = pw, ((float4 *)m)[q] = pm, ((float4 *)v)[q] = pv;
		}
		return;
	}
	FLEET_FOR_EACH(i, n) {
		fleet_adamw_elem(param[i], m[i], v[i], grad[i], i, scale, b1, c1, b2, c2, invBC2Sqrt, eps, decay, stepSize, decayEnd);
		if (half != 0) {
			half[i] = fleet_f32_to_bf16(param[i]);
		}
	}
}

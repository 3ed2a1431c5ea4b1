// fleet_adamw_f32: one AdamW step on n F32 parameters, in place, as
// adamw.cu (see there for the constants folded on the host): with the
// gradient g = grad * gradScale[0] where gradScale is given (a scale that
// is not finite skips the step),
//   m = b1*m + c1*g,  v = b2*v + c2*g^2,
//   w = w*decay - stepSize * m / (sqrt(v)*invBC2Sqrt + eps),
// elements from decayEnd on (where it is positive) with decay 1; sched,
// where given, replaces lr (decay = 1 - lr*wd), stepSize and invBC2Sqrt
// with three floats on the device; half, where given, gets each updated
// parameter rounded to bf16. Launch: 1-D work-groups of 256, any grid.
__kernel void fleet_adamw_f32(BUF(float, param), BUF(float, grad), BUF(float, m), BUF(float, v), BUF(float, gradScale),
	float b1, float c1, float b2, float c2, float invBC2Sqrt, float eps, float decay, float stepSize, long decayEnd, long n,
	BUF(float, sched), float wd, BUF(ushort, half_)) {
	AT(float, param);
	AT(float, grad);
	AT(float, m);
	AT(float, v);
	AT(float, gradScale);
	AT(float, sched);
	AT(ushort, half_);
	float scale = gradScale != 0 ? gradScale[0] : 1.0f;
	if (!isfinite(scale)) {
		return;
	}
	if (sched != 0) {
		decay = 1.0f - sched[0] * wd;
		stepSize = sched[1];
		invBC2Sqrt = sched[2];
	}
	FLEET_FOR_EACH(i, n) {
		float g = grad[i] * scale;
		float mi = b1 * m[i] + c1 * g;
		float vi = b2 * v[i] + c2 * g * g;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrt(vi) * invBC2Sqrt + eps;
		float d = decayEnd > 0 && i >= decayEnd ? 1.0f : decay;
		float w = param[i] * d - stepSize * (mi / denom);
		param[i] = w;
		if (half_ != 0) {
			half_[i] = fleet_f32_to_bf16(w);
		}
	}
}

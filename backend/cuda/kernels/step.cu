// The trainer's per-step bookkeeping, kept on the device so that a step
// reads nothing back: the running loss, the first steps whose loss or
// gradients were not finite, the gradient norm and the clip coefficient.
// stats is F32 [4]: [0] the loss summed since the host last read it, [1]
// the first step whose loss was not finite (-1: none), [2] the last
// gradient norm, [3] the first step whose gradients were not finite (-1:
// none). Steps are exact as F32 below 2^24.

// fleet_track_loss_f32: stats[0] += x[0] * scale, and stats[1] = step the
// first time x[0] is not finite. Launch: one block of one thread.
extern "C" __global__ void fleet_track_loss_f32(float *__restrict__ stats, const float *__restrict__ x, float scale, int step) {
	float v = x[0];
	stats[0] += v * scale;
	if (!isfinite(v) && stats[1] < 0.0f) {
		stats[1] = (float)step;
	}
}

// fleet_clip_coef_f32: the gradient norm from its sum of squares, and the
// coefficient that clips it to maxNorm (in double, as the host did):
// norm = sqrt(sumsq[0]); coef[0] = maxNorm / (norm + 1e-6) where maxNorm
// > 0 and norm > maxNorm, else 1. Where the norm is not finite, coef[0] is
// the norm (the AdamW kernel then skips the step) and stats[3] = step the
// first time. stats[2] = norm. Launch: one block of one thread.
extern "C" __global__ void fleet_clip_coef_f32(float *__restrict__ coef, float *__restrict__ stats, const float *__restrict__ sumsq, double maxNorm, int step) {
	double norm = sqrt((double)sumsq[0]);
	stats[2] = (float)norm;
	if (!isfinite(norm)) {
		coef[0] = (float)norm;
		if (stats[3] < 0.0f) {
			stats[3] = (float)step;
		}
		return;
	}
	coef[0] = (maxNorm > 0.0 && norm > maxNorm) ? (float)(maxNorm / (norm + 1e-6)) : 1.0f;
}

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
	if (step < 0) {
		step = (int)stats[4]; // a replayed step's number, from its clock
	}
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
	if (step < 0) {
		step = (int)stats[4];
	}
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

// fleet_pow_int is b^t by repeated squaring, in double: the same
// multiplications in the same order as the CPU backend's powInt, so both
// devices fold AdamW's bias corrections to the same bits.
__device__ __forceinline__ double fleet_pow_int(double b, long long t) {
	double r = 1.0;
	while (t > 0) {
		if (t & 1) {
			r = __dmul_rn(r, b);
		}
		b = __dmul_rn(b, b);
		t >>= 1;
	}
	return r;
}

// fleet_adam_sched writes update t's learning rate lrs[min(pos, nlr-1)]
// and AdamW's constants lr/(1-b1^t), 1/sqrt(1-b2^t) into sched[0..2]: the
// schedule fleet_scaler_coef_f32 and fleet_step_clock_f32 both write.
__device__ __forceinline__ void fleet_adam_sched(float *sched, const float *lrs, int nlr, int pos, long long t, float b1, float b2) {
	float lr = lrs[pos < nlr ? pos : nlr - 1];
	double bc1 = 1.0 - fleet_pow_int((double)b1, t);
	double bc2 = 1.0 - fleet_pow_int((double)b2, t);
	sched[0] = lr;
	sched[1] = (float)((double)lr / bc1);
	sched[2] = (float)(1.0 / sqrt(bc2));
}

// fleet_scaler_coef_f32: fp16's dynamic loss scaling and the clip, on the
// device (backend.Scaler, backend.Backend.ScalerCoef). state: scale,
// growth tracker, skipped steps, backward seed, lr, stepSize, invBC2Sqrt,
// AdamW steps. The norm of the unscaled gradients is
// sqrt(sumsq[0])/scale, in double, into stats[2]. Not finite: coef[0] =
// norm (AdamW skips), the scale halves, the tracker restarts, skipped
// counts one. Finite: coef[0] = clip/scale (clip as fleet_clip_coef_f32),
// the tracker counts one and at growthInterval doubles the scale (unless
// that overflows) and restarts; the step takes the learning rate
// lrs[min(step - skipped, nlr-1)], t = step - skipped + 1, and its AdamW
// constants stepSize = lr/(1-b1^t), invBC2Sqrt = 1/sqrt(1-b2^t). Last,
// seed = scale*seedFactor. Launch: one block of one thread.
extern "C" __global__ void fleet_scaler_coef_f32(float *__restrict__ coef, float *__restrict__ stats, const float *__restrict__ sumsq,
	float *__restrict__ state, const float *__restrict__ lrs, double maxNorm, int step, int nlr, int growthInterval, float seedFactor, float b1, float b2) {
	if (step < 0) {
		step = (int)stats[4] - 1;
	}
	float scale = state[0];
	double norm = sqrt((double)sumsq[0]) / (double)scale;
	stats[2] = (float)norm;
	if (!isfinite(norm)) {
		coef[0] = (float)norm;
		state[0] = scale * 0.5f;
		state[1] = 0.0f;
		state[2] = state[2] + 1.0f;
	} else {
		double k = (maxNorm > 0.0 && norm > maxNorm) ? maxNorm / (norm + 1e-6) : 1.0;
		coef[0] = (float)(k / (double)scale);
		float tracker = state[1] + 1.0f;
		if ((int)tracker == growthInterval) {
			float g = scale * 2.0f;
			if (isfinite(g)) {
				state[0] = g;
			}
			tracker = 0.0f;
		}
		state[1] = tracker;
		int pos = step - (int)state[2];
		if (pos < 0) {
			pos = 0;
		}
		long long t = (long long)pos + 1;
		fleet_adam_sched(state + 4, lrs, nlr, pos, t, b1, b2);
		state[7] = (float)t;
	}
	state[3] = state[0] * seedFactor;
}

// fleet_step_clock_f32: the start of a step replayed from a graph
// (backend.Backend.StepClock): i = stats[4], stats[4] = i+1, and unless
// sched is null, AdamW's constants for update t = i+1 at lr =
// lrs[min(i, nlr-1)]: sched = lr, lr/(1-b1^t), 1/sqrt(1-b2^t), the powers
// as fleet_scaler_coef_f32 takes them. Launch: one block of one thread.
extern "C" __global__ void fleet_step_clock_f32(float *__restrict__ stats, float *__restrict__ sched, const float *__restrict__ lrs, int nlr, float b1, float b2) {
	int i = (int)stats[4];
	stats[4] = (float)(i + 1);
	if (sched == 0) {
		return;
	}
	fleet_adam_sched(sched, lrs, nlr, i < 0 ? 0 : i, (long long)i + 1, b1, b2);
}

// fleet_splitmix is SplitMix64's output function (rng.Mix64).
__device__ __forceinline__ unsigned long long fleet_splitmix(unsigned long long z) {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

// fleet_step_dropout_key_f32: the dropout key of a step replayed from a
// graph (backend.Backend.StepDropoutKey): with i = stats[4]-1, key[0],
// key[1] = the low and high halves of backend.DropoutKey(seed, i) =
// rng.Mix(seed, 0xd0, i). Launch: one block of one thread.
extern "C" __global__ void fleet_step_dropout_key_f32(int *__restrict__ key, const float *__restrict__ stats, long long seed) {
	long long i = (long long)stats[4] - 1;
	unsigned long long w[3] = {(unsigned long long)seed, 0xd0ull, (unsigned long long)i};
	unsigned long long h = 0x243f6a8885a308d3ull;
	for (int k = 0; k < 3; k++) {
		h = fleet_splitmix(h ^ fleet_splitmix(w[k] + 0x9e3779b97f4a7c15ull));
	}
	key[0] = (int)(unsigned int)h;
	key[1] = (int)(unsigned int)(h >> 32);
}

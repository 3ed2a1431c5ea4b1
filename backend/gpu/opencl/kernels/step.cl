// The trainer's per-step bookkeeping on the device, as step.cu (see there
// and backend.Backend's TrackLoss, ClipCoef, ScalerCoef, StepClock and
// StepDropoutKey): stats is F32 [4] or [5]: the loss summed since the host
// last read it, the first step whose loss was not finite (-1: none), the
// last gradient norm, the first step whose gradients were not finite, and
// a replayed step's clock. Every kernel runs as one work-group of one
// work-item.
//
// The norm and AdamW's bias corrections are computed in double, as the
// host computes them, where the device has doubles (cl_khr_fp64); a device
// without them computes in float, which may differ from the CPU in the
// last bits. A double parameter travels as its 64 bits either way.

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double fleet_wide;
inline fleet_wide fleet_wide_bits(double d) { return d; }
#define FLEET_WIDE_PARAM double
#else
typedef float fleet_wide;
#define FLEET_WIDE_PARAM ulong
// fleet_wide_bits narrows a double, given by its bits, to the nearest float.
inline float fleet_wide_bits(ulong b) {
	int e = (int)((b >> 52) & 0x7ff);
	ulong man = b & ((1ul << 52) - 1);
	float s = (b >> 63) != 0 ? -1.0f : 1.0f;
	if (e == 0x7ff) {
		return man != 0 ? as_float(0x7fc00000u) : s * as_float(0x7f800000u);
	}
	if (e == 0) {
		return s * 0.0f;
	}
	return s * ldexp((float)(man | (1ul << 52)), e - 1075);
}
#endif

// fleet_track_loss_f32: stats[0] += x[0] * scale, and stats[1] = step the
// first time x[0] is not finite (a negative step: the clock's).
__kernel void fleet_track_loss_f32(BUF(float, stats), BUF(float, x), float scale, int step) {
	AT(float, stats);
	AT(float, x);
	if (step < 0) {
		step = (int)stats[4];
	}
	float v = x[0];
	stats[0] += v * scale;
	if (!isfinite(v) && stats[1] < 0.0f) {
		stats[1] = (float)step;
	}
}

// fleet_clip_coef_f32: norm = sqrt(sumsq[0]) into stats[2]; coef[0] =
// maxNorm / (norm + 1e-6) where maxNorm > 0 and norm > maxNorm, else 1;
// a norm that is not finite goes into coef[0] (AdamW then skips) and
// stats[3] = step the first time.
__kernel void fleet_clip_coef_f32(BUF(float, coef), BUF(float, stats), BUF(float, sumsq), FLEET_WIDE_PARAM maxNormArg, int step) {
	AT(float, coef);
	AT(float, stats);
	AT(float, sumsq);
	fleet_wide maxNorm = fleet_wide_bits(maxNormArg);
	if (step < 0) {
		step = (int)stats[4];
	}
	fleet_wide norm = sqrt((fleet_wide)sumsq[0]);
	stats[2] = (float)norm;
	if (!isfinite(norm)) {
		coef[0] = (float)norm;
		if (stats[3] < 0.0f) {
			stats[3] = (float)step;
		}
		return;
	}
	coef[0] = (maxNorm > 0 && norm > maxNorm) ? (float)(maxNorm / (norm + (fleet_wide)1e-6)) : 1.0f;
}

// fleet_pow_int is b^t by repeated squaring: the same multiplications in
// the same order as the CPU backend's powInt.
inline fleet_wide fleet_pow_int(fleet_wide b, long t) {
	fleet_wide r = 1;
	while (t > 0) {
		if ((t & 1) != 0) {
			r = r * b;
		}
		b = b * b;
		t >>= 1;
	}
	return r;
}

// fleet_adam_sched writes update t's learning rate lrs[min(pos, nlr-1)]
// and AdamW's constants lr/(1-b1^t), 1/sqrt(1-b2^t) into sched[0..2].
inline void fleet_adam_sched(__global float *sched, __global float *lrs, int nlr, int pos, long t, float b1, float b2) {
	float lr = lrs[pos < nlr ? pos : nlr - 1];
	fleet_wide bc1 = 1 - fleet_pow_int((fleet_wide)b1, t);
	fleet_wide bc2 = 1 - fleet_pow_int((fleet_wide)b2, t);
	sched[0] = lr;
	sched[1] = (float)((fleet_wide)lr / bc1);
	sched[2] = (float)(1 / sqrt(bc2));
}

// fleet_scaler_coef_f32: fp16's dynamic loss scaling and the clip
// (backend.Backend.ScalerCoef), with the scaler's state on the device.
__kernel void fleet_scaler_coef_f32(BUF(float, coef), BUF(float, stats), BUF(float, sumsq), BUF(float, state), BUF(float, lrs),
	FLEET_WIDE_PARAM maxNormArg, int step, int nlr, int growthInterval, float seedFactor, float b1, float b2) {
	AT(float, coef);
	AT(float, stats);
	AT(float, sumsq);
	AT(float, state);
	AT(float, lrs);
	fleet_wide maxNorm = fleet_wide_bits(maxNormArg);
	if (step < 0) {
		step = (int)stats[4] - 1;
	}
	float scale = state[0];
	fleet_wide norm = sqrt((fleet_wide)sumsq[0]) / (fleet_wide)scale;
	stats[2] = (float)norm;
	if (!isfinite(norm)) {
		coef[0] = (float)norm;
		state[0] = scale * 0.5f;
		state[1] = 0.0f;
		state[2] = state[2] + 1.0f;
	} else {
		fleet_wide k = (maxNorm > 0 && norm > maxNorm) ? maxNorm / (norm + (fleet_wide)1e-6) : 1;
		coef[0] = (float)(k / (fleet_wide)scale);
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
		long t = (long)pos + 1;
		fleet_adam_sched(state + 4, lrs, nlr, pos, t, b1, b2);
		state[7] = (float)t;
	}
	state[3] = state[0] * seedFactor;
}

// fleet_step_clock_f32: the start of a step replayed from a graph: i =
// stats[4], stats[4] = i+1, and unless sched is null, AdamW's constants
// for update t = i+1 at lr = lrs[min(i, nlr-1)].
__kernel void fleet_step_clock_f32(BUF(float, stats), BUF(float, sched), BUF(float, lrs), int nlr, float b1, float b2) {
	AT(float, stats);
	AT(float, sched);
	AT(float, lrs);
	int i = (int)stats[4];
	stats[4] = (float)(i + 1);
	if (sched == 0) {
		return;
	}
	fleet_adam_sched(sched, lrs, nlr, i < 0 ? 0 : i, (long)i + 1, b1, b2);
}

// fleet_splitmix is SplitMix64's output function (rng.Mix64).
inline ulong fleet_splitmix(ulong z) {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
	return z ^ (z >> 31);
}

// fleet_step_dropout_key_f32: key[0], key[1] = the low and high halves of
// backend.DropoutKey(seed, i), i = stats[4]-1.
__kernel void fleet_step_dropout_key_f32(BUF(int, key), BUF(float, stats), long seed) {
	AT(int, key);
	AT(float, stats);
	long i = (long)stats[4] - 1;
	ulong w[3] = {(ulong)seed, 0xd0ul, (ulong)i};
	ulong h = 0x243f6a8885a308d3ul;
	for (int k = 0; k < 3; k++) {
		h = fleet_splitmix(h ^ fleet_splitmix(w[k] + 0x9e3779b97f4a7c15ul));
	}
	key[0] = (int)(uint)h;
	key[1] = (int)(uint)(h >> 32);
}

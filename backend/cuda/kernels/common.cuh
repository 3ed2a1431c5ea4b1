// Helpers shared by every kernel. Plain CUDA C: it builds under NVRTC and
// under the emulation prelude alike.

// bf16 and fp16 travel as unsigned short bit patterns.
__device__ __forceinline__ float fleet_bf16_to_f32(unsigned short h) {
	return __uint_as_float(((unsigned int)h) << 16);
}

// fleet_f32_to_bf16 rounds to nearest even; NaN stays a quiet NaN.
__device__ __forceinline__ unsigned short fleet_f32_to_bf16(float f) {
	unsigned int u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		return (unsigned short)((u >> 16) | 0x40u);
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	return (unsigned short)(u >> 16);
}

// fleet_warp_sum returns the sum of v over the 32 lanes of a full warp.
__device__ __forceinline__ float fleet_warp_sum(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v += __shfl_xor_sync(0xffffffffu, v, o);
	}
	return v;
}

// fleet_warp_max returns the maximum of v over the 32 lanes of a full warp.
__device__ __forceinline__ float fleet_warp_max(float v) {
	for (int o = 16; o > 0; o >>= 1) {
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	}
	return v;
}

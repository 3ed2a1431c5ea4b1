// Casts between storage types: fleet_cast_<from>_<to>, dst[i] = src[i]
// converted. Floats narrow with round to nearest even (NaN stays a quiet
// NaN, overflow gives infinity, F16 keeps subnormals) and widen exactly,
// bit for bit as backend.F32ToBF16, F32ToF16, BF16ToF32 and F16ToF32;
// BF16<->F16 goes through F32, I32 converts to the nearest float. Copies
// between equal types are a memcpy, not a kernel. Memory traffic: one read
// and one write per element. Launch: 1-D blocks of 256 threads, grid
// min(ceil(n/256), 8 per SM), grid-stride loop.
template <class D, class S>
__device__ __forceinline__ void fleet_cast_impl(typename D::T *__restrict__ dst, const typename S::T *__restrict__ src, long long n) {
	FLEET_FOR_EACH(i, n) {
		D::st(dst, i, S::ld(src, i));
	}
}

extern "C" __global__ void fleet_cast_f32_bf16(unsigned short *__restrict__ dst, const float *__restrict__ src, long long n) { fleet_cast_impl<fleet_bf16, fleet_f32>(dst, src, n); }
extern "C" __global__ void fleet_cast_f32_f16(unsigned short *__restrict__ dst, const float *__restrict__ src, long long n) { fleet_cast_impl<fleet_f16, fleet_f32>(dst, src, n); }
extern "C" __global__ void fleet_cast_bf16_f32(float *__restrict__ dst, const unsigned short *__restrict__ src, long long n) { fleet_cast_impl<fleet_f32, fleet_bf16>(dst, src, n); }
extern "C" __global__ void fleet_cast_bf16_f16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, long long n) { fleet_cast_impl<fleet_f16, fleet_bf16>(dst, src, n); }
extern "C" __global__ void fleet_cast_f16_f32(float *__restrict__ dst, const unsigned short *__restrict__ src, long long n) { fleet_cast_impl<fleet_f32, fleet_f16>(dst, src, n); }
extern "C" __global__ void fleet_cast_f16_bf16(unsigned short *__restrict__ dst, const unsigned short *__restrict__ src, long long n) { fleet_cast_impl<fleet_bf16, fleet_f16>(dst, src, n); }
extern "C" __global__ void fleet_cast_i32_f32(float *__restrict__ dst, const int *__restrict__ src, long long n) { fleet_cast_impl<fleet_f32, fleet_i32>(dst, src, n); }
extern "C" __global__ void fleet_cast_i32_bf16(unsigned short *__restrict__ dst, const int *__restrict__ src, long long n) { fleet_cast_impl<fleet_bf16, fleet_i32>(dst, src, n); }
extern "C" __global__ void fleet_cast_i32_f16(unsigned short *__restrict__ dst, const int *__restrict__ src, long long n) { fleet_cast_impl<fleet_f16, fleet_i32>(dst, src, n); }

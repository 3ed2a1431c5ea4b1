// Probes of the warp-level matrix primitives (mma.cuh), for their tests:
// one warp multiplies a 16x16 tile of A by a 16x8 tile of B, loading both
// from global memory into shared memory with cp.async and from there into
// fragments with ldmatrix, and writes D = A·B + C.

// fleet_probe_mma_<t>: a [16x16] row-major, b [16x8] row-major (k x n),
// c and d [16x8] row-major f32; a and b are b16 (bf16 or f16). One block of
// 32 threads. B is loaded with ldmatrix.trans: stored k-major, the
// transposed load gives the column fragments the product wants.
// (The shared tiles are the kernels' own: a template's static would be one
// object across every emulator module of the process.)
template <bool BF16>
__device__ __forceinline__ void fleet_probe_mma(float *__restrict__ d, const unsigned short *__restrict__ a, const unsigned short *__restrict__ b,
	const float *__restrict__ c, unsigned short *sa, unsigned short *sb) {
	int lane = threadIdx.x;
	// 512 bytes of A and 256 of B, 16 bytes a copy: lanes copy A's 32
	// pieces, then the first 16 lanes B's.
	fleet_cp_async16(sa + 8 * lane, a + 8 * lane);
	if (lane < 16) {
		fleet_cp_async16(sb + 8 * lane, b + 8 * lane);
	}
	fleet_cp_async_commit();
	fleet_cp_async_wait<0>();
	__syncthreads();
	// A's four 8x8 matrices: (rows 0-7, k 0-7), (rows 8-15, k 0-7),
	// (rows 0-7, k 8-15), (rows 8-15, k 8-15): a[0..3] in mma's order.
	unsigned fa[4], fb[4];
	int m = lane / 8, r = lane % 8;
	fleet_ldmatrix_x4(fa, sa + ((m & 1) * 8 + r) * 16 + (m >> 1) * 8);
	// B (k x n, 16x8) as two 8x8 matrices (k 0-7, k 8-15), transposed:
	// b[0] and b[1]; lanes 16-31 repeat them.
	fleet_ldmatrix_x4_trans(fb, sb + ((m & 1) * 8 + r) * 8);
	float cc[4], dd[4];
	int g = lane / 4, t = lane % 4;
	cc[0] = c[g * 8 + 2 * t], cc[1] = c[g * 8 + 2 * t + 1], cc[2] = c[(g + 8) * 8 + 2 * t], cc[3] = c[(g + 8) * 8 + 2 * t + 1];
	unsigned bb[2] = {fb[0], fb[1]};
	if (BF16) {
		fleet_mma_bf16(dd, fa, bb, cc);
	} else {
		fleet_mma_f16(dd, fa, bb, cc);
	}
	d[g * 8 + 2 * t] = dd[0], d[g * 8 + 2 * t + 1] = dd[1], d[(g + 8) * 8 + 2 * t] = dd[2], d[(g + 8) * 8 + 2 * t + 1] = dd[3];
}

extern "C" __global__ void fleet_probe_mma_bf16(float *__restrict__ d, const unsigned short *__restrict__ a, const unsigned short *__restrict__ b,
	const float *__restrict__ c) {
	__shared__ __align__(16) unsigned short sa[16 * 16];
	__shared__ __align__(16) unsigned short sb[16 * 8];
	fleet_probe_mma<true>(d, a, b, c, sa, sb);
}
extern "C" __global__ void fleet_probe_mma_f16(float *__restrict__ d, const unsigned short *__restrict__ a, const unsigned short *__restrict__ b,
	const float *__restrict__ c) {
	__shared__ __align__(16) unsigned short sa[16 * 16];
	__shared__ __align__(16) unsigned short sb[16 * 8];
	fleet_probe_mma<false>(d, a, b, c, sa, sb);
}

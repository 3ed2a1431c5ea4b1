// Probes of the fragment layouts the emulated warp-level primitives
// (mma.cuh) implement, for TestFragmentLayoutTable: each lane hands in its
// fragment registers as given and writes back what the primitive returned
// to it, so the test alone decides, from its own table, what goes where.

// fleet_probe_frag_mma: one warp; lane L's A registers are a[4L..4L+3],
// its B registers b[2L..2L+1]; C is zero; d[4L..4L+3] gets its D
// registers.
extern "C" __global__ void fleet_probe_frag_mma(float *__restrict__ d, const unsigned int *__restrict__ a, const unsigned int *__restrict__ b) {
	int lane = threadIdx.x & 31;
	unsigned ar[4] = {a[4 * lane], a[4 * lane + 1], a[4 * lane + 2], a[4 * lane + 3]};
	unsigned br[2] = {b[2 * lane], b[2 * lane + 1]};
	float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, dd[4];
	fleet_mma_bf16(dd, ar, br, c);
	for (int i = 0; i < 4; i++) {
		d[4 * lane + i] = dd[i];
	}
}

// fleet_probe_frag_ldmatrix: one warp; tile holds four 8x8 b16 matrices,
// matrix m's row r at tile[64m + 8r]; lane L gives the address of row L%8
// of matrix L/8 (the PTX ISA's rule for .x4), and out[4L+j] gets register
// j of ldmatrix (.trans where trans is not 0).
extern "C" __global__ void fleet_probe_frag_ldmatrix(unsigned int *__restrict__ out, const unsigned short *__restrict__ tile, int trans) {
	__shared__ __align__(16) unsigned short s[4 * 64];
	int lane = threadIdx.x & 31;
	for (int i = lane; i < 4 * 64; i += 32) {
		s[i] = tile[i];
	}
	__syncthreads();
	const unsigned short *row = s + 64 * (lane / 8) + 8 * (lane % 8);
	unsigned r[4];
	if (trans) {
		fleet_ldmatrix_x4_trans(r, row);
	} else {
		fleet_ldmatrix_x4(r, row);
	}
	for (int j = 0; j < 4; j++) {
		out[4 * lane + j] = r[j];
	}
}

// Warp-level matrix primitives: the tensor-core product mma.sync
// m16n8k16 (bf16 or f16 operands, f32 accumulation), ldmatrix (four 8x8
// b16 matrices, plain and transposed) and cp.async (16 bytes, global to
// shared) with commit and wait. Kernels call these small inline functions;
// under NVRTC they are inline PTX. Under the emulator each is a
// warp-collective implementation with the PTX ISA's fragment layouts
// (which lane holds which element), so a kernel that indexes a fragment
// wrongly computes the wrong thing in emulation too.
//
// Fragment layouts (g = lane / 4, t = lane % 4; a 32-bit register holds
// two 16-bit values, the lower column or row in its low half):
//   A, 16x16 row-major: a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..2t+1],
//     a[2] = A[g][2t+8..2t+9], a[3] = A[g+8][2t+8..2t+9].
//   B, 16x8 (k x n): b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g].
//   C and D, 16x8 f32: c[0..1] = C[g][2t..2t+1], c[2..3] = C[g+8][2t..2t+1].
//   ldmatrix .x4: lane i gives the address of row i % 8 of matrix i / 8;
//     r[j] = matrix j's row lane/4, columns 2(lane%4)..+1; with .trans,
//     rows 2(lane%4)..+1 of column lane/4 (the transposed matrix's row).

#ifdef FLEET_NVRTC

// fleet_mma_bf16 is D = A·B + C for one warp's 16x8x16 tile, bf16 operands.
__device__ __forceinline__ void fleet_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
		: "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// fleet_mma_f16 is fleet_mma_bf16 with f16 operands.
__device__ __forceinline__ void fleet_mma_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};\n"
		: "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
		: "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// fleet_ldmatrix_x4 loads four 8x8 b16 matrices from shared memory; row
// points at this lane's row (see the layouts above).
__device__ __forceinline__ void fleet_ldmatrix_x4(unsigned r[4], const void *row) {
	unsigned a = (unsigned)__cvta_generic_to_shared(row);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// fleet_ldmatrix_x4_trans is fleet_ldmatrix_x4, each matrix transposed.
__device__ __forceinline__ void fleet_ldmatrix_x4_trans(unsigned r[4], const void *row) {
	unsigned a = (unsigned)__cvta_generic_to_shared(row);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
}

// fleet_cp_async16 starts copying 16 bytes (both addresses 16-byte
// aligned) from global to shared memory; it lands after the wait for its
// group.
__device__ __forceinline__ void fleet_cp_async16(void *smem, const void *gmem) {
	unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}

// fleet_cp_async_commit closes this thread's group of copies.
__device__ __forceinline__ void fleet_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// fleet_cp_async_wait<N> waits until at most N of this thread's closed
// groups are still in flight (and, as ever, before other threads read the
// data, a __syncthreads).
template <int N> __device__ __forceinline__ void fleet_cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

#else // FLEET_EMU: warp-collective implementations of the same contracts

namespace fleet_mma_emu {

// b16 halves of a register, as float.
__device__ __forceinline__ float lo_bf16(unsigned r) { return fleet_bf16_to_f32((unsigned short)(r & 0xffffu)); }
__device__ __forceinline__ float hi_bf16(unsigned r) { return fleet_bf16_to_f32((unsigned short)(r >> 16)); }
__device__ __forceinline__ float lo_f16(unsigned r) { return fleet_f16_to_f32((unsigned short)(r & 0xffffu)); }
__device__ __forceinline__ float hi_f16(unsigned r) { return fleet_f16_to_f32((unsigned short)(r >> 16)); }

// The lanes of a warp trade fragments through the running block's
// exchange slots (one per thread; launches of a module run one block at a
// time): each lane writes its own, a __syncwarp makes them visible, each
// reads the ones it needs, and a second __syncwarp keeps the next call
// from overwriting a slot still being read. Two rendezvous per call, where
// gathering with shuffles would take 32.
struct slot {
	unsigned a[4], b[2];
	const void *row;
};
static slot slots[1024];

__device__ __forceinline__ int tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }

// mma gathers the two rows of A and the two columns of B this lane's
// outputs need from the lanes that hold them, then adds the products in k
// order in float.
template <bool BF16> __device__ __forceinline__ void mma(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	int me = tid(), w0 = me & ~31, lane = me & 31, g = lane >> 2, t = lane & 3;
	slot &s = slots[me];
	s.a[0] = a[0], s.a[1] = a[1], s.a[2] = a[2], s.a[3] = a[3], s.b[0] = b[0], s.b[1] = b[1];
	__syncwarp();
	float A[2][16], B[2][16];
	for (int j = 0; j < 4; j++) {
		const slot &sa = slots[w0 + g * 4 + j];
		unsigned r0 = sa.a[0], r1 = sa.a[1], r2 = sa.a[2], r3 = sa.a[3];
		A[0][2 * j] = BF16 ? lo_bf16(r0) : lo_f16(r0), A[0][2 * j + 1] = BF16 ? hi_bf16(r0) : hi_f16(r0);
		A[1][2 * j] = BF16 ? lo_bf16(r1) : lo_f16(r1), A[1][2 * j + 1] = BF16 ? hi_bf16(r1) : hi_f16(r1);
		A[0][8 + 2 * j] = BF16 ? lo_bf16(r2) : lo_f16(r2), A[0][9 + 2 * j] = BF16 ? hi_bf16(r2) : hi_f16(r2);
		A[1][8 + 2 * j] = BF16 ? lo_bf16(r3) : lo_f16(r3), A[1][9 + 2 * j] = BF16 ? hi_bf16(r3) : hi_f16(r3);
		for (int col = 0; col < 2; col++) {
			const slot &sb = slots[w0 + (2 * t + col) * 4 + j];
			unsigned s0 = sb.b[0], s1 = sb.b[1];
			B[col][2 * j] = BF16 ? lo_bf16(s0) : lo_f16(s0), B[col][2 * j + 1] = BF16 ? hi_bf16(s0) : hi_f16(s0);
			B[col][8 + 2 * j] = BF16 ? lo_bf16(s1) : lo_f16(s1), B[col][9 + 2 * j] = BF16 ? hi_bf16(s1) : hi_f16(s1);
		}
	}
	__syncwarp();
	for (int i = 0; i < 4; i++) {
		float acc = c[i];
		for (int k = 0; k < 16; k++) {
			acc += A[i >> 1][k] * B[i & 1][k];
		}
		d[i] = acc;
	}
}

// ldmatrix: each of the four registers comes from the row addresses the
// lanes of its matrix gave.
template <bool TRANS> __device__ __forceinline__ void ldmatrix(unsigned r[4], const void *row) {
	int me = tid(), w0 = me & ~31, lane = me & 31;
	slots[me].row = row;
	__syncwarp();
	for (int j = 0; j < 4; j++) {
		if (!TRANS) {
			const unsigned short *p = (const unsigned short *)slots[w0 + 8 * j + lane / 4].row;
			r[j] = (unsigned)p[2 * (lane % 4)] | ((unsigned)p[2 * (lane % 4) + 1] << 16);
		} else {
			const unsigned short *p0 = (const unsigned short *)slots[w0 + 8 * j + 2 * (lane % 4)].row;
			const unsigned short *p1 = (const unsigned short *)slots[w0 + 8 * j + 2 * (lane % 4) + 1].row;
			r[j] = (unsigned)p0[lane / 4] | ((unsigned)p1[lane / 4] << 16);
		}
	}
	__syncwarp();
}

// The copies in flight, per thread of the running block: a copy lands
// when a wait releases its group, not before, so a kernel that reads
// before waiting reads what shared memory held (poison, in the harness).
struct copy {
	void *dst;
	const void *src;
	int group;
};
const int kMaxCopies = 64;
struct pending {
	copy c[kMaxCopies];
	int n, committed;
	unsigned bx, by, bz; // the block the copies belong to
};
static pending pendings[1024];

__device__ __forceinline__ pending &mine() {
	pending &p = pendings[tid()];
	if (p.bx != blockIdx.x || p.by != blockIdx.y || p.bz != blockIdx.z) { // a new block: nothing in flight
		p.n = 0;
		p.committed = 0;
		p.bx = blockIdx.x;
		p.by = blockIdx.y;
		p.bz = blockIdx.z;
	}
	return p;
}

__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
	pending &p = mine();
	if (p.n == kMaxCopies) {
		__trap();
	}
	p.c[p.n++] = copy{smem, gmem, p.committed};
}

__device__ __forceinline__ void commit() { mine().committed++; }

// wait lands every copy of the closed groups but the newest n.
__device__ __forceinline__ void wait(int n) {
	pending &p = mine();
	int k = 0;
	for (int i = 0; i < p.n; i++) {
		if (p.c[i].group < p.committed - n) {
			memcpy(p.c[i].dst, p.c[i].src, 16);
		} else {
			p.c[k++] = p.c[i];
		}
	}
	p.n = k;
}

} // namespace fleet_mma_emu

__device__ __forceinline__ void fleet_mma_bf16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	fleet_mma_emu::mma<true>(d, a, b, c);
}
__device__ __forceinline__ void fleet_mma_f16(float d[4], const unsigned a[4], const unsigned b[2], const float c[4]) {
	fleet_mma_emu::mma<false>(d, a, b, c);
}
__device__ __forceinline__ void fleet_ldmatrix_x4(unsigned r[4], const void *row) { fleet_mma_emu::ldmatrix<false>(r, row); }
__device__ __forceinline__ void fleet_ldmatrix_x4_trans(unsigned r[4], const void *row) { fleet_mma_emu::ldmatrix<true>(r, row); }
__device__ __forceinline__ void fleet_cp_async16(void *smem, const void *gmem) { fleet_mma_emu::cp_async16(smem, gmem); }
__device__ __forceinline__ void fleet_cp_async_commit() { fleet_mma_emu::commit(); }
template <int N> __device__ __forceinline__ void fleet_cp_async_wait() { fleet_mma_emu::wait(N); }

#endif

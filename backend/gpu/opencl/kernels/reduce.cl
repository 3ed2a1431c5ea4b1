// Reductions, as reduce.cu: column sums (SumRows), row sums (SumCols) and
// the sum of squares (SumSquares). No float atomics: every sum is split by
// the operands' shape alone (never by the grid or the device), partial
// sums go to an F32 scratch buffer and a second kernel adds them in a
// fixed order, so the results repeat bit for bit. Work-groups are 1-D (or
// 2-D grids of 1-D groups) of 256 work-items, taken as 8 "warps" of 32
// consecutive work-items as the CUDA kernels' warps; the warp-level
// shuffle sums become local-memory trees that add in the order of CUDA's
// xor butterfly.

// fleet_rd_block_sum returns to every work-item the sum of v over the
// 1-D group (a multiple of 32 work-items, at most 1024), as CUDA's
// fleet_block_sum adds: each warp's sum as fleet_warp_sum, then those
// warp sums (zeros past the last warp) the same way. red as
// fleet_warp_sum.
inline float fleet_rd_block_sum(float v, __local float *red) {
	int lane = get_local_id(0) & 31, nw = get_local_size(0) >> 5;
	fleet_warp_sum(v, red);
	float u = lane < nw ? red[lane << 5] : 0.0f; // warp lane's sum, the same in every warp
	barrier(CLK_LOCAL_MEM_FENCE);
	return fleet_warp_sum(u, red); // every warp adds the warps' sums alike
}

//@for S in f32 bf16
// fleet_sumrows_partial_$S: column sums over one chunk of rows into
// part[y*cols + j] (F32), y = get_group_id(1) the chunk (rows
// [y*chunkRows, (y+1)*chunkRows)), work-group x covering the 32 columns
// from 32*get_group_id(0). Warp w adds rows w, w+W, ... of the chunk (W
// warps), its 32 lanes on 32 adjacent columns (coalesced); the warps' sums
// are then added in warp order. src read once, part written once. Launch:
// work-groups of 256, grid (ceil(cols/32), ceil(rows/chunkRows)).
__kernel void fleet_sumrows_partial_$S(BUF(float, part), BUF(t_$S, src), int rows, int cols, int chunkRows) {
	AT(float, part);
	AT(t_$S, src);
	__local float acc[32 * 32];
	int lane = get_local_id(0) & 31, warp = get_local_id(0) >> 5, nw = get_local_size(0) >> 5;
	int j = get_group_id(0) * 32 + lane;
	int r0 = get_group_id(1) * chunkRows;
	int r1 = rows - r0 < chunkRows ? rows : r0 + chunkRows;
	float s = 0.0f;
	if (j < cols) {
		for (int r = r0 + warp; r < r1; r += nw) {
			s += ld_$S(src, (long)r * cols + j);
		}
	}
	acc[warp * 32 + lane] = s;
	barrier(CLK_LOCAL_MEM_FENCE);
	if (warp == 0 && j < cols) {
		float t = 0.0f;
		for (int w = 0; w < nw; w++) {
			t += acc[w * 32 + lane];
		}
		part[(long)get_group_id(1) * cols + j] = t;
	}
}
//@end

// fleet_colsum_f32: dst[j] = beta*dst[j] + sum_p part[p*cols + j], the
// nparts partial rows added in order; beta 0 overwrites dst without
// reading it (NaN garbage there does not survive), beta 1 accumulates.
// Finishes SumRows. Launch: 1-D work-groups of 256, one work-item per
// column, any grid (grid-stride loop).
__kernel void fleet_colsum_f32(BUF(float, dst), BUF(float, part), int nparts, int cols, float beta) {
	AT(float, dst);
	AT(float, part);
	FLEET_FOR_EACH(j, cols) {
		float s = 0.0f;
		for (int p = 0; p < nparts; p++) {
			s += part[(long)p * cols + j];
		}
		dst[j] = beta == 0.0f ? s : beta * dst[j] + s;
	}
}

// fleet_sumcols_f32: dst[i] = alpha * sum_j src[i*cols + j]. One warp of
// 32 work-items per row (lane l adds columns l, l+32, ..., then the warp
// sum), grid-stride over rows; the rows loop goes in rounds of one row a
// warp, the same for the whole group, so every work-item meets every
// barrier (warps past the last row add zeros). src read once, dst written
// once. Launch: 1-D work-groups of 256 (8 rows at a time), any grid.
__kernel void fleet_sumcols_f32(BUF(float, dst), BUF(float, src), int rows, int cols, float alpha) {
	AT(float, dst);
	AT(float, src);
	__local float red[1024];
	int lane = get_local_id(0) & 31, wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		float s = 0.0f;
		if (r < rows) {
			__global float *row = src + r * cols;
			for (int j = lane; j < cols; j += 32) {
				s += row[j];
			}
		}
		s = fleet_warp_sum(s, red);
		if (r < rows && lane == 0) {
			dst[r] = alpha * s;
		}
	}
}

// fleet_sumsquares_partial_f32: part[b] = the sum of src[i]^2 over the
// elements i = b*L + t + k*G*L (L the group size, G the groups) that
// group b's work-items t visit, then added over the group in a fixed
// tree. The grid (the number of partials) is chosen from n alone, so the
// split is the same on every device. src read once. Launch: 1-D
// work-groups of 256, grid as the Go side's SumSquaresScratch.
__kernel void fleet_sumsquares_partial_f32(BUF(float, part), BUF(float, src), long n) {
	AT(float, part);
	AT(float, src);
	__local float red[1024];
	float s = 0.0f;
	FLEET_FOR_EACH(i, n) {
		float v = src[i];
		s += v * v;
	}
	s = fleet_rd_block_sum(s, red);
	if (get_local_id(0) == 0) {
		part[get_group_id(0)] = s;
	}
}

// fleet_sumsquares_finish_f32: dst[0] = beta*dst[0] + sum_p part[p] (dst
// not read where beta is 0), work-item t adding partials t, t+L, ... and
// the group summing those in a fixed tree. Launch: one work-group of 256.
__kernel void fleet_sumsquares_finish_f32(BUF(float, dst), BUF(float, part), int nparts, float beta) {
	AT(float, dst);
	AT(float, part);
	__local float red[1024];
	float s = 0.0f;
	for (int p = get_local_id(0); p < nparts; p += get_local_size(0)) {
		s += part[p];
	}
	s = fleet_rd_block_sum(s, red);
	if (get_local_id(0) == 0) {
		dst[0] = (beta == 0.0f ? 0.0f : beta * dst[0]) + s;
	}
}

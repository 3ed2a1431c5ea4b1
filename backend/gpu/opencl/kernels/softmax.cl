// Softmax over the last axis of a rows x cols matrix, as softmax.cu: F32
// or BF16 storage (suffix), float arithmetic. One "warp" of 32 consecutive
// work-items per row, grid-stride over rows. The rows loop goes in rounds
// of one row a warp, the same for the whole work-group, so every
// work-item meets every barrier (a warp past the last row reduces neutral
// values and writes nothing). CUDA's warp shuffles become local-memory
// trees that combine in the order of its xor butterfly. Launch: 1-D
// work-groups of 256 (8 rows at a time), any grid.

//@for S in f32 bf16
// fleet_softmax_$S: dst[r,j] = exp(src[r,j] - m) / sum_k exp(src[r,k] - m),
// m the row's maximum (the sum's reciprocal times each exponential).
// Lanes keep online statistics (running max, sum of exponentials rescaled
// when the max grows) in one pass, merge them over the warp, and a second
// pass writes. src read twice, dst written once; dst may not alias src.
__kernel void fleet_softmax_$S(BUF(t_$S, dst), BUF(t_$S, src), int rows, int cols) {
	AT(t_$S, dst);
	AT(t_$S, src);
	__local float redm[1024], reds[1024];
	int lane = get_local_id(0) & 31, wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		__global t_$S *x = src + r * cols;
		__global t_$S *y = dst + r * cols;
		float m = FLEET_NEG_INF, s = 0.0f;
		if (r < rows) {
			for (int j = lane; j < cols; j += 32) {
				fleet_maxsum_add(&m, &s, ld_$S(x, j));
			}
		}
		fleet_warp_maxsum(&m, &s, redm, reds);
		if (r < rows) {
			float inv = 1.0f / s;
			for (int j = lane; j < cols; j += 32) {
				st_$S(y, j, exp(ld_$S(x, j) - m) * inv);
			}
		}
	}
}

// fleet_softmax_backward_$S: dx[r,j] = y[r,j] * (dy[r,j] - sum_k y[r,k]*dy[r,k]).
// y and dy read twice, dx written once. Launch: as fleet_softmax_$S.
__kernel void fleet_softmax_backward_$S(BUF(t_$S, dx), BUF(t_$S, y), BUF(t_$S, dy), int rows, int cols) {
	AT(t_$S, dx);
	AT(t_$S, y);
	AT(t_$S, dy);
	__local float red[1024];
	int lane = get_local_id(0) & 31, wpb = get_local_size(0) >> 5;
	long step = (long)get_num_groups(0) * wpb;
	for (long base = (long)get_group_id(0) * wpb; base < rows; base += step) {
		long r = base + (get_local_id(0) >> 5);
		long o = r * cols;
		float dot = 0.0f;
		if (r < rows) {
			for (int j = lane; j < cols; j += 32) {
				dot += ld_$S(y, o + j) * ld_$S(dy, o + j);
			}
		}
		dot = fleet_warp_sum(dot, red);
		if (r < rows) {
			for (int j = lane; j < cols; j += 32) {
				st_$S(dx, o + j, ld_$S(y, o + j) * (ld_$S(dy, o + j) - dot));
			}
		}
	}
}
//@end

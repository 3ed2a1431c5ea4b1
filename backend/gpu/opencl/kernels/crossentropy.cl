// Cross-entropy over logits [n, V], as crossentropy.cu: F32 or BF16
// storage (suffix), float arithmetic, I32 targets; a target outside
// [0, V) marks a row as ignored. One work-group per row, grid-stride over
// rows (the rows loop is the same for every work-item of a group, so all
// of them meet the reduction's barriers). Launch: 1-D work-groups of 256,
// any grid (the Go side uses min(n, 8 per compute unit)). V < 2^31 - 256.

// fleet_ce_block_maxsum merges the online softmax statistics (m, s) over
// the 1-D work-group (a multiple of 32 work-items, at most 1024) and
// gives every work-item the result, in the order of CUDA's
// fleet_block_maxsum: each warp of 32 consecutive work-items merges as
// its xor butterfly does (lane l with lane l+16, then +8, ...), then the
// warps' results (neutral (-inf, 0) past the last warp) the same way.
// redm and reds are __local float scratch, one per work-item. Every
// work-item must call it; it ends with a barrier, so it may be called
// again on the same scratch.
inline void fleet_ce_block_maxsum(float *m, float *s, __local float *redm, __local float *reds) {
	int lane = get_local_id(0) & 31, nw = get_local_size(0) >> 5;
	fleet_warp_maxsum(m, s, redm, reds);
	float wm = FLEET_NEG_INF, ws = 0.0f; // warp lane's statistics, the same in every warp
	if (lane < nw) {
		wm = redm[lane << 5];
		ws = reds[lane << 5];
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	fleet_warp_maxsum(&wm, &ws, redm, reds); // every warp merges the warps' results alike
	*m = wm;
	*s = ws;
}

//@for S in f32 bf16
// fleet_crossentropy_$S: lse[r] = log sum_j exp(logits[r,j]) (as m +
// log(sum exp(x - m)), m the row's maximum) and losses[r] = lse[r] -
// logits[r, targets[r]] (0 for an ignored row). Work-items keep online
// max/sum-of-exponentials statistics over a strided share of the row,
// merged over the group in a fixed tree. logits read once, losses and lse
// written once per row.
__kernel void fleet_crossentropy_$S(BUF(float, losses), BUF(float, lse), BUF(t_$S, logits), BUF(int, targets), int n, int V) {
	AT(float, losses);
	AT(float, lse);
	AT(t_$S, logits);
	AT(int, targets);
	__local float redm[1024], reds[1024];
	int lid = get_local_id(0), ls = get_local_size(0);
	for (long r = get_group_id(0); r < n; r += get_num_groups(0)) {
		__global t_$S *x = logits + r * V;
		float m = FLEET_NEG_INF, s = 0.0f;
		for (int j = lid; j < V; j += ls) {
			fleet_maxsum_add(&m, &s, ld_$S(x, j));
		}
		fleet_ce_block_maxsum(&m, &s, redm, reds);
		if (lid == 0) {
			float z = m + log(s);
			int t = targets[r];
			lse[r] = z;
			losses[r] = (t >= 0 && t < V) ? z - ld_$S(x, t) : 0.0f;
		}
	}
}

// fleet_crossentropy_backward_$S: with g = dloss[0]*scale,
// dlogits[r,j] = exp(logits[r,j] - lse[r])*g, less g where j is the
// row's target, and a row of zeros for an ignored target. No reduction:
// work-items stride over the row. dlogits may be logits (each element is
// read, then written, by one work-item). logits read once, dlogits
// written once.
__kernel void fleet_crossentropy_backward_$S(BUF(t_$S, dlogits), BUF(t_$S, logits), BUF(float, lse), BUF(int, targets), BUF(float, dloss),
	float scale, int n, int V) {
	AT(t_$S, dlogits);
	AT(t_$S, logits);
	AT(float, lse);
	AT(int, targets);
	AT(float, dloss);
	int lid = get_local_id(0), ls = get_local_size(0);
	float g = dloss[0] * scale;
	for (long r = get_group_id(0); r < n; r += get_num_groups(0)) {
		__global t_$S *x = logits + r * V;
		__global t_$S *d = dlogits + r * V;
		int t = targets[r];
		if (t < 0 || t >= V) {
			for (int j = lid; j < V; j += ls) {
				st_$S(d, j, 0.0f);
			}
			continue;
		}
		float z = lse[r];
		for (int j = lid; j < V; j += ls) {
			float v = exp(ld_$S(x, j) - z) * g;
			if (j == t) {
				v -= g;
			}
			st_$S(d, j, v);
		}
	}
}
// fleet_crossentropy_fused_$S: the loss and its gradient in one launch,
// as crossentropy.cu's fleet_crossentropy_fused: losses[r] as
// fleet_crossentropy_$S writes it, then dlogits[r,j] as
// fleet_crossentropy_backward_$S writes it from that row's log-sum-exp,
// g = dloss[0]*scale. dlogits may be logits: the target's logit is read
// by work-item 0 before the group's reduction. A group sweeps its row
// once for the statistics and once for the gradient (the second from
// cache): logits read once, dlogits written once, losses once per row.
__kernel void fleet_crossentropy_fused_$S(BUF(float, losses), BUF(t_$S, dlogits), BUF(t_$S, logits), BUF(int, targets), BUF(float, dloss),
	float scale, int n, int V) {
	AT(float, losses);
	AT(t_$S, dlogits);
	AT(t_$S, logits);
	AT(int, targets);
	AT(float, dloss);
	__local float redm[1024], reds[1024];
	int lid = get_local_id(0), ls = get_local_size(0);
	float g = dloss[0] * scale;
	for (long r = get_group_id(0); r < n; r += get_num_groups(0)) {
		__global t_$S *x = logits + r * V;
		__global t_$S *d = dlogits + r * V;
		int t = targets[r];
		int keep = t >= 0 && t < V;
		float xt = (lid == 0 && keep) ? ld_$S(x, t) : 0.0f;
		float m = FLEET_NEG_INF, s = 0.0f;
		for (int j = lid; j < V; j += ls) {
			fleet_maxsum_add(&m, &s, ld_$S(x, j));
		}
		fleet_ce_block_maxsum(&m, &s, redm, reds); // every work-item has passed its reads of the row
		float z = m + log(s);
		if (lid == 0) {
			losses[r] = keep ? z - xt : 0.0f;
		}
		if (!keep) {
			for (int j = lid; j < V; j += ls) {
				st_$S(d, j, 0.0f);
			}
			continue;
		}
		for (int j = lid; j < V; j += ls) {
			float v = exp(ld_$S(x, j) - z) * g;
			if (j == t) {
				v -= g;
			}
			st_$S(d, j, v);
		}
	}
}
//@end

// Token embeddings, as embedding.cu. The table and its gradient are always
// F32 (a master weight); ids are I32; the activations (out, dout) are F32
// or BF16 (suffix _f32, _bf16). An id outside [0, vocab) never indexes the
// table.

#define EMB_CHUNK 256 // ids per local-memory chunk in the backward kernel

//@for S in f32 bf16
// fleet_embedding_$S: out[i, :] = table[ids[i], :], rows dim wide, out
// rounded to nearest even for BF16; a row whose id is outside [0, vocab)
// is written as zeros. Work-group x takes tokens x, x + groups, ...; its
// work-items stride over the row. Launch: 1-D work-groups of 256, any
// number of them (ops.go: min(n, 8 per compute unit)).
__kernel void fleet_embedding_$S(BUF(t_$S, out), BUF(float, table), BUF(int, ids), int n, int dim, int vocab) {
	AT(t_$S, out);
	AT(float, table);
	AT(int, ids);
	for (long i = get_group_id(0); i < n; i += get_num_groups(0)) {
		int id = ids[i];
		__global t_$S *o = out + i * dim;
		if (id < 0 || id >= vocab) {
			for (int j = get_local_id(0); j < dim; j += get_local_size(0)) {
				st_$S(o, j, 0.0f);
			}
			continue;
		}
		__global const float *t = table + (long)id * dim;
		for (int j = get_local_id(0); j < dim; j += get_local_size(0)) {
			st_$S(o, j, t[j]);
		}
	}
}

// fleet_embedding_backward_$S: dtable[ids[i], :] += dout[i, :] for
// i = 0, 1, ..., n-1 in token order; ids outside [0, vocab) are skipped.
// No atomics: work-item t of work-group (x, y) owns column
// j = x*local_size + t of the rows whose id has id % groups_y == y (the
// work-group's bucket), and adds its tokens in order, so every element of
// dtable gets the same sums in the same order whatever the launch (equal
// to the CPU's). The ids pass through local memory EMB_CHUNK at a time
// (coalesced reads, marked -1 unless in range and in the bucket), and every
// work-item then scans the chunk. Work-items without a column still share
// the loads and meet the barriers (no early return). Launch: 1-D
// work-groups of 256, grid (ceil(dim/256), buckets); any shape works.
__kernel void fleet_embedding_backward_$S(BUF(float, dtable), BUF(t_$S, dout), BUF(int, ids), int n, int dim, int vocab) {
	AT(float, dtable);
	AT(t_$S, dout);
	AT(int, ids);
	__local int idl[EMB_CHUNK];
	int nl = get_local_size(0), lt = get_local_id(0);
	long j = (long)get_group_id(0) * nl + lt;
	int bucket = get_group_id(1), buckets = get_num_groups(1);
	// A work-group wholly past dim has nothing to add: it skips the
	// loop as a whole (nend is uniform).
	int nend = (long)get_group_id(0) * nl < dim ? n : 0;
	for (long base = 0; base < nend; base += EMB_CHUNK) {
		int cnt = (int)min((long)EMB_CHUNK, n - base);
		barrier(CLK_LOCAL_MEM_FENCE); // the previous chunk is no longer read
		for (int x = lt; x < cnt; x += nl) {
			int id = ids[base + x];
			idl[x] = id >= 0 && id < vocab && id % buckets == bucket ? id : -1;
		}
		barrier(CLK_LOCAL_MEM_FENCE);
		if (j < dim) {
			for (int q = 0; q < cnt; q++) {
				int id = idl[q];
				if (id >= 0) {
					dtable[(long)id * dim + j] += ld_$S(dout, (long)(base + q) * dim + j);
				}
			}
		}
	}
}
//@end

package dist

import "fmt"

// Bounds cut a flat buffer into one contiguous shard per rank, in rank
// order: rank k's shard is elements [b[k], b[k+1]), so b has world+1
// entries, starts at 0, never falls, and ends at the buffer's length. A
// sharded optimizer (ZeRO-1) keeps the state of its shard, and the
// sharded collectives (ReduceScatterAsync, AllGatherShards, and a
// DeviceGroup's) leave each rank the elements of its own.
//
// EvenBounds cut a buffer into shards whose sizes differ by at most one,
// which is what AdamW wants: its cost is the same for every element. An
// optimizer whose cost is not (Muon, whose matrices are orthogonalised
// whole) cuts where its cost is shared evenly instead, and only at the
// edges of what must stay on one rank.
type Bounds []int

// Shard is rank k's share of n elements split among world ranks: [lo,
// hi), contiguous, in rank order, sizes differing by at most one (an
// EvenBounds shard).
func Shard(n, world, rank int) (lo, hi int) { return rank * n / world, (rank + 1) * n / world }

// EvenBounds cut n elements among world ranks as Shard does.
func EvenBounds(n, world int) Bounds {
	b := make(Bounds, world+1)
	for k := range b {
		b[k] = k * n / world
	}
	return b
}

// Shard is rank k's shard, [lo, hi).
func (b Bounds) Shard(k int) (lo, hi int) { return b[k], b[k+1] }

// Total is the number of elements cut.
func (b Bounds) Total() int {
	if len(b) == 0 {
		return 0
	}
	return b[len(b)-1]
}

// Check reports whether b cuts a buffer among world ranks.
func (b Bounds) Check(world int) error { return b.check(world) }

func (b Bounds) check(world int) error {
	if len(b) != world+1 {
		return fmt.Errorf("%d shard bounds for %d ranks, want %d", len(b), world, world+1)
	}
	if b[0] != 0 {
		return fmt.Errorf("the first shard starts at %d, not 0", b[0])
	}
	for k := range world {
		if b[k+1] < b[k] {
			return fmt.Errorf("rank %d's shard [%d, %d) ends before it starts", k, b[k], b[k+1])
		}
	}
	return nil
}

// hash identifies the bounds on the wire (a collective's header), so that
// ranks that cut a buffer apart are caught: FNV-1a over each bound's 8
// bytes, computed without allocating (every collective's header has it).
func (b Bounds) hash() uint32 {
	h := uint32(2166136261)
	for _, x := range b {
		for i := range 8 {
			h ^= uint32(byte(uint64(x) >> (8 * i)))
			h *= 16777619
		}
	}
	return h
}

package tokenizer

// BPE's merge loop, shared by fleet's own BPE and Hugging Face's: given a
// word as symbol ids, repeatedly merge the adjacent pair of lowest rank
// (the leftmost among equals) until no pair merges.

// pairRanks maps an adjacent pair of symbols (a, b), keyed a<<32 | b, to
// its merge: rank<<32 | the id it makes.
type pairRanks map[uint64]uint64

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// set records that (a, b) merges into id at rank.
func (p pairRanks) set(a, b int32, rank int, id int32) {
	p[pairKey(a, b)] = uint64(rank)<<32 | uint64(uint32(id))
}

// rankOf returns the merge of (a, b): its rank and the id it makes, or
// noRank and -1 when the pair does not merge.
func (p pairRanks) rankOf(a, b int32) (rank uint32, id int32) {
	v, ok := p[pairKey(a, b)]
	if !ok {
		return noRank, -1
	}
	return uint32(v >> 32), int32(uint32(v))
}

// mergeSmall merges syms in place by scanning for the lowest-ranked pair
// each time: quadratic, and the fastest for the short pre-tokens of
// ordinary text. ranks is scratch; both are returned for reuse.
func mergeSmall(r pairRanks, syms []int32, ranks []uint32) ([]int32, []uint32) {
	ranks = ranks[:0]
	for i := 0; i+1 < len(syms); i++ {
		rk, _ := r.rankOf(syms[i], syms[i+1])
		ranks = append(ranks, rk)
	}
	for len(syms) > 1 {
		best, bi := uint32(noRank), -1
		for i, rk := range ranks {
			if rk < best {
				best, bi = rk, i
			}
		}
		if bi < 0 {
			break
		}
		_, id := r.rankOf(syms[bi], syms[bi+1])
		syms[bi] = id
		syms = append(syms[:bi+1], syms[bi+2:]...)
		ranks = append(ranks[:bi], ranks[bi+1:]...)
		if bi > 0 {
			ranks[bi-1], _ = r.rankOf(syms[bi-1], id)
		}
		if bi < len(ranks) {
			ranks[bi], _ = r.rankOf(id, syms[bi+1])
		}
	}
	return syms, ranks
}

// mergeHeap merges syms (at least one, overwritten) with the same result
// as mergeSmall, in O(n log n), and appends the result to out: the symbols
// form a linked list and the candidate pairs a heap ordered by rank, then
// position.
func mergeHeap(r pairRanks, out, syms []int32) []int32 {
	n := len(syms)
	next := make([]int32, n)  // -1: last
	prev := make([]int32, n)  // -1: first
	rank := make([]uint32, n) // rank of the pair starting at i
	for i := range syms {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	next[n-1] = -1
	h := make(pairHeap, 0, n)
	for i := 0; i+1 < n; i++ {
		rank[i], _ = r.rankOf(syms[i], syms[i+1])
		if rank[i] != noRank {
			h = append(h, uint64(rank[i])<<32|uint64(i))
		}
	}
	rank[n-1] = noRank
	h.init()
	for len(h) > 0 {
		it := h.pop()
		i := int32(uint32(it))
		if rank[i] != uint32(it>>32) || syms[i] < 0 {
			continue // stale
		}
		j := next[i]
		_, id := r.rankOf(syms[i], syms[j])
		syms[i] = id
		syms[j] = -1
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		rank[i] = noRank
		if k := next[i]; k >= 0 {
			if rank[i], _ = r.rankOf(id, syms[k]); rank[i] != noRank {
				h.push(uint64(rank[i])<<32 | uint64(i))
			}
		}
		if p := prev[i]; p >= 0 {
			if rank[p], _ = r.rankOf(syms[p], id); rank[p] != noRank {
				h.push(uint64(rank[p])<<32 | uint64(p))
			}
		}
	}
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

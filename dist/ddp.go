package dist

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
)

// DefaultBucketBytes is the gradient bucket size of data parallelism, as
// PyTorch's DDP (25 MB).
const DefaultBucketBytes = 25 << 20

// Reducer averages gradients over a process group while the backward pass
// is still running, as PyTorch's DDP does. Gradients are grouped into
// buckets in reverse parameter order (the order backward produces them);
// when every gradient of a bucket is final, the bucket is copied into a
// flat buffer and its all-reduce (average) starts, so communication
// overlaps the rest of the backward pass. Buckets start in bucket order on
// every rank, whatever order their gradients became ready in, so that all
// ranks issue the same collectives in the same order.
//
// Per optimizer step: call GradReady(i) once for each parameter as its
// gradient becomes final (from a backward hook), then Wait, which finishes
// the buckets and copies the averages back into the gradient buffers. With
// gradient accumulation, do this only on the micro-step that synchronizes.
type Reducer struct {
	pg      ProcessGroup
	grads   [][]float32
	buckets []*bucket // in launch order
	of      []int     // bucket of each parameter

	// shards, where set (NewShardReducer), reduce-scatters each bucket, a
	// piece of a flat buffer cut by bounds, in place.
	shards ShardGroup
	bounds Bounds

	// skip, where set (tests only), drops a bucket's all-reduce as a
	// rank with a bug would, to test that the flight record names it.
	skip func(bucket int) bool

	mu       sync.Mutex
	ready    []bool
	pending  []int // per bucket, gradients not yet ready
	next     int   // the next bucket to launch
	launched int
}

type bucket struct {
	params []int // in the order they sit in buf (reverse parameter order)
	offs   []int
	buf    []float32
	work   Work
	tag    string // "bucket N", for the group's flight record
	flat   int    // a shard reducer's: buf's offset in the flat buffer
}

// tagger is a ProcessGroup whose flight record can say what an
// all-reduce carries.
type tagger interface {
	AllReduceAsyncTag(buf []float32, op Op, tag string) Work
}

// NewReducer builds the buckets for grads (one slice per parameter, in
// parameter order). A bucket is closed once it holds bucketBytes or more (0:
// DefaultBucketBytes), so it may pass the size by less than one gradient,
// as PyTorch's buckets do.
func NewReducer(pg ProcessGroup, grads [][]float32, bucketBytes int) *Reducer {
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	r := &Reducer{pg: pg, grads: grads, of: make([]int, len(grads)), ready: make([]bool, len(grads))}
	var cur *bucket
	size := 0
	for i := len(grads) - 1; i >= 0; i-- {
		if cur == nil {
			cur = &bucket{}
			r.buckets = append(r.buckets, cur)
			size = 0
		}
		cur.params = append(cur.params, i)
		cur.offs = append(cur.offs, size)
		size += len(grads[i])
		r.of[i] = len(r.buckets) - 1
		if 4*size >= bucketBytes {
			cur = nil // full: the next gradient starts another
		}
	}
	for i, b := range r.buckets {
		n := b.offs[len(b.offs)-1] + len(grads[b.params[len(b.params)-1]])
		b.buf = make([]float32, n)
		b.tag = "bucket " + strconv.Itoa(i)
	}
	r.reset()
	return r
}

// Buckets lists each bucket's parameters, in launch order.
func (r *Reducer) Buckets() [][]int {
	out := make([][]int, len(r.buckets))
	for i, b := range r.buckets {
		out[i] = append([]int(nil), b.params...)
	}
	return out
}

// Launched is the number of buckets whose all-reduce has started this step.
func (r *Reducer) Launched() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.launched
}

func (r *Reducer) reset() {
	for i := range r.ready {
		r.ready[i] = false
	}
	r.pending = make([]int, len(r.buckets))
	for i, b := range r.buckets {
		r.pending[i] = len(b.params)
		b.work = nil
	}
	r.next, r.launched = 0, 0
}

// GradReady says parameter i's gradient is final for this step. It may
// start the all-reduce of its bucket (and of later buckets that were
// waiting for it). Calling it twice for a parameter in one step panics:
// that is a bug in the caller's hooks.
func (r *Reducer) GradReady(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready[i] {
		panic(fmt.Sprintf("dist: gradient %d marked ready twice in one step", i))
	}
	r.ready[i] = true
	r.pending[r.of[i]]--
	r.launchReady()
}

// launchReady starts buckets in order while they are complete; r.mu is held.
func (r *Reducer) launchReady() {
	for r.next < len(r.buckets) && r.pending[r.next] == 0 {
		b := r.buckets[r.next]
		if r.shards == nil {
			for j, p := range b.params {
				copy(b.buf[b.offs[j]:], r.grads[p])
			}
		}
		if r.skip != nil && r.skip(r.next) {
			b.work = skipped{}
		} else if r.shards != nil {
			b.work = r.shards.ReduceScatterAsync(b.buf, b.flat, r.bounds, Avg, b.tag)
		} else if t, ok := r.pg.(tagger); ok {
			b.work = t.AllReduceAsyncTag(b.buf, Avg, b.tag)
		} else {
			b.work = r.pg.AllReduceAsync(b.buf, Avg)
		}
		r.next++
		r.launched++
	}
}

// skipped is the Work of a bucket a test hook dropped.
type skipped struct{}

func (skipped) Wait() error { return nil }

// Wait finishes the step: buckets whose gradients were never marked ready
// (parameters unused this step) start now with the gradients as they are,
// every all-reduce is waited for, and the averages are copied back. It
// returns the first error, and the Reducer is then ready for the next step.
func (r *Reducer) Wait() error {
	r.mu.Lock()
	for i := range r.ready {
		if !r.ready[i] {
			r.ready[i] = true
			r.pending[r.of[i]]--
		}
	}
	r.launchReady()
	r.mu.Unlock()
	var errs []error
	for _, b := range r.buckets {
		if err := b.work.Wait(); err != nil {
			errs = append(errs, err)
			continue
		}
		if r.shards != nil {
			continue
		}
		for j, p := range b.params {
			copy(r.grads[p], b.buf[b.offs[j]:])
		}
	}
	r.mu.Lock()
	r.reset()
	r.mu.Unlock()
	if len(errs) > 0 {
		if r.shards != nil {
			return fmt.Errorf("gradient reduce-scatter: %w", errs[0])
		}
		return fmt.Errorf("gradient all-reduce: %w", errs[0])
	}
	return nil
}

// ShardGroup is a process group that can reduce-scatter the pieces of a
// flat buffer (TCPGroup.ReduceScatterAsync).
type ShardGroup interface {
	ProcessGroup
	ReduceScatterAsync(buf []float32, off int, b Bounds, op Op, tag string) Work
}

// NewShardReducer is the Reducer of a sharded optimizer (ZeRO-1): the
// gradients live in one flat buffer, parameter i's at flat[offs[i]:
// offs[i]+sizes[i]], and each rank is to end with the average of its
// shard of it, as b cuts it (b.Shard(Rank())). Buckets are contiguous
// runs of flat, filled from its end with gradients in falling parameter
// order, and cut where two are not adjacent, where the order breaks (a
// packed optimizer's decayed parameters, then the others), or once a
// bucket holds bucketBytes or more; each is reduce-scattered in
// place as soon as every gradient in it is ready, so the averaging
// overlaps backward as the Reducer's all-reduces do, with half their
// traffic. Buckets start in one order on every rank: by the lowest
// parameter they hold, the highest first, which is the order backward
// finishes them. Wait leaves the rest of flat holding partial sums.
func NewShardReducer(pg ShardGroup, flat []float32, b Bounds, offs, sizes []int, bucketBytes int) (*Reducer, error) {
	if b.Total() != len(flat) {
		return nil, fmt.Errorf("dist: the shards cut %d elements, the flat buffer holds %d", b.Total(), len(flat))
	}
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	if len(offs) != len(sizes) {
		return nil, fmt.Errorf("dist: %d offsets for %d gradients", len(offs), len(sizes))
	}
	byOff := make([]int, len(offs))
	for i := range byOff {
		byOff[i] = i
		if offs[i] < 0 || sizes[i] < 0 || offs[i]+sizes[i] > len(flat) {
			return nil, fmt.Errorf("dist: gradient %d, [%d, %d), is not within the flat buffer of %d", i, offs[i], offs[i]+sizes[i], len(flat))
		}
	}
	sort.Slice(byOff, func(a, b int) bool { // from the end; an empty gradient after the one that starts where it sits
		if oa, ob := offs[byOff[a]], offs[byOff[b]]; oa != ob {
			return oa > ob
		}
		return sizes[byOff[a]] > sizes[byOff[b]]
	})
	r := &Reducer{pg: pg, shards: pg, bounds: b, of: make([]int, len(offs)), ready: make([]bool, len(offs))}
	r.grads = make([][]float32, len(offs))
	var cur *bucket
	end := -1 // where the bucket being filled starts in flat
	for k, i := range byOff {
		if k > 0 && offs[i]+sizes[i] > offs[byOff[k-1]] {
			return nil, fmt.Errorf("dist: gradients %d and %d overlap in the flat buffer", i, byOff[k-1])
		}
		r.grads[i] = flat[offs[i] : offs[i]+sizes[i]]
		if cur == nil || offs[i]+sizes[i] != end || i > byOff[k-1] || 4*(len(cur.buf)) >= bucketBytes {
			cur = &bucket{}
			r.buckets = append(r.buckets, cur)
		}
		cur.params = append(cur.params, i)
		cur.flat = offs[i]
		cur.buf = flat[cur.flat : cur.flat+len(cur.buf)+sizes[i]]
		end = offs[i]
	}
	low := func(b *bucket) int { return slices.Min(b.params) }
	sort.SliceStable(r.buckets, func(a, b int) bool { return low(r.buckets[a]) > low(r.buckets[b]) })
	for k, b := range r.buckets {
		for _, i := range b.params {
			r.of[i] = k
		}
		b.tag = "bucket " + strconv.Itoa(k)
	}
	r.reset()
	return r, nil
}

// BroadcastParams copies rank 0's parameters to every rank, packed into
// buffers of at most bucketBytes (0: DefaultBucketBytes), as DDP does when
// it wraps a model.
func BroadcastParams(pg ProcessGroup, params [][]float32, bucketBytes int) error {
	if bucketBytes <= 0 {
		bucketBytes = DefaultBucketBytes
	}
	var buf []float32
	var members []int
	flush := func() error {
		if len(members) == 0 {
			return nil
		}
		if err := pg.Broadcast(buf, 0); err != nil {
			return fmt.Errorf("broadcast parameters: %w", err)
		}
		off := 0
		for _, i := range members {
			off += copy(params[i], buf[off:])
		}
		buf, members = buf[:0], members[:0]
		return nil
	}
	for i, p := range params {
		if len(members) > 0 && 4*(len(buf)+len(p)) > bucketBytes {
			if err := flush(); err != nil {
				return err
			}
		}
		buf = append(buf, p...)
		members = append(members, i)
	}
	return flush()
}

package dist

import "fmt"

// DType is the element type of a device collective.
type DType int

// Element types of device collectives.
const (
	F32 DType = iota
	BF16
	F16
)

func (d DType) String() string {
	switch d {
	case F32:
		return "f32"
	case BF16:
		return "bf16"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size is the element size in bytes.
func (d DType) Size() int {
	if d == F32 {
		return 4
	}
	return 2
}

// DeviceGroup is a process group over device memory (NCCL): buffers are raw
// device pointers, and each collective is enqueued on a CUDA stream (a raw
// CUstream handle) and returns before it completes, so the caller orders it
// with its own work through that stream and events. All calls for one
// device must come from the goroutine that owns the device's context.
//
// Unlike a TCPGroup, a DeviceGroup does not time collectives out by itself:
// its owner waits on the stream, polls CheckAsync meanwhile, and calls Abort
// when its own timeout passes.
type DeviceGroup interface {
	Rank() int
	Size() int
	// AllReduce reduces count elements at buf in place.
	AllReduce(buf uintptr, count int, dt DType, op Op, stream uintptr) error
	// Broadcast copies root's count elements at buf to every rank.
	Broadcast(buf uintptr, count int, dt DType, root int, stream uintptr) error
	// AllGather gathers count elements from each rank's send into recv
	// (Size()*count elements), in rank order.
	AllGather(send, recv uintptr, count int, dt DType, stream uintptr) error
	// ReduceScatterShards reduces count elements at buf, elements
	// [off, off+count) of a flat buffer that b cuts, into the ranks'
	// shards of that buffer (b.Shard(rank)): each rank's shard part of
	// buf holds the reduction afterwards, the rest of buf is unspecified.
	// A sharded optimizer's buckets, one call each, leave every rank its
	// shard of the whole buffer's reduction.
	ReduceScatterShards(buf uintptr, off, count int, b Bounds, dt DType, op Op, stream uintptr) error
	// AllGatherShards copies each rank's shard (b.Shard(rank)) of the
	// b.Total() elements at buf to every rank's buf.
	AllGatherShards(buf uintptr, b Bounds, dt DType, stream uintptr) error
	// CheckAsync returns an error the communicator met while running
	// enqueued work (a peer gone, ...); the caller polls it while it waits.
	CheckAsync() error
	// Abort tears the communicator down without waiting for enqueued work.
	Abort() error
	// Close frees the communicator. Call it once the stream's work has
	// finished; after a failure, call Abort instead.
	Close() error
}

// Package nccl binds NVIDIA's collective library (libnccl.so.2) through
// purego, with no cgo, and offers a dist.DeviceGroup over it: collectives on
// raw device pointers, enqueued on a CUDA stream. The communicator's unique
// id is made by rank 0 and passed to the others through the job's store.
//
// Nothing here needs a GPU to build or to be tested up to the point of
// opening the library; the collectives themselves run only where NCCL and a
// GPU are. NCCL wants one rank per GPU.
package nccl

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/fleetml/fleet/backend/gpu/libs"
	"github.com/fleetml/fleet/dist"
)

// Result is an ncclResult_t.
type Result int32

// NCCL results.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

var results = libs.Codes[Result]{Type: "ncclResult", Names: map[Result]string{
	0: "ncclSuccess", 1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError",
	4: "ncclInvalidArgument", 5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress", 8: "ncclTimeout",
}}

func (r Result) String() string { return results.Name(r) }

// DataType is an ncclDataType_t.
type DataType int32

// NCCL data types fleet uses.
const (
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9
)

// RedOp is an ncclRedOp_t.
type RedOp int32

// NCCL reductions.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4 // NCCL 2.10 and later
)

// IDBytes is the size of an ncclUniqueId.
const IDBytes = 128

// UniqueID is an ncclUniqueId: rank 0 makes it, every rank passes it to
// CommInitRank.
type UniqueID [IDBytes]byte

// uniqueID has the C struct's layout, so purego can pass it by value.
type uniqueID struct{ Internal [IDBytes]byte }

// Error is a failed NCCL call.
type Error struct {
	Code Result
	Func string
	Desc string // ncclGetErrorString's text
	Last string // ncclGetLastError's text, when there is one
}

func (e *Error) Error() string {
	s := "nccl: " + e.Func + ": " + e.Code.String()
	if e.Desc != "" {
		s += " (" + e.Desc + ")"
	}
	if e.Last != "" {
		s += ": " + e.Last
	}
	return s
}

// Lib is a loaded NCCL.
type Lib struct {
	Lib *libs.Lib

	getVersion, getUniqueID, getErrorString, getLastError libs.Func
	commDestroy, commAbort, commGetAsyncError             libs.Func
	groupStart, groupEnd                                  libs.Func
	allReduce, broadcast, allGather, reduceScatter        libs.Func
	reduce                                                libs.Func

	// ncclCommInitRank takes the 128-byte id by value, which needs purego's
	// struct support rather than a plain SyscallN.
	commInitRank func(comm *uintptr, nranks int32, id uniqueID, rank int32) int32
}

var (
	openOnce sync.Once
	shared   *Lib
	openErr  error
)

// Open loads libnccl.so.2 once per process (searched for as package libs
// describes: $FLEET_CUDA_PATH, the loader's path, CUDA folders, pip's
// nvidia/nccl/lib).
func Open() (*Lib, error) {
	openOnce.Do(func() {
		lib, err := libs.Open(libs.NCCL)
		if err != nil {
			openErr = fmt.Errorf("nccl: the GPU collectives need NCCL: %w", err)
			return
		}
		shared, openErr = Load(lib)
	})
	return shared, openErr
}

// Load binds an opened NCCL library and records its version.
func Load(lib *libs.Lib) (*Lib, error) {
	l := &Lib{Lib: lib}
	for _, b := range []struct {
		f    *libs.Func
		name string
	}{
		{&l.getVersion, "ncclGetVersion"}, {&l.getUniqueID, "ncclGetUniqueId"},
		{&l.getErrorString, "ncclGetErrorString"}, {&l.getLastError, "ncclGetLastError"},
		{&l.commDestroy, "ncclCommDestroy"}, {&l.commAbort, "ncclCommAbort"},
		{&l.commGetAsyncError, "ncclCommGetAsyncError"},
		{&l.groupStart, "ncclGroupStart"}, {&l.groupEnd, "ncclGroupEnd"},
		{&l.allReduce, "ncclAllReduce"}, {&l.broadcast, "ncclBroadcast"},
		{&l.allGather, "ncclAllGather"}, {&l.reduceScatter, "ncclReduceScatter"},
		{&l.reduce, "ncclReduce"},
	} {
		*b.f = lib.Func(b.name)
	}
	if f := lib.Func("ncclCommInitRank"); f.Addr != 0 {
		purego.RegisterFunc(&l.commInitRank, f.Addr)
	}
	v, err := l.Version()
	if err != nil {
		return nil, err
	}
	lib.SetVersion(VersionString(v))
	return l, nil
}

// VersionString turns NCCL_VERSION_CODE (21905, or 2700 before 2.9) into
// "2.19.5".
func VersionString(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
}

func (l *Lib) check(fn string, r uintptr, err error, comm uintptr) error {
	return results.Err(r, err, func(code Result) error {
		e := &Error{Code: code, Func: fn}
		if p, err := l.getErrorString.Call(uintptr(code)); err == nil {
			e.Desc = libs.GoString(p)
		}
		if l.getLastError.Addr != 0 {
			if p, err := l.getLastError.Call(comm); err == nil {
				e.Last = libs.GoString(p)
			}
		}
		return e
	})
}

// Version is NCCL_VERSION_CODE of the loaded library.
func (l *Lib) Version() (int, error) {
	var v int32
	r, err := l.getVersion.Call(uintptr(unsafe.Pointer(&v)))
	if err := l.check("ncclGetVersion", r, err, 0); err != nil {
		return 0, err
	}
	return int(v), nil
}

// GetUniqueID makes a new communicator id (rank 0 does this once).
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	r, err := l.getUniqueID.Call(uintptr(unsafe.Pointer(&id[0])))
	return id, l.check("ncclGetUniqueId", r, err, 0)
}

// GroupStart and GroupEnd bracket calls NCCL should issue together.
func (l *Lib) GroupStart() error {
	r, err := l.groupStart.Call()
	return l.check("ncclGroupStart", r, err, 0)
}

// GroupEnd ends a GroupStart.
func (l *Lib) GroupEnd() error {
	r, err := l.groupEnd.Call()
	return l.check("ncclGroupEnd", r, err, 0)
}

// Comm is an NCCL communicator.
type Comm struct {
	l          *Lib
	h          uintptr
	rank, size int
}

// CommInitRank joins the communicator id as rank of world. It blocks until
// every rank has joined, so call it only once all ranks are known to be up.
// The calling OS thread must have the rank's CUDA device current.
func (l *Lib) CommInitRank(world, rank int, id UniqueID) (*Comm, error) {
	if l.commInitRank == nil {
		return nil, &libs.MissingSymbolError{Lib: l.Lib.Soname, Symbol: "ncclCommInitRank"}
	}
	var h uintptr
	r := l.commInitRank(&h, int32(world), uniqueID{id}, int32(rank))
	if err := l.check("ncclCommInitRank", uintptr(uint32(r)), nil, 0); err != nil {
		return nil, err
	}
	return &Comm{l: l, h: h, rank: rank, size: world}, nil
}

// AllReduce reduces count elements from send into recv (in place when they
// are equal), enqueued on stream.
func (c *Comm) AllReduce(send, recv uintptr, count int, dt DataType, op RedOp, stream uintptr) error {
	r, err := c.l.allReduce.Call(send, recv, uintptr(count), uintptr(dt), uintptr(op), c.h, stream)
	return c.l.check("ncclAllReduce", r, err, c.h)
}

// Broadcast copies root's send to every rank's recv.
func (c *Comm) Broadcast(send, recv uintptr, count int, dt DataType, root int, stream uintptr) error {
	r, err := c.l.broadcast.Call(send, recv, uintptr(count), uintptr(dt), uintptr(root), c.h, stream)
	return c.l.check("ncclBroadcast", r, err, c.h)
}

// Reduce reduces count elements from every rank's send into root's recv
// (in place when they are equal; recv matters on root only).
func (c *Comm) Reduce(send, recv uintptr, count int, dt DataType, op RedOp, root int, stream uintptr) error {
	r, err := c.l.reduce.Call(send, recv, uintptr(count), uintptr(dt), uintptr(op), uintptr(root), c.h, stream)
	return c.l.check("ncclReduce", r, err, c.h)
}

// AllGather gathers sendcount elements from every rank into recv.
func (c *Comm) AllGather(send, recv uintptr, sendcount int, dt DataType, stream uintptr) error {
	r, err := c.l.allGather.Call(send, recv, uintptr(sendcount), uintptr(dt), c.h, stream)
	return c.l.check("ncclAllGather", r, err, c.h)
}

// ReduceScatter reduces send (size×recvcount elements) and leaves block
// rank of the result in recv.
func (c *Comm) ReduceScatter(send, recv uintptr, recvcount int, dt DataType, op RedOp, stream uintptr) error {
	r, err := c.l.reduceScatter.Call(send, recv, uintptr(recvcount), uintptr(dt), uintptr(op), c.h, stream)
	return c.l.check("ncclReduceScatter", r, err, c.h)
}

// AsyncError is the error the communicator met while running enqueued
// work, or nil.
func (c *Comm) AsyncError() error {
	var res int32
	r, err := c.l.commGetAsyncError.Call(c.h, uintptr(unsafe.Pointer(&res)))
	if err := c.l.check("ncclCommGetAsyncError", r, err, c.h); err != nil {
		return err
	}
	if Result(res) == Success || Result(res) == InProgress {
		return nil
	}
	return c.l.check("async", uintptr(uint32(res)), nil, c.h)
}

// Abort frees the communicator without waiting for its work.
func (c *Comm) Abort() error {
	r, err := c.l.commAbort.Call(c.h)
	return c.l.check("ncclCommAbort", r, err, 0)
}

// Destroy frees the communicator; its enqueued work must have finished.
func (c *Comm) Destroy() error {
	r, err := c.l.commDestroy.Call(c.h)
	return c.l.check("ncclCommDestroy", r, err, 0)
}

// ExchangeID gives every rank the same communicator id through store: rank
// 0 makes it with gen and sets it under key, the others wait for it (up to
// the store's timeout).
func ExchangeID(store *dist.Store, key string, gen func() (UniqueID, error)) (UniqueID, error) {
	var id UniqueID
	if store.Rank() == 0 {
		id, err := gen()
		if err != nil {
			return id, err
		}
		return id, store.Set(key, id[:])
	}
	v, err := store.Get(key)
	if err != nil {
		return id, fmt.Errorf("nccl: waiting for rank 0's unique id: %w", err)
	}
	if len(v) != IDBytes {
		return id, fmt.Errorf("nccl: the unique id under %q has %d bytes, want %d", key, len(v), IDBytes)
	}
	copy(id[:], v)
	return id, nil
}

// Group is a dist.DeviceGroup over an NCCL communicator.
type Group struct {
	Comm *Comm
}

var _ dist.DeviceGroup = (*Group)(nil)

// NewGroup opens NCCL and joins a communicator of store's ranks: rank 0
// makes the unique id and shares it through the store; all ranks then meet
// at a store barrier, so that a rank that never comes is named instead of
// leaving ncclCommInitRank blocked. name keeps this communicator's keys
// apart from others' ("" numbers them in creation order). Call it on the OS
// thread that has the rank's CUDA device current.
func NewGroup(store *dist.Store, name string) (*Group, error) {
	l, err := Open()
	if err != nil {
		return nil, err
	}
	return newGroup(store, name, l.GetUniqueID, l.CommInitRank)
}

func newGroup(store *dist.Store, name string, gen func() (UniqueID, error), initRank func(world, rank int, id UniqueID) (*Comm, error)) (*Group, error) {
	if name == "" {
		n, err := store.Add(fmt.Sprintf("nccl/count/%d", store.Rank()), 1)
		if err != nil {
			return nil, fmt.Errorf("nccl: %w", err)
		}
		name = "comm" + strconv.FormatInt(n, 10)
	}
	id, err := ExchangeID(store, "nccl/"+name+"/id", gen)
	if err != nil {
		return nil, err
	}
	if err := storeBarrier(store, "nccl/"+name+"/ready"); err != nil {
		return nil, fmt.Errorf("nccl: before ncclCommInitRank: %w", err)
	}
	c, err := initRank(store.World(), store.Rank(), id)
	if err != nil {
		return nil, err
	}
	return &Group{Comm: c}, nil
}

// storeBarrier waits until every rank has added itself under key.
func storeBarrier(store *dist.Store, key string) error {
	if _, err := store.Add(fmt.Sprintf("%s/%d", key, store.Rank()), 1); err != nil {
		return err
	}
	keys := make([]string, store.World())
	for r := range keys {
		keys[r] = fmt.Sprintf("%s/%d", key, r)
	}
	err := store.Wait(keys...)
	var me *dist.MissingKeysError
	if errors.As(err, &me) {
		return fmt.Errorf("ranks never arrived within %v: %s", store.Timeout().Round(time.Second), me.Keys)
	}
	return err
}

func dataType(dt dist.DType) (DataType, error) {
	switch dt {
	case dist.F32:
		return Float32, nil
	case dist.BF16:
		return BFloat16, nil
	case dist.F16:
		return Float16, nil
	}
	return 0, fmt.Errorf("nccl: no data type for %v", dt)
}

func redOp(op dist.Op) (RedOp, error) {
	switch op {
	case dist.Sum:
		return Sum, nil
	case dist.Avg:
		return Avg, nil
	}
	return 0, fmt.Errorf("nccl: no reduction for %v", op)
}

// Rank is this process's rank.
func (g *Group) Rank() int { return g.Comm.rank }

// Size is the number of ranks.
func (g *Group) Size() int { return g.Comm.size }

// typeAndOp is NCCL's data type and reduction for dt and op.
func typeAndOp(dt dist.DType, op dist.Op) (DataType, RedOp, error) {
	t, err := dataType(dt)
	if err != nil {
		return 0, 0, err
	}
	o, err := redOp(op)
	return t, o, err
}

// AllReduce reduces count elements at buf in place, on stream.
func (g *Group) AllReduce(buf uintptr, count int, dt dist.DType, op dist.Op, stream uintptr) error {
	t, o, err := typeAndOp(dt, op)
	if err != nil {
		return err
	}
	return g.Comm.AllReduce(buf, buf, count, t, o, stream)
}

// Broadcast copies root's buf to every rank, on stream.
func (g *Group) Broadcast(buf uintptr, count int, dt dist.DType, root int, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	return g.Comm.Broadcast(buf, buf, count, t, root, stream)
}

// AllGather gathers every rank's count elements into recv, on stream.
func (g *Group) AllGather(send, recv uintptr, count int, dt dist.DType, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	return g.Comm.AllGather(send, recv, count, t, stream)
}

// ReduceScatterShards reduces buf, elements [off, off+count) of a flat
// buffer that b cuts, into the ranks' shards of it: one ncclReduce to each
// rank whose shard buf meets, grouped (ncclGroupStart/End) so that they
// run together. ncclReduceScatter would need the shards equal (a cost-
// balanced optimizer's are not) and the bucket cut at their edges; a reduce to the shard's owner keeps them
// contiguous, and a bucket inside one shard costs one pipelined ring
// reduce.
func (g *Group) ReduceScatterShards(buf uintptr, off, count int, b dist.Bounds, dt dist.DType, op dist.Op, stream uintptr) error {
	t, o, err := typeAndOp(dt, op)
	if err != nil {
		return err
	}
	if err := b.Check(g.Comm.size); err != nil {
		return fmt.Errorf("nccl: %w", err)
	}
	if off < 0 || off+count > b.Total() {
		return fmt.Errorf("nccl: elements [%d, %d) are not within a flat buffer of %d", off, off+count, b.Total())
	}
	return g.grouped(func() error {
		for k := range g.Comm.size {
			lo, hi := b.Shard(k)
			lo, hi = max(lo, off), min(hi, off+count)
			if lo >= hi {
				continue
			}
			p := buf + uintptr((lo-off)*dt.Size())
			if err := g.Comm.Reduce(p, p, hi-lo, t, o, k, stream); err != nil {
				return err
			}
		}
		return nil
	})
}

// AllGatherShards gives every rank each rank's shard (b.Shard(rank)) of
// the elements at buf: one ncclBroadcast from each owner, grouped.
// (ncclAllGather would need the shards equal.)
func (g *Group) AllGatherShards(buf uintptr, b dist.Bounds, dt dist.DType, stream uintptr) error {
	t, err := dataType(dt)
	if err != nil {
		return err
	}
	if err := b.Check(g.Comm.size); err != nil {
		return fmt.Errorf("nccl: %w", err)
	}
	return g.grouped(func() error {
		for k := range g.Comm.size {
			lo, hi := b.Shard(k)
			if lo >= hi {
				continue
			}
			p := buf + uintptr(lo*dt.Size())
			if err := g.Comm.Broadcast(p, p, hi-lo, t, k, stream); err != nil {
				return err
			}
		}
		return nil
	})
}

// grouped runs fn's calls between ncclGroupStart and ncclGroupEnd.
func (g *Group) grouped(fn func() error) error {
	if err := g.Comm.l.GroupStart(); err != nil {
		return err
	}
	err := fn()
	if end := g.Comm.l.GroupEnd(); err == nil {
		err = end
	}
	return err
}

// CheckAsync returns the communicator's asynchronous error, if any.
func (g *Group) CheckAsync() error { return g.Comm.AsyncError() }

// Abort tears the communicator down at once.
func (g *Group) Abort() error { return g.Comm.Abort() }

// Close frees the communicator.
func (g *Group) Close() error { return g.Comm.Destroy() }

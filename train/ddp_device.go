package train

import (
	"errors"
	"fmt"
	"time"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/dist/nccl"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// deviceDDP all-reduces gradients in device memory over a DeviceGroup
// (NCCL) instead of through the host: after the last micro-step's
// backward every gradient is copied into one flat device buffer, averaged
// in place by one all-reduce enqueued on the device's stream behind the
// backward pass, and copied back, all in stream order. The host waits for
// the stream for at most the collective timeout, polling the
// communicator for errors (a peer gone), and aborts it when time runs out,
// so a dead peer is an error naming the operation, never a hang.
//
// Unlike the TCP path it does not yet overlap the all-reduce with
// backward: the gradients are reduced in one piece once backward ends.
type deviceDDP struct {
	grp     dist.DeviceGroup
	dev     tensor.Device
	params  []*nn.Parameter
	flat    *tensor.Tensor   // [n] F32: every gradient, in parameter order
	views   []*tensor.Tensor // flat's piece of each parameter, shaped like it
	probe   *tensor.Tensor   // flat's first element: reading it waits for the stream
	n       int
	timeout time.Duration
	ops     int
}

// newDeviceGroup makes the device process group of a job: NCCL, its
// unique id shared through the store. Tests replace it.
var newDeviceGroup = func(store *dist.Store, dev tensor.Device) (dist.DeviceGroup, error) {
	if !isCUDA(dev) {
		return nil, setting.Errorf("{DistBackend} nccl needs CUDA devices, not %v", dev)
	}
	var g *nccl.Group
	// ncclCommInitRank must run where the device's context is current.
	err := tensor.OnDeviceQueue(dev, func(uintptr) (err error) {
		g, err = nccl.NewGroup(store, "ddp")
		return err
	})
	return g, err
}

func newDeviceDDP(grp dist.DeviceGroup, dev tensor.Device, params []*nn.Parameter, timeout time.Duration) (*deviceDDP, error) {
	d := &deviceDDP{grp: grp, dev: dev, params: params, timeout: timeout}
	for _, p := range params {
		if p.T.Device() != dev {
			return nil, setting.Errorf("{DistBackend} nccl: parameter %s is on %v, not %v (pipelines use {DistBackend} tcp)", p.Name, p.T.Device(), dev)
		}
		d.n += p.T.Numel()
	}
	err := tensor.Catch(func() {
		tensor.Persist(func() {
			tensor.NoGrad(func() {
				d.flat = tensor.Zeros(dev, d.n)
				off := 0
				for _, p := range params {
					k := p.T.Numel()
					d.views = append(d.views, d.flat.Rows(off, off+k).Reshape(p.T.Shape()...))
					off += k
				}
				d.probe = d.flat.Rows(0, 1)
			})
		})
	})
	return d, err
}

// collective enqueues op on the device's stream and waits for it.
func (d *deviceDDP) collective(name string, op func(addr, stream uintptr) error) error {
	d.ops++
	err := tensor.OnDeviceQueue(d.dev, func(stream uintptr) error {
		addr, ok := d.flat.DeviceAddress()
		if !ok {
			return fmt.Errorf("%v has no device addresses", d.dev)
		}
		return op(addr, stream)
	})
	if err != nil {
		return fmt.Errorf("%s #%d (%s): %w", name, d.ops, units.Bytes(int64(4*d.n)), err)
	}
	done := make(chan error, 1)
	go func() { done <- tensor.Catch(func() { d.probe.Item() }) }() // waits for the stream
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d.timeout)
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("%s #%d: %w", name, d.ops, err)
			}
			return nil
		case <-tick.C:
			if err := d.grp.CheckAsync(); err != nil {
				d.grp.Abort()
				return fmt.Errorf("%s #%d (%s): a peer failed: %w", name, d.ops, units.Bytes(int64(4*d.n)), err)
			}
		case <-deadline:
			d.grp.Abort()
			return setting.Errorf("%s #%d (%s): not complete after %v ({CommTimeout}): a peer is gone or stuck; the communicator was aborted",
				name, d.ops, units.Bytes(int64(4*d.n)), d.timeout)
		}
	}
}

// broadcast gives every rank rank 0's parameters.
func (d *deviceDDP) broadcast() error {
	if err := tensor.Catch(func() {
		for i, p := range d.params {
			d.views[i].CopyFrom(p.T)
		}
	}); err != nil {
		return err
	}
	if err := d.collective("broadcast", func(addr, stream uintptr) error {
		return d.grp.Broadcast(addr, d.n, dist.F32, 0, stream)
	}); err != nil {
		return err
	}
	return tensor.Catch(func() {
		for i, p := range d.params {
			p.T.CopyFrom(d.views[i])
		}
	})
}

// sync averages the gradients across the ranks.
func (d *deviceDDP) sync() error {
	if err := tensor.Catch(func() {
		for i, p := range d.params {
			if p.T.Grad == nil {
				panic(&tensor.Error{Op: "ddp", Msg: "parameter " + p.Name + " has no gradient after backward"})
			}
			d.views[i].CopyFrom(p.T.Grad)
		}
	}); err != nil {
		return err
	}
	if err := d.collective("all-reduce", func(addr, stream uintptr) error {
		return d.grp.AllReduce(addr, d.n, dist.F32, dist.Avg, stream)
	}); err != nil {
		return err
	}
	return tensor.Catch(func() {
		for i, p := range d.params {
			p.T.Grad.CopyFrom(d.views[i])
		}
	})
}

func (d *deviceDDP) close(failed bool) error {
	if failed {
		return d.grp.Abort()
	}
	return errors.Join(tensor.OnDeviceQueue(d.dev, func(uintptr) error { return d.grp.Close() }))
}

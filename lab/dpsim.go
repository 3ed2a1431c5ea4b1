package lab

import (
	"fmt"
	"strings"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/backend/gpu/cuda/sim"
	"github.com/fleetml/fleet/bench"
	"github.com/fleetml/fleet/model"
	"github.com/fleetml/fleet/tensor"
)

// simOf is the simulated GPU behind dev, or nil.
func simOf(dev tensor.Device) *sim.Device {
	b, err := backend.Get(dev)
	if err != nil {
		return nil
	}
	return sim.Of(b)
}

// updateKernel reports whether a kernel (a simulator's by-kernel name)
// belongs to the update rather than to forward and backward: AdamW and
// the gradient clipping's norm and coefficient.
func updateKernel(name string) bool {
	for _, k := range []string{"adamw", "sumsquares", "clip_coef"} {
		if strings.Contains(name, k) {
			return true
		}
	}
	return false
}

// splitUpdate is a simulated step's device ms: forward and backward (with
// the batch's copy and the gradients' zeroing), and the update.
func splitUpdate(r bench.Result) (fb, upd float64) {
	for k, ms := range r.DeviceMsByKernel {
		if updateKernel(k) {
			upd += ms
		}
	}
	return r.DeviceMsPerStep - upd, upd
}

// seg is a span of device dev from a to b ms.
func seg(dev int, kind string, a, b float64) Segment {
	return Segment{Device: dev, Kind: kind, StartMs: a, EndMs: b}
}

// dpSimulated predicts the three modes' steps on N simulated GPUs of one
// node from what the simulator counts on one (a process holds one
// simulated GPU, so the replicas cannot be run together):
//
//   - one device: the step at batch B, the cost model's device time;
//   - DDP: the step at batch B/N with --sim-world N, the device time plus
//     the all-reduce's exposed part (bench's own data-parallel
//     prediction: the ring's buckets priced at the node's bus bandwidth,
//     overlapped with backward on the communication stream);
//   - DataParallel: the broadcast, forward and backward at batch B/N, the
//     gradients' sum and the update, one after another, as the trainer's
//     --replicas runs them: the copies each parameter tensor's bytes over
//     the first device's link at the node's bus bandwidth plus a launch,
//     the sums one add per tensor on the first device priced as the cost
//     model prices an elementwise kernel (two reads and a write at 0.85 of
//     the memory bandwidth, plus a launch), the update the one-device
//     step's update kernels.
//
// The host's time to issue a step (this machine's, not the GPU's) is left
// out of all three, so the comparison is of the devices' work.
func dpSimulated(dev tensor.Device, devs []tensor.Device, o Options, d *DataParallel) error {
	n := len(devs)
	c := o.Model
	spec := simOf(dev).Spec
	warmup, steps := 1, 2
	run := func(batch, world int) (bench.Result, error) {
		cc := c
		cc.BatchSize = batch
		return bench.StepsWith(cc, o.Vocab, warmup, steps, bench.Options{SimWorld: world})
	}
	full, err := run(c.BatchSize, 1)
	if err != nil {
		return fmt.Errorf("one device: %w", err)
	}
	part, err := run(c.BatchSize/n, 1)
	if err != nil {
		return fmt.Errorf("batch %d: %w", c.BatchSize/n, err)
	}
	ddpRes, err := run(c.BatchSize/n, n)
	if err != nil {
		return fmt.Errorf("DDP: %w", err)
	}
	var tensors int
	err = tensor.Catch(func() {
		m, err := model.New(c.ModelConfig(o.Vocab), dev, c.Seed)
		if err != nil {
			panic(&tensor.Error{Op: "lab", Err: err})
		}
		ps := m.Parameters()
		tensors = len(ps)
		for _, p := range ps {
			p.T.Free()
		}
	})
	if err != nil {
		return err
	}
	d.Params = full.NumParams
	one, dpB, ddpB := dpBytes(full.NumParams, n, c.BatchSize, c.BlockSize)
	link := sim.BusBandwidth(n)
	d.Method = fmt.Sprintf("predicted for %d %s GPUs of one node by the simulator's cost model: device time only (this machine's host time to issue a step, "+
		"%.2f ms at batch %d, left out); DDP is bench's --sim-world %d prediction (%s); DataParallel's broadcast and gradient copies go through the first "+
		"device's link at %.0f GB/s with a launch per parameter tensor (%d tensors), its sums are one add per tensor on the first device "+
		"(12 bytes an element at %.0f%% of %.0f GB/s), and its update is the one-device step's update kernels",
		n, spec.Name, full.HostMsPerStep, c.BatchSize, n, sim.CommModel(n), link/1e9, tensors, 100*sim.BandwidthEfficiency, spec.HBM/1e9)
	d.BytesMethod = dpBytesMethod

	ms := func(s float64) float64 { return s * 1e3 }
	launch := sim.LaunchSeconds
	p4 := 4 * float64(full.NumParams)
	copyMs := ms(p4/link + float64(tensors)*launch) // one replica's parameters or gradients
	addMs := ms(3*p4/(sim.BandwidthEfficiency*spec.HBM) + float64(tensors)*launch)
	rowsMs := ms(float64(c.BatchSize-c.BatchSize/n)*float64(c.BlockSize)*8/link + float64(n-1)*launch)

	// One device.
	fb1, upd1 := splitUpdate(full)
	oneMode := DPMode{Name: "one device", StepMs: full.DeviceMsPerStep, FirstDeviceBytes: one,
		Timeline:     []Segment{seg(0, "fwd+bwd", 0, fb1), seg(0, "update", fb1, fb1+upd1)},
		TimelineNote: "the cost model's device time of the step's kernels, forward and backward then the update"}

	// DataParallel: broadcast to each replica in turn, the rows, every
	// device's forward and backward at once, each replica's gradients
	// copied and added on the first device in turn, the update there.
	fb, upd := splitUpdate(part)
	var tl []Segment
	t := 0.0
	for i := 1; i < n; i++ {
		tl = append(tl, seg(0, "broadcast", t, t+copyMs), seg(i, "broadcast", t, t+copyMs))
		t += copyMs
	}
	tl = append(tl, seg(0, "scatter", t, t+rowsMs))
	t += rowsMs
	for i := 0; i < n; i++ {
		tl = append(tl, seg(i, "fwd+bwd", t, t+fb))
	}
	t += fb
	for i := 1; i < n; i++ {
		tl = append(tl, seg(i, "sum", t, t+copyMs), seg(0, "sum", t, t+copyMs+addMs))
		t += copyMs + addMs
	}
	tl = append(tl, seg(0, "update", t, t+upd))
	t += upd
	dpMode := DPMode{Name: "DataParallel", StepMs: t, FirstDeviceBytes: dpB, Timeline: tl,
		TimelineNote: "composed: the copies and sums priced as the method says, forward and backward and the update from the simulator's step at batch B/N"}

	// DDP: each rank alike; the all-reduce runs on its stream during
	// backward, and the step waits for its exposed part.
	fbD, updD := splitUpdate(ddpRes)
	comm, exposed := ddpRes.CommMsPerStep, ddpRes.ExposedCommMsPerStep
	var tlD []Segment
	for i := 0; i < n; i++ {
		tlD = append(tlD, seg(i, "fwd+bwd", 0, fbD))
		if comm > 0 {
			tlD = append(tlD, seg(i, "all-reduce", max(0, fbD+exposed-comm), fbD+exposed))
		}
		tlD = append(tlD, seg(i, "update", fbD+exposed, fbD+exposed+updD))
	}
	ddpMode := DPMode{Name: "DDP", StepMs: ddpRes.DeviceMsPerStep + exposed, FirstDeviceBytes: ddpB, Timeline: tlD,
		TimelineNote: "the simulator's --sim-world step on each rank (the others imagined alike); the all-reduce's time on its stream drawn ending where the step's wait for it ends"}
	for _, m := range []*DPMode{&oneMode, &dpMode, &ddpMode} {
		m.TokensPerSec = float64(c.BatchSize*c.BlockSize) / (m.StepMs / 1e3)
		d.Modes = append(d.Modes, *m)
	}
	return nil
}

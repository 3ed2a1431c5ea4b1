package train

import (
	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/ddp"
)

// group is the processes whose gradients a step averages: this process
// alone (solo), or a data-parallel group (*ddp.Group). The loop and the
// step ask it the same questions either way.
type group interface {
	// Start readies the first step (ZeRO-1 shards the optimizer).
	Start() error
	// Hook is the last micro-step's gradient-ready hook (nil: none), Sync
	// makes the step's gradients the group's, and Finish ends the step
	// with the run's update.
	Hook() func(*tensor.Tensor)
	Sync(pipelined bool, ph ddp.Phases) error
	Finish(u ddp.Update) error
	// StopEarly reports whether a stop asked for on stop ends the run
	// after this step: a process alone stops at once; a group only at a
	// read point, together (Agree).
	StopEarly(stop <-chan struct{}) bool
	// Agree is a read point's agreement: whether any process stops
	// (stopped here, or asked on stop) and how many had a step that was
	// not finite (bad here).
	Agree(stopped bool, stop <-chan struct{}, bad bool) (anyStop bool, nBad int, err error)
	// Average replaces vals with their means over the processes.
	Average(vals []float64) error
	// Gather returns every process's vals, in rank order.
	Gather(vals []float64) ([][]float64, error)
	// OverlapMs is the communication per step that could overlap
	// backward.
	OverlapMs() float64
	// Shard is this rank's shard of the optimizer's flat buffers under
	// ZeRO-1, for its checkpoints (ok false: the optimizer is whole).
	Shard() (lo, hi, world int, store *dist.Store, ok bool)
	Close()
}

// solo is a process that trains alone.
type solo struct{}

func (solo) Start() error                { return nil }
func (solo) Hook() func(*tensor.Tensor)  { return nil }
func (solo) Sync(bool, ddp.Phases) error { return nil }
func (solo) Finish(u ddp.Update) error   { u.Whole(); return nil }
func (solo) Average([]float64) error     { return nil }
func (solo) OverlapMs() float64          { return 0 }
func (solo) Close()                      {}
func (solo) Shard() (lo, hi, world int, store *dist.Store, ok bool) {
	return 0, 0, 1, nil, false
}
func (solo) Gather(vals []float64) ([][]float64, error) {
	return [][]float64{append([]float64(nil), vals...)}, nil
}
func (solo) StopEarly(stop <-chan struct{}) bool { return stopped(stop) }

func (solo) Agree(stopped bool, _ <-chan struct{}, bad bool) (bool, int, error) {
	if bad {
		return stopped, 1, nil
	}
	return stopped, 0, nil
}

// stopped polls a stop channel.
func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}

// group is the run's group: solo where none was set (a run of one
// process, or a test's run built by hand).
func (r *run) group() group {
	if r.grp == nil {
		return solo{}
	}
	return r.grp
}

// stepUpdate is the run's update for one step, as a group finishes the
// step with it (ddp.Update): whole, or sharded with the group's reduction
// of the clip's sum of squares. hook (nil: none) runs first: tests
// inspect the complete gradients there. The run keeps the one it hands
// over (run.fin), so that a step allocates nothing.
type stepUpdate struct {
	r    *run
	step int
	lr   float64
	hook func()
}

func (u *stepUpdate) Whole() {
	if err := u.OnDevice(nil); err != nil {
		panic(err) // with nothing to reduce, no updater fails
	}
}

func (u *stepUpdate) OnDevice(reduce func() error) error {
	if u.hook != nil {
		u.hook()
	}
	return u.r.upd.apply(u.step, u.lr, reduce)
}

func (u *stepUpdate) ClipAcc() *tensor.Tensor { return u.r.upd.clipAcc() }

// Test hooks of the data-parallel group: newDeviceGroup stands in for NCCL
// (nil: NCCL), testDeviceBucket cuts small models into several buckets (0:
// --bucket-mb).
var (
	newDeviceGroup   func(*dist.Store, tensor.Device) (dist.DeviceGroup, error)
	testDeviceBucket int
)

// openDDP joins this process to the job's data-parallel group over store
// (ddp.Open), which owns the store from then on, and broadcasts rank 0's
// parameters.
func (r *run) openDDP(store *dist.Store) error {
	g, err := ddp.Open(store, ddp.Options{Config: r.cfg, Dev: r.dev, Pipelined: r.micros().pipelined(),
		Params: r.model.Parameters(), Opt: r.opt, Log: r.log, DeviceGroup: newDeviceGroup, BucketBytes: testDeviceBucket})
	if g != nil {
		r.grp = g // closed with the run, whatever Open returned
	}
	return err
}

// dropoutKey keys a step's dropout masks (backend.DropoutKey): a function
// of the seed and the step only, so resumes are exact; the masks of each
// row are keyed by its place in the step's global batch (dropoutRow0), so
// they do not depend on the micro-step or the rank it falls to.
func (r *run) dropoutKey(step int) uint64 { return backend.DropoutKey(r.cfg.Seed, step) }

// dropoutRow0 is the place, in the step's global batch, of the first row
// of this process's micro-step micro (the loader's data.MicroBatchFirst).
func (r *run) dropoutRow0(micro int) int64 {
	return int64(data.MicroBatchFirst(r.cfg.BatchSize, r.cfg.GradAccum, r.cfg.Rank, micro))
}

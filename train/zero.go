package train

import (
	"fmt"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/tensor"
)

// sharder is a process group with ZeRO-1's collectives (the TCP ring).
type sharder interface {
	dist.ShardGroup
	AllGatherShards(buf []float32) error
}

// zeroState is a rank's part of ZeRO-1 (Config.Zero 1): the optimizer
// keeps the moments of its shard of the flat parameters, [lo, hi) as
// dist.Shard cuts them; each step's gradients are reduce-scattered
// bucket by bucket during backward (the ddp's Reducer, from
// dist.NewShardReducer), the shard is updated, and the parameters are
// all-gathered.
type zeroState struct {
	pg     sharder
	lo, hi int
	// stage and gather are host copies of the flat buffers where the
	// device's memory is not the host's (a GPU over the TCP ring): the
	// gradient hook reads each gradient into its place in stage, and the
	// parameters are all-gathered in gather. (Two buffers: a gradient
	// never marked ready keeps its last value in stage, never a
	// parameter's.)
	stage, gather []float32
	// gradShard and paramShard are views of the flat buffers' shard.
	gradShard, paramShard *tensor.Tensor
	sumsq                 [1]float32
}

// openZero shards the packed optimizer over the group (after Pack and
// KeepHalf), builds the Reducer that reduce-scatters its flat gradients
// during backward, and logs what each rank keeps.
func (r *run) openZero() error {
	d := r.ddp
	pg, ok := d.pg.(sharder)
	if !ok && d.devGrad == nil {
		return fmt.Errorf("dist: --zero 1: the process group has no reduce-scatter")
	}
	flat := r.opt.PackedParams()
	if flat == nil {
		return fmt.Errorf("dist: --zero 1 needs the optimizer's flat buffers (one device, f32 parameters)")
	}
	whole := r.opt.StateBytes()
	n, world, rank := flat.Numel(), 0, 0
	if d.devGrad != nil {
		world, rank = d.devGrad.grp.Size(), d.devGrad.grp.Rank()
	} else {
		world, rank = d.pg.Size(), d.pg.Rank()
	}
	lo, hi := dist.Shard(n, world, rank)
	if !r.opt.Shard(lo, hi) {
		return fmt.Errorf("dist: --zero 1: the optimizer could not be sharded")
	}
	z := &zeroState{pg: pg, lo: lo, hi: hi}
	grads := r.opt.PackedGrads()
	tensor.ProgramOf(flat.Device()).Persist(func() {
		z.paramShard = flat.Rows(lo, hi)
		z.gradShard = grads.Rows(lo, hi)
	})
	logged := func(how string) {
		d.zero = z
		fmt.Fprintf(r.log, "zero: AdamW's state sharded over %d ranks: this rank keeps the moments of parameters [%d, %d) of %d, %s of %s; gradients reduce-scattered %s during backward\n",
			world, lo, hi, n, units.Bytes(r.opt.StateBytes()), units.Bytes(whole), how)
	}
	if d.devGrad != nil { // NCCL: the buckets reduce-scatter in device memory
		if err := d.devGrad.shard(); err != nil {
			return err
		}
		logged("on the device")
		return nil
	}
	// The gradients' places in the flat buffer, in the ddp's parameter
	// order, and the host buffer the ring reduces in place.
	host, view := grads.HostFloat32s()
	if !view {
		z.stage = make([]float32, n)
		host = z.stage
	}
	offs, sizes := make([]int, len(d.params)), make([]int, len(d.params))
	for k, off := range r.opt.FlatOffsets() {
		i, ok := d.index[r.opt.Params[k].T]
		if !ok {
			return fmt.Errorf("dist: --zero 1: the optimizer's parameter %s is not the model's", r.opt.Params[k].Name)
		}
		offs[i], sizes[i] = off, r.opt.Params[k].T.Numel()
	}
	red, err := dist.NewShardReducer(pg, host, offs, sizes, d.bucket)
	if err != nil {
		return fmt.Errorf("dist: --zero 1: %w", err)
	}
	d.red, d.view = red, view
	d.host = make([][]float32, len(d.params))
	for i := range d.params {
		d.host[i] = host[offs[i] : offs[i]+sizes[i]]
	}
	logged(fmt.Sprintf("in %d buckets", len(red.Buckets())))
	return nil
}

// gradsDone puts the reduce-scattered shard where the optimizer reads it,
// where the ring reduced a host copy of the gradients (z.stage).
func (z *zeroState) gradsDone() {
	if z.stage != nil {
		z.gradShard.SetFloat32s(z.stage[z.lo:z.hi])
	}
}

// host returns flat's elements on the host: its own memory where the
// device is the host's (then writes go straight to it), else z.gather with
// part, flat's elements from lo on, read into it (the shard alone for the
// gather, which overwrites the rest).
func (z *zeroState) host(flat, part *tensor.Tensor, lo int) (buf []float32, view bool) {
	if v, ok := flat.HostFloat32s(); ok {
		return v, true
	}
	if len(z.gather) != flat.Numel() {
		z.gather = make([]float32, flat.Numel())
	}
	part.ReadFloat32s(z.gather[lo : lo+part.Numel()])
	return z.gather, false
}

// allGather gives every rank every shard of the updated flat parameters.
func (z *zeroState) allGather(flat *tensor.Tensor) error {
	buf, view := z.host(flat, z.paramShard, z.lo)
	if err := z.pg.AllGatherShards(buf); err != nil {
		return fmt.Errorf("parameter all-gather: %w", err)
	}
	if !view {
		flat.SetFloat32s(buf)
	}
	return nil
}

// zeroUpdate is update for a sharded optimizer: the shards' sums of
// squared gradients are added over the group (the clip's global norm, and
// fp16's skip decision, are every rank's), the shard is updated, and the
// parameters are all-gathered, their bf16 copies refreshed.
func (r *run) zeroUpdate(step int, lr float64, hook func()) error {
	if hook != nil {
		hook()
	}
	d := r.ddp
	z := d.zero
	if d.devGrad != nil { // NCCL: every collective on the device, no wait on the host
		if err := r.stepOnDevice(step, lr, func() error { return d.devGrad.sumShards(r.upd.clipAcc) }); err != nil {
			d.err = err
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		if err := d.devGrad.gatherShards(r.opt.PackedParams()); err != nil {
			d.err = err
			return fmt.Errorf("step %d: %w", step+1, err)
		}
		r.opt.RefreshHalf()
		return nil
	}
	if err := r.stepOnDevice(step, lr, func() error { // the shards' sums of squares, added
		r.upd.clipAcc.ReadFloat32s(z.sumsq[:])
		if err := d.pg.AllReduce(z.sumsq[:], dist.Sum); err != nil {
			return err
		}
		r.upd.clipAcc.SetFloat32s(z.sumsq[:])
		return nil
	}); err != nil {
		d.err = err
		return fmt.Errorf("step %d: the gradient norm over the shards: %w", step+1, err)
	}
	if err := z.allGather(r.opt.PackedParams()); err != nil {
		d.err = err
		return fmt.Errorf("step %d: %w", step+1, err)
	}
	r.opt.RefreshHalf()
	return nil
}

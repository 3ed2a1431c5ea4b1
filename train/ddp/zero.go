package ddp

import (
	"fmt"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/tensor"
)

// sharder is a process group with ZeRO-1's collectives (the TCP ring).
type sharder interface {
	dist.ShardGroup
	AllGatherShards(buf []float32, b dist.Bounds) error
}

// matrixSharder is an optimizer that keeps whole matrices on a shard
// (optim.Muon), for the log.
type matrixSharder interface {
	Matrices() int
	ShardMatrices() int
}

// zeroState is a rank's part of ZeRO-1 (Config.Zero 1): the optimizer
// keeps the moments of its shard of the flat parameters, [lo, hi) as
// dist.Shard cuts them; each step's gradients are reduce-scattered
// bucket by bucket during backward (the ddp's Reducer, from
// dist.NewShardReducer), the shard is updated, and the parameters are
// all-gathered.
type zeroState struct {
	pg     sharder
	bounds dist.Bounds // the ranks' shards, as the optimizer cut them
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

// Start readies the group's first step, after the optimizer has packed
// its flat buffers and made its bf16 copies: under --zero 1 it shards the
// optimizer over the group (see openZero).
func (d *Group) Start() error {
	if !d.zeroWanted {
		return nil
	}
	return d.openZero()
}

// openZero shards the packed optimizer over the group, builds the Reducer
// that reduce-scatters its flat gradients during backward, and logs what
// each rank keeps.
func (d *Group) openZero() error {
	opt := d.opt
	pg, ok := d.pg.(sharder)
	if !ok && d.devGrad == nil {
		return fmt.Errorf("dist: --zero 1: the process group has no reduce-scatter")
	}
	flat := opt.PackedParams()
	if flat == nil {
		return fmt.Errorf("dist: --zero 1 needs the optimizer's flat buffers (one device, f32 parameters)")
	}
	whole := opt.StateBytes()
	n, world, rank := flat.Numel(), 0, 0
	if d.devGrad != nil {
		world, rank = d.devGrad.grp.Size(), d.devGrad.grp.Rank()
	} else {
		world, rank = d.pg.Size(), d.pg.Rank()
	}
	bounds := dist.Bounds(opt.ShardBounds(world))
	if err := bounds.Check(world); err != nil || bounds.Total() != n {
		return fmt.Errorf("dist: --zero 1: the optimizer cut its %d elements as %v (%v)", n, bounds, err)
	}
	lo, hi := bounds.Shard(rank)
	if !opt.Shard(lo, hi) {
		return fmt.Errorf("dist: --zero 1: the optimizer could not be sharded")
	}
	z := &zeroState{pg: pg, bounds: bounds, lo: lo, hi: hi}
	grads := opt.PackedGrads()
	tensor.ProgramOf(flat.Device()).Persist(func() {
		z.paramShard = flat.Rows(lo, hi)
		z.gradShard = grads.Rows(lo, hi)
	})
	logged := func(how string) {
		d.zero = z
		if m, ok := opt.(matrixSharder); ok {
			fmt.Fprintf(d.log, "zero: Muon's and AdamW's state sharded over %d ranks, cut between matrices where the ranks' costs even out: this rank keeps the state of parameters [%d, %d) of %d (%d of Muon's %d matrices), %s of %s; gradients reduce-scattered %s during backward\n",
				world, lo, hi, n, m.ShardMatrices(), m.Matrices(), units.Bytes(opt.StateBytes()), units.Bytes(whole), how)
			return
		}
		fmt.Fprintf(d.log, "zero: AdamW's state sharded over %d ranks: this rank keeps the moments of parameters [%d, %d) of %d, %s of %s; gradients reduce-scattered %s during backward\n",
			world, lo, hi, n, units.Bytes(opt.StateBytes()), units.Bytes(whole), how)
	}
	if d.devGrad != nil { // NCCL: the buckets reduce-scatter in device memory
		if err := d.devGrad.shard(bounds); err != nil {
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
	for k, off := range opt.FlatOffsets() {
		i, ok := d.index[opt.Parameters()[k].T]
		if !ok {
			return fmt.Errorf("dist: --zero 1: the optimizer's parameter %s is not the model's", opt.Parameters()[k].Name)
		}
		offs[i], sizes[i] = off, opt.Parameters()[k].T.Numel()
	}
	red, err := dist.NewShardReducer(pg, host, bounds, offs, sizes, d.bucket)
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
	if err := z.pg.AllGatherShards(buf, z.bounds); err != nil {
		return fmt.Errorf("parameter all-gather: %w", err)
	}
	if !view {
		flat.SetFloat32s(buf)
	}
	return nil
}

// Update is the run's update, as a group finishes a step with it.
type Update interface {
	// Whole clips and steps the whole parameters (each rank alike).
	Whole()
	// OnDevice clips on the device and steps the optimizer (its shard),
	// once reduce has made the clip's sum of squares (ClipAcc) the
	// group's; it returns reduce's error, having stepped nothing.
	OnDevice(reduce func() error) error
	ClipAcc() *tensor.Tensor
}

// Finish ends a step whose gradients Sync made the group's: u.Whole where
// every rank keeps the whole optimizer; under ZeRO-1 the shards' sums of
// squared gradients are added over the group (the clip's global norm, and
// fp16's skip decision, are every rank's), the shard is updated, and the
// parameters are all-gathered, their bf16 copies refreshed.
func (d *Group) Finish(u Update) error {
	z := d.zero
	if z == nil {
		u.Whole()
		return nil
	}
	opt := d.opt
	if d.devGrad != nil { // NCCL: every collective on the device, no wait on the host
		if err := u.OnDevice(func() error { return d.devGrad.sumShards(u.ClipAcc()) }); err != nil {
			d.err = err
			return err
		}
		if err := d.devGrad.gatherShards(opt.PackedParams()); err != nil {
			d.err = err
			return err
		}
		opt.RefreshHalf()
		return nil
	}
	if err := u.OnDevice(func() error { // the shards' sums of squares, added
		acc := u.ClipAcc()
		acc.ReadFloat32s(z.sumsq[:])
		if err := d.pg.AllReduce(z.sumsq[:], dist.Sum); err != nil {
			return err
		}
		acc.SetFloat32s(z.sumsq[:])
		return nil
	}); err != nil {
		d.err = err
		return fmt.Errorf("the gradient norm over the shards: %w", err)
	}
	if err := z.allGather(opt.PackedParams()); err != nil {
		d.err = err
		return err
	}
	opt.RefreshHalf()
	return nil
}

// Shard is this rank's shard [lo, hi) of the optimizer's flat buffers
// under ZeRO-1, and the group's size and store, for its checkpoints; ok
// is false where the optimizer is whole.
func (d *Group) Shard() (lo, hi, world int, store *dist.Store, ok bool) {
	if d.zero == nil {
		return 0, 0, 0, nil, false
	}
	return d.zero.lo, d.zero.hi, d.pg.Size(), d.store, true
}

package train

import (
	"fmt"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/tensor"
)

// sharder is a process group with ZeRO-1's collectives (the TCP ring).
type sharder interface {
	ReduceScatter(buf []float32, op dist.Op) error
	AllGatherShards(buf []float32) error
}

// zeroState is a rank's part of ZeRO-1 (Config.Zero 1): the optimizer
// keeps the moments of its shard of the flat parameters, [lo, hi) as
// dist.Shard cuts them, and each step reduce-scatters the gradients,
// updates the shard and all-gathers the parameters.
type zeroState struct {
	pg     sharder
	lo, hi int
	// stage is a host copy of a flat buffer where the device's memory is
	// not the host's (a GPU over the TCP ring).
	stage []float32
	// gradShard and paramShard are views of the flat buffers' shard.
	gradShard, paramShard *tensor.Tensor
	sumsq                 [1]float32
}

// openZero shards the packed optimizer over the group (after Pack and
// KeepHalf) and logs what each rank keeps.
func (r *run) openZero() error {
	d := r.ddp
	pg, ok := d.pg.(sharder)
	if !ok {
		return fmt.Errorf("dist: --zero 1: the process group has no reduce-scatter")
	}
	flat := r.opt.PackedParams()
	if flat == nil {
		return fmt.Errorf("dist: --zero 1 needs the optimizer's flat buffers (one device, f32 parameters)")
	}
	whole := r.opt.StateBytes()
	n, world := flat.Numel(), d.pg.Size()
	lo, hi := dist.Shard(n, world, d.pg.Rank())
	if !r.opt.Shard(lo, hi) {
		return fmt.Errorf("dist: --zero 1: the optimizer could not be sharded")
	}
	z := &zeroState{pg: pg, lo: lo, hi: hi}
	tensor.ProgramOf(flat.Device()).Persist(func() {
		z.paramShard = flat.Rows(lo, hi)
		z.gradShard = r.opt.PackedGrads().Rows(lo, hi)
	})
	d.zero = z
	fmt.Fprintf(r.log, "zero: AdamW's state sharded over %d ranks: this rank keeps the moments of parameters [%d, %d) of %d, %s of %s\n",
		world, lo, hi, n, units.Bytes(r.opt.StateBytes()), units.Bytes(whole))
	return nil
}

// host returns flat's elements on the host: its own memory where the
// device is the host's (then writes go straight to it), else z.stage with
// part, flat's elements from lo on, read into it (all of flat for the
// reduce-scatter, the shard alone for the gather, which overwrites the
// rest).
func (z *zeroState) host(flat, part *tensor.Tensor, lo int) (buf []float32, view bool) {
	if v, ok := flat.HostFloat32s(); ok {
		return v, true
	}
	if len(z.stage) != flat.Numel() {
		z.stage = make([]float32, flat.Numel())
	}
	part.ReadFloat32s(z.stage[lo : lo+part.Numel()])
	return z.stage, false
}

// reduceScatter averages the flat gradients over the group into this
// rank's shard (the rest of the buffer holds partial sums, read by
// nothing: the update and the norm cover the shard).
func (z *zeroState) reduceScatter(flat *tensor.Tensor) error {
	buf, view := z.host(flat, flat, 0)
	if err := z.pg.ReduceScatter(buf, dist.Avg); err != nil {
		return fmt.Errorf("gradient reduce-scatter: %w", err)
	}
	if !view {
		z.gradShard.SetFloat32s(buf[z.lo:z.hi])
	}
	return nil
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
	if err := r.stepOnDevice(step, lr, func() error { // the shards' sums of squares, added
		r.clipAcc.ReadFloat32s(z.sumsq[:])
		if err := d.pg.AllReduce(z.sumsq[:], dist.Sum); err != nil {
			return err
		}
		r.clipAcc.SetFloat32s(z.sumsq[:])
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

package ddp

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/optim"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// Group is a run's data parallelism, PyTorch DistributedDataParallel's
// recipe: rank 0's parameters are broadcast at the start; on the last
// micro-step of each optimizer step (the others accumulate locally, as
// no_sync does) a backward hook hands each gradient to the Reducer as soon
// as it is final, which all-reduces (averages) buckets of them in reverse
// parameter order while backward goes on; the step waits for the last
// bucket before clipping and AdamW.
type Group struct {
	store  *dist.Store
	pg     dist.ProcessGroup
	red    *dist.Reducer
	params []*nn.Parameter
	index  map[*tensor.Tensor]int
	// host holds each gradient on the host: a view of its storage on the
	// CPU (view true: all-reduced in place), a staging copy elsewhere.
	host   [][]float32
	view   bool
	bucket int // bytes
	err    error
	// first is when this step's first bucket started its all-reduce; the
	// time from then to the end of backward is communication that could
	// overlap backward (an upper bound), summed in overlapMs.
	first     time.Time
	overlapMs float64
	syncs     int // steps synchronized
	// devGrad, when set, reduces the gradients in device memory (NCCL)
	// instead of the Reducer; the TCP group still carries the small
	// host-side collectives (the logged loss, stops).
	devGrad *deviceDDP
	// hookFn is hook as a func value, made once: a method value made per
	// step would be a heap allocation per step.
	hookFn func(*tensor.Tensor)
	// opt is the run's optimizer (its flat buffers, its step count);
	// zeroWanted asks for ZeRO-1 (--zero 1), which Start sets up.
	opt        optim.Optimizer
	zeroWanted bool
	// out is the run's folder (its FlightDir gets the flight record), log
	// the run's log; stopSignal ends the SIGUSR1 handler.
	out        string
	log        io.Writer
	stopSignal func()
	// zero, with Config.Zero 1, is this rank's ZeRO-1 shard: the
	// optimizer's flat gradients are reduce-scattered bucket by bucket
	// during backward (its Reducer, red) instead of all-reduced.
	zero *zeroState
}

// useDeviceGroup says whether gradients go through a device group: with
// --dist-backend nccl, or auto on CUDA devices (one per process, so not
// with a pipeline over several).
func useDeviceGroup(backend string, dev tensor.Device, pipelined bool) bool {
	switch backend {
	case "nccl":
		return true
	case "", "auto":
		return dev.IsCUDA() && !pipelined
	}
	return false
}

// Join joins the job's rendezvous store: rank 0 serves it, the others
// connect. A stop (SIGTERM from the launcher) ends a rendezvous that waits.
func Join(cfg config.Config, log io.Writer) (*dist.Store, error) {
	if cfg.MasterAddr == "" || cfg.MasterPort <= 0 {
		return nil, fmt.Errorf("a world of %d processes needs MASTER_ADDR and MASTER_PORT (start it with fleet run, torchrun or srun)", cfg.WorldSize)
	}
	timeout := cfg.CollectiveTimeout()
	addr := net.JoinHostPort(cfg.MasterAddr, strconv.Itoa(cfg.MasterPort))
	fmt.Fprintf(log, "dist: rank %d of %d joining %s (tcp, collective timeout %v)\n", cfg.Rank, cfg.WorldSize, addr, timeout)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-cfg.Stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	store, err := dist.NewStore(ctx, dist.StoreConfig{Addr: addr, Rank: cfg.Rank, World: cfg.WorldSize,
		Secret: cfg.Secret, Timeout: timeout, Log: log})
	if err != nil {
		return nil, fmt.Errorf("dist: %w", err)
	}
	return store, nil
}

// Options are what a data-parallel group needs of its run.
type Options struct {
	// Config is the run's: its world, --dist-backend, --bucket-mb,
	// --zero, --comm-timeout and folder (Out, for flight records).
	Config config.Config
	Dev    tensor.Device
	// Pipelined: the parameters are spread over a pipeline's devices, and
	// backward runs without the gradient hook.
	Pipelined bool
	Params    []*nn.Parameter
	Opt       optim.Optimizer
	Log       io.Writer
	// DeviceGroup makes the device group where gradients go through one
	// (nil: NCCL); tests stand in a host group (package ddptest).
	DeviceGroup func(*dist.Store, tensor.Device) (dist.DeviceGroup, error)
	// BucketBytes, when positive, replaces --bucket-mb: tests cut small
	// models into several buckets.
	BucketBytes int
}

// Open forms the TCP group over the job's store and broadcasts rank 0's
// parameters. It owns the store from then on: the Group closes it, or
// Open does when it fails before there is one. A Group that is returned
// with an error must still be closed.
func Open(store *dist.Store, o Options) (*Group, error) {
	cfg := o.Config
	timeout := cfg.CollectiveTimeout()
	pg, err := dist.NewTCPGroup(store, dist.TCPOptions{Name: "ddp", Timeout: timeout})
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("dist: %w", err)
	}
	d := &Group{store: store, pg: pg, params: o.Params, index: map[*tensor.Tensor]int{},
		bucket: cfg.BucketMB << 20, out: cfg.Out, log: o.Log, opt: o.Opt,
		zeroWanted: cfg.Zero == 1}
	d.stopSignal = d.dumpOnSignal()
	for i, p := range d.params {
		d.index[p.T] = i
	}
	d.hookFn = d.hook
	backendName := "tcp"
	if useDeviceGroup(cfg.DistBackend, o.Dev, o.Pipelined) {
		newGroup := o.DeviceGroup
		if newGroup == nil {
			newGroup = NewNCCLGroup
		}
		grp, err := newGroup(store, o.Dev)
		if err == nil {
			d.devGrad, err = newDeviceDDP(grp, o.Dev, d.params, o.Opt.PackedGrads, d.bucket, timeout, o.Log)
		}
		if err != nil {
			return d, setting.Errorf("dist: {DistBackend} %s: %w", cfg.DistBackend, err)
		}
		if o.BucketBytes > 0 {
			d.devGrad.bucket = o.BucketBytes
		}
		backendName = "nccl"
		d.devGrad.flight = pg.Flight() // NCCL's collectives in the group's flight record
		if err := d.devGrad.broadcast(); err != nil {
			d.err = err
			return d, fmt.Errorf("dist: broadcasting rank 0's parameters: %w", err)
		}
		if err := d.sameStart(o.Opt.StepCount()); err != nil {
			return d, err
		}
		fmt.Fprintf(o.Log, "dist: %d ranks joined; parameters broadcast from rank 0; gradients all-reduced on the device (%s) in %d MiB buckets during backward, on a stream of their own\n",
			cfg.WorldSize, backendName, max(cfg.BucketMB, 1))
		return d, nil
	}
	// Every rank starts from rank 0's weights (resumed ones included).
	vals := make([][]float32, len(d.params))
	for i, p := range d.params {
		if v, ok := p.T.HostFloat32s(); ok {
			vals[i] = v
		} else {
			vals[i] = p.T.Float32s()
		}
	}
	if err := dist.BroadcastParams(pg, vals, d.bucket); err != nil {
		return d, fmt.Errorf("dist: broadcasting rank 0's parameters: %w", err)
	}
	for i, p := range d.params {
		if _, ok := p.T.HostFloat32s(); !ok {
			p.T.SetFloat32s(vals[i])
		}
	}
	if err := d.sameStart(o.Opt.StepCount()); err != nil {
		return d, err
	}
	fmt.Fprintf(o.Log, "dist: %d ranks joined; parameters broadcast from rank 0; gradients all-reduced in %d MiB buckets during backward\n",
		cfg.WorldSize, max(cfg.BucketMB, 1))
	return d, nil
}

// sameStart checks that every rank starts after the same number of
// optimizer steps. Each rank of a resumed group loads the newest checkpoint
// it finds in its --out; a rank that cannot see rank 0's (another node
// without shared storage) would start at another step, with other batches
// and optimizer state, and the group would write wrong checkpoints until
// its collectives happened to mismatch. Every rank fails instead.
func (d *Group) sameStart(steps int) error {
	world := d.pg.Size()
	send := []float32{float32(steps >> 16), float32(steps & 0xffff)} // exact in float32
	recv := make([]float32, 2*world)
	if err := d.pg.AllGather(send, recv); err != nil {
		return fmt.Errorf("dist: comparing the ranks' starting steps: %w", err)
	}
	at := func(q int) int { return int(recv[2*q])<<16 | int(recv[2*q+1]) }
	var odd []string
	for q := 1; q < world; q++ {
		if at(q) != at(0) {
			odd = append(odd, fmt.Sprintf("rank %d after %d", q, at(q)))
		}
	}
	if len(odd) == 0 {
		return nil
	}
	return setting.Errorf("dist: the ranks resumed from different checkpoints: rank 0 after %d optimizer steps, %s; "+
		"every rank must see rank 0's checkpoints in {Out} (on several nodes, storage they share)", at(0), strings.Join(odd, ", "))
}

// logOverlap logs how many of a step's buckets started during backward
// (all-reduced, or reduce-scattered where sharded): the overlap, once.
func logOverlap(w io.Writer, early, buckets int, sharded bool) {
	what := "all-reduced"
	if sharded {
		what = "reduce-scattered"
	}
	fmt.Fprintf(w, "dist: %d of %d buckets %s during backward, the rest after it\n", early, buckets, what)
}

// hook is the gradient-ready hook of a synchronizing backward pass.
func (d *Group) hook(leaf *tensor.Tensor) {
	if d.devGrad != nil {
		d.devGrad.ready(leaf)
		return
	}
	i, ok := d.index[leaf]
	if !ok || d.red == nil {
		return
	}
	if !d.view {
		leaf.Grad.ReadFloat32s(d.host[i])
	}
	d.red.GradReady(i)
	if d.first.IsZero() && d.red.Launched() > 0 {
		d.first = time.Now()
	}
}

// Hook is the gradient-ready hook of the last micro-step's backward pass
// (the others accumulate locally, as no_sync does): it hands each final
// gradient to the all-reduce (or reduce-scatter) of its bucket.
func (d *Group) Hook() func(*tensor.Tensor) { return d.hookFn }

// Phases is the run's step telemetry, told when the step's communication
// begins.
type Phases interface{ Communicating() }

// Sync finishes the step's gradient synchronisation after the last
// micro-step's backward: all-reduced (or, under ZeRO-1, reduce-scattered
// into this rank's shard). pipelined says the backward passes ran without
// the hook (a pipeline's micro-batches run backward several times).
func (d *Group) Sync(pipelined bool, ph Phases) error {
	ph.Communicating()
	sync := d.sync
	if pipelined {
		sync = d.syncAll
	}
	if err := sync(); err != nil {
		d.err = err
		return err
	}
	return nil
}

// sync finishes the gradients' all-reduce after the last micro-step's
// backward. The first call builds the Reducer over the gradients the
// first backward allocated, and all-reduces them without overlap.
func (d *Group) sync() error {
	d.syncs++
	if d.devGrad != nil {
		return d.devGrad.sync()
	}
	if !d.first.IsZero() {
		d.overlapMs += float64(time.Since(d.first).Nanoseconds()) / 1e6
		d.first = time.Time{}
	}
	if d.red != nil && d.syncs == 2 {
		// The first step's buckets may be cut after its backward; the
		// second's show the overlap.
		logOverlap(d.log, d.red.Launched(), len(d.red.Buckets()), d.zero != nil)
	}
	if d.zero != nil {
		if err := d.red.Wait(); err != nil {
			return err
		}
		d.zero.gradsDone()
		return nil
	}
	if d.red == nil {
		d.host = make([][]float32, len(d.params))
		d.view = true
		for i, p := range d.params {
			if p.T.Grad == nil {
				return fmt.Errorf("dist: parameter %s has no gradient after backward", p.Name)
			}
			v, ok := p.T.Grad.HostFloat32s()
			d.view = d.view && ok
			d.host[i] = v
		}
		if !d.view {
			for i, p := range d.params {
				d.host[i] = make([]float32, p.T.Numel())
				p.T.Grad.ReadFloat32s(d.host[i])
			}
		}
		d.red = dist.NewReducer(d.pg, d.host, d.bucket)
		for i := len(d.params) - 1; i >= 0; i-- {
			d.red.GradReady(i)
		}
	}
	if err := d.red.Wait(); err != nil {
		return err
	}
	if !d.view {
		for i, p := range d.params {
			p.T.Grad.SetFloat32s(d.host[i])
		}
	}
	return nil
}

// syncAll all-reduces every gradient after a backward pass that ran
// without the hook (a pipelined step, whose micro-batches run backward
// several times): no overlap, the gradients as they are.
func (d *Group) syncAll() error {
	if d.devGrad != nil {
		d.syncs++
		return d.devGrad.sync()
	}
	if d.red != nil && !d.view {
		for i, p := range d.params {
			p.T.Grad.ReadFloat32s(d.host[i])
		}
	}
	return d.sync()
}

// Agree is a read point's agreement: it tells the group whether this rank
// stops (stopped, or asked to on stop) and whether its loss of the step
// was not finite (bad), and returns whether any rank stops and how many
// ranks' losses were not finite. Every rank then stops after the same
// step, so that rank 0's checkpoint is the group's and no rank is left
// waiting in a collective the others never join; and a diverged rank
// stops the group at the first bad step, before anything is saved.
func (d *Group) Agree(stopped bool, stop <-chan struct{}, bad bool) (anyStop bool, nBad int, err error) {
	select {
	case <-stop:
		stopped = true
	default:
	}
	v := [2]float32{}
	if stopped {
		v[0] = 1
	}
	if bad {
		v[1] = 1
	}
	if err := d.pg.AllReduce(v[:], dist.Sum); err != nil {
		d.err = err
		return false, 0, fmt.Errorf("agreeing on a stop: %w", err)
	}
	return v[0] > 0, int(v[1] + 0.5), nil
}

// Average replaces vals (at most 8: the logged loss and times, the
// evaluation's losses) with their means over the ranks, all-reduced in
// float32.
func (d *Group) Average(vals []float64) error {
	var buf [8]float32
	f := buf[:len(vals)]
	for i, v := range vals {
		f[i] = float32(v)
	}
	if err := d.pg.AllReduce(f, dist.Avg); err != nil {
		d.err = err
		return err
	}
	for i, v := range f {
		vals[i] = float64(v)
	}
	return nil
}

// OverlapMs is the mean time per step from the first bucket's launch to
// the end of backward: communication that could overlap backward (an
// upper bound).
func (d *Group) OverlapMs() float64 { return d.overlapMs / float64(max(d.syncs, 1)) }

// Close stops the group: where the run failed, or a collective did, this
// rank's flight record is written first; otherwise the ranks meet once
// more, so that rank 0's store outlives the others' last requests.
func (d *Group) Close() {
	if d == nil {
		return
	}
	if d.stopSignal != nil {
		d.stopSignal()
	}
	if d.devGrad != nil {
		d.devGrad.close(d.err != nil)
	}
	if d.pg == nil { // a Stepper's: a device group alone
		return
	}
	if d.err != nil || d.failedCollective() {
		reason := "a collective failed"
		if d.err != nil {
			reason = d.err.Error()
		}
		d.dumpFlight(reason)
	}
	if d.err == nil {
		d.pg.Barrier() // rank 0's store must outlive the others' last requests
	}
	d.pg.Close()
	d.store.Close()
}

// WithDeviceGroup is a Group over grp alone, with no TCP group or store:
// a benchmark's (train.Stepper), whose steps average the gradients in
// device memory as the trainer's do over NCCL, in buckets launched during
// backward. The ranks start as they are (no broadcast).
func WithDeviceGroup(grp dist.DeviceGroup, o Options) (*Group, error) {
	d := &Group{params: o.Params, index: map[*tensor.Tensor]int{}, bucket: o.Config.BucketMB << 20,
		log: o.Log, opt: o.Opt, zeroWanted: o.Config.Zero == 1}
	for i, p := range d.params {
		d.index[p.T] = i
	}
	d.hookFn = d.hook
	dd, err := newDeviceDDP(grp, o.Dev, d.params, o.Opt.PackedGrads, d.bucket, o.Config.CollectiveTimeout(), o.Log)
	if err != nil {
		return nil, err
	}
	d.devGrad = dd
	return d, nil
}

// StopEarly is false: a group stops only at a read point, together
// (Agree), so that no rank waits in a collective the others never join.
func (d *Group) StopEarly(<-chan struct{}) bool { return false }

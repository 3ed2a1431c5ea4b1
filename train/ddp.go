package train

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
	"github.com/fleetml/fleet/train/config"
)

// ddp is a run's data parallelism, PyTorch DistributedDataParallel's
// recipe: rank 0's parameters are broadcast at the start; on the last
// micro-step of each optimizer step (the others accumulate locally, as
// no_sync does) a backward hook hands each gradient to the Reducer as soon
// as it is final, which all-reduces (averages) buckets of them in reverse
// parameter order while backward goes on; the step waits for the last
// bucket before clipping and AdamW.
type ddp struct {
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
	// out is the run's folder (its FlightDir gets the flight record), log
	// the run's log; stopSignal ends the SIGUSR1 handler.
	out        string
	log        io.Writer
	stopSignal func()
	// zero, with Config.Zero 1, is this rank's ZeRO-1 shard: the
	// optimizer's flat gradients (flatGrads) are reduce-scattered bucket
	// by bucket during backward (its Reducer, red) instead of all-reduced.
	zero      *zeroState
	flatGrads func() *tensor.Tensor
}

// useDeviceGroup says whether gradients go through a device group: with
// --dist-backend nccl, or auto on CUDA devices (one per process, so not
// with a pipeline over several).
func useDeviceGroup(backend string, dev tensor.Device, pipelined bool) bool {
	switch backend {
	case "nccl":
		return true
	case "", "auto":
		return config.IsCUDA(dev) && !pipelined
	}
	return false
}

// joinStore joins the job's rendezvous store: rank 0 serves it, the others
// connect. A stop (SIGTERM from the launcher) ends a rendezvous that waits.
func joinStore(cfg Config, log io.Writer) (*dist.Store, error) {
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

// openDDP forms the TCP group over the job's store and broadcasts rank 0's
// parameters. It owns the store from then on: the ddp closes it, or
// openDDP does when it fails before there is one.
func (r *run) openDDP(store *dist.Store) error {
	cfg := r.cfg
	timeout := cfg.CollectiveTimeout()
	pg, err := dist.NewTCPGroup(store, dist.TCPOptions{Name: "ddp", Timeout: timeout})
	if err != nil {
		store.Close()
		return fmt.Errorf("dist: %w", err)
	}
	d := &ddp{store: store, pg: pg, params: r.model.Parameters(), index: map[*tensor.Tensor]int{},
		bucket: cfg.BucketMB << 20, out: cfg.Out, log: r.log, flatGrads: r.opt.PackedGrads}
	d.stopSignal = d.dumpOnSignal()
	for i, p := range d.params {
		d.index[p.T] = i
	}
	d.hookFn = d.hook
	r.ddp = d
	backendName := "tcp"
	if useDeviceGroup(cfg.DistBackend, r.dev, r.pipe != nil) {
		grp, err := newDeviceGroup(store, r.dev)
		if err == nil {
			d.devGrad, err = newDeviceDDP(grp, r.dev, d.params, r.opt.PackedGrads, d.bucket, timeout, r.log)
		}
		if err != nil {
			return setting.Errorf("dist: {DistBackend} %s: %w", cfg.DistBackend, err)
		}
		backendName = "nccl"
		d.devGrad.flight = pg.Flight() // NCCL's collectives in the group's flight record
		if err := d.devGrad.broadcast(); err != nil {
			d.err = err
			return fmt.Errorf("dist: broadcasting rank 0's parameters: %w", err)
		}
		if err := d.sameStart(r.opt.Steps); err != nil {
			return err
		}
		fmt.Fprintf(r.log, "dist: %d ranks joined; parameters broadcast from rank 0; gradients all-reduced on the device (%s) in %d MiB buckets during backward, on a stream of their own\n",
			cfg.WorldSize, backendName, max(cfg.BucketMB, 1))
		return nil
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
		return fmt.Errorf("dist: broadcasting rank 0's parameters: %w", err)
	}
	for i, p := range d.params {
		if _, ok := p.T.HostFloat32s(); !ok {
			p.T.SetFloat32s(vals[i])
		}
	}
	if err := d.sameStart(r.opt.Steps); err != nil {
		return err
	}
	fmt.Fprintf(r.log, "dist: %d ranks joined; parameters broadcast from rank 0; gradients all-reduced in %d MiB buckets during backward\n",
		cfg.WorldSize, max(cfg.BucketMB, 1))
	return nil
}

// sameStart checks that every rank starts after the same number of
// optimizer steps. Each rank of a resumed group loads the newest checkpoint
// it finds in its --out; a rank that cannot see rank 0's (another node
// without shared storage) would start at another step, with other batches
// and optimizer state, and the group would write wrong checkpoints until
// its collectives happened to mismatch. Every rank fails instead.
func (d *ddp) sameStart(steps int) error {
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
func (d *ddp) hook(leaf *tensor.Tensor) {
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

// sync finishes the gradients' all-reduce after the last micro-step's
// backward. The first call builds the Reducer over the gradients the
// first backward allocated, and all-reduces them without overlap.
func (d *ddp) sync() error {
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
func (d *ddp) syncAll() error {
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

// agreeStep tells the group whether this rank was asked to stop (a
// signal) and whether its loss of the step was not finite, and returns
// whether any rank was asked to stop and how many ranks' losses were not
// finite. Every rank then stops after the same step, so that rank 0's
// checkpoint is the group's and no rank is left waiting in a collective
// the others never join; and a diverged rank stops the group at the first
// bad step, before anything is saved.
func (d *ddp) agreeStep(stop, bad bool) (anyStop bool, nBad int, err error) {
	v := [2]float32{}
	if stop {
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

// average all-reduces logged values (mean over ranks).
func (d *ddp) average(vals []float32) error { return d.pg.AllReduce(vals, dist.Avg) }

func (d *ddp) close() {
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

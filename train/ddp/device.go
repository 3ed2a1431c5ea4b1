package ddp

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/dist"
	"github.com/fleetml/fleet/dist/nccl"
	"github.com/fleetml/fleet/internal/setting"
	"github.com/fleetml/fleet/internal/units"
	"github.com/fleetml/fleet/nn"
	"github.com/fleetml/fleet/tensor"
)

// deviceDDP all-reduces gradients in device memory over a DeviceGroup
// (NCCL) instead of through the host.
//
// Where the optimizer keeps every gradient in one flat buffer (a packed
// AdamW, the usual case on one device), the buffer is cut into buckets of
// about --bucket-mb, and each bucket is averaged in place, on the device's
// communication stream (tensor.OnCommQueue), as soon as backward has
// finished every gradient in it (the gradient-ready hook): the all-reduce
// overlaps the rest of backward, as PyTorch DDP's does. The buckets every
// rank launches in the same order, the one in which backward finishes
// them. After backward the compute stream waits for the communication
// stream (tensor.JoinComm) on the device; the host does not wait.
//
// Elsewhere the gradients are copied into a flat buffer of its own after
// backward, averaged in one piece, and copied back.
//
// Nothing waits on the host for a collective: a watchdog goroutine polls
// each step's communication (a probe, no wait) and the communicator's
// asynchronous error, and aborts the communicator when a peer has failed
// or the work is not done within the collective timeout, so a dead peer
// is an error naming the collective, never a hang; the step that notices
// returns it.
type deviceDDP struct {
	grp     dist.DeviceGroup
	dev     tensor.Device
	params  []*nn.Parameter
	index   map[*tensor.Tensor]int
	packed  func() *tensor.Tensor // the optimizer's flat gradients, or nil
	bucket  int                   // bytes per bucket, about
	n       int
	timeout time.Duration
	ops     int // collectives launched
	steps   int // steps synchronized
	log     io.Writer
	early   int // buckets of this step launched from the hook

	// The overlapped path: grads is the flat buffer the buckets were cut
	// from (at base), bucketOf each parameter's bucket.
	grads    *tensor.Tensor
	base     uintptr
	buckets  []devBucket
	bucketOf []int
	hookErr  error // a launch from the hook that failed, returned by sync

	// The copying path.
	flat  *tensor.Tensor   // [n] F32: every gradient, in parameter order
	views []*tensor.Tensor // flat's piece of each parameter, shaped like it

	// sharded (ZeRO-1, shard): each bucket is reduce-scattered into the
	// ranks' shards of the flat gradients, as bounds cut them, instead
	// of all-reduced.
	sharded bool
	bounds  dist.Bounds

	// flight, where set, is the TCP group's flight recorder: each
	// collective enqueued is recorded there (running from its enqueueing,
	// done when the watchdog sees its step's work finish, failed with the
	// watchdog's error), numbered with the group's own. launched holds the
	// records of the work not yet handed to the watchdog.
	flight   *dist.FlightRecorder
	launched []int

	wd watchdogState
}

// watchdogState is what the watchdog and the steps share: the
// communication not yet seen done and what the watchdog found, under mu;
// and whether the communicator was aborted.
type watchdogState struct {
	mu      sync.Mutex
	pending []inflight // joined communication not yet seen done, oldest first
	err     error      // what the watchdog found; every later sync returns it
	stop    chan struct{}
	stopped chan struct{}
	// aborted: the communicator was aborted (once: by the watchdog, a
	// failed collective or close), and nothing may use it after.
	abortOnce sync.Once
	abortErr  error
	aborted   atomic.Bool
}

// abort aborts the communicator, once; later calls return the first's
// result.
func (d *deviceDDP) abort() error {
	d.wd.abortOnce.Do(func() {
		d.wd.aborted.Store(true)
		d.wd.abortErr = d.grp.Abort()
	})
	return d.wd.abortErr
}

// devBucket is a contiguous piece of the flat gradients, [off, off+n)
// elements, holding params parameters' gradients, left of them not yet
// final in this step's backward.
type devBucket struct {
	off, n, params, left int
	launched             bool
	tag                  string // "bucket N", for the flight record
}

// inflight is one step's communication, joined by the compute stream,
// and its collectives' flight records.
type inflight struct {
	probe backend.CommProbe
	since time.Time
	what  string
	seqs  []int
}

// record adds an enqueued collective to the flight record, if kept, and
// remembers it for the next watch.
func (d *deviceDDP) record(op, tag string, elems int) int {
	if d.flight == nil {
		return 0
	}
	seq := d.flight.Record("nccl "+op, tag, int64(4*elems), dist.FlightRunning)
	d.launched = append(d.launched, seq)
	return seq
}

// failed records that the collective seq, the last recorded, failed to
// enqueue: it will not be watched.
func (d *deviceDDP) failed(seq int, err error) {
	d.settle([]int{seq}, dist.FlightFailed, err)
	if n := len(d.launched); n > 0 && d.launched[n-1] == seq {
		d.launched = d.launched[:n-1]
	}
}

// abandon records every collective enqueued and not yet watched as failed
// with err: a step that gives up before handing them to the watchdog.
func (d *deviceDDP) abandon(err error) {
	d.settle(d.launched, dist.FlightFailed, err)
	d.launched = nil
}

// settle moves flight records to state (done, or failed with err).
func (d *deviceDDP) settle(seqs []int, state string, err error) {
	if d.flight == nil {
		return
	}
	for _, q := range seqs {
		d.flight.Set(q, state, err)
	}
}

// watchPeriod is how often the watchdog polls.
const watchPeriod = 50 * time.Millisecond

// NewNCCLGroup makes the device process group of a job: NCCL, its unique
// id shared through the store (the default of Options.DeviceGroup).
func NewNCCLGroup(store *dist.Store, dev tensor.Device) (dist.DeviceGroup, error) {
	if !dev.IsCUDA() {
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

// newDeviceDDP readies the all-reduce of params' gradients over grp.
// packed returns the optimizer's flat gradient buffer when it has one
// (nil: the copying path); bucket is the bucket size in bytes.
func newDeviceDDP(grp dist.DeviceGroup, dev tensor.Device, params []*nn.Parameter, packed func() *tensor.Tensor, bucket int, timeout time.Duration, log io.Writer) (*deviceDDP, error) {
	d := &deviceDDP{grp: grp, dev: dev, params: params, index: map[*tensor.Tensor]int{}, packed: packed,
		bucket: max(bucket, 1<<20), timeout: timeout, log: log, wd: watchdogState{stop: make(chan struct{}), stopped: make(chan struct{})}}
	for i, p := range params {
		if p.T.Device() != dev {
			return nil, setting.Errorf("{DistBackend} nccl: parameter %s is on %v, not %v (pipelines use {DistBackend} tcp)", p.Name, p.T.Device(), dev)
		}
		d.index[p.T] = i
		d.n += p.T.Numel()
	}
	go d.watchdog()
	return d, nil
}

// collective enqueues op on the device's stream and waits for it, polling
// the communicator meanwhile: for the broadcast at the start, the one
// collective the host waits for.
func (d *deviceDDP) collective(name string, buf *tensor.Tensor, op func(addr, stream uintptr) error) error {
	d.ops++
	size := units.Bytes(int64(4 * buf.Numel()))
	seq := d.record(name, "parameters", buf.Numel())
	d.launched = d.launched[:0] // the host waits for this one here
	err := d.waitCollective(name, size, buf, op)
	if err != nil {
		d.settle([]int{seq}, dist.FlightFailed, err)
	} else {
		d.settle([]int{seq}, dist.FlightDone, nil)
	}
	return err
}

// waitCollective is collective's enqueueing and wait.
func (d *deviceDDP) waitCollective(name, size string, buf *tensor.Tensor, op func(addr, stream uintptr) error) error {
	err := tensor.OnDeviceQueue(d.dev, func(stream uintptr) error {
		addr, ok := buf.DeviceAddress()
		if !ok {
			return fmt.Errorf("%v has no device addresses", d.dev)
		}
		return op(addr, stream)
	})
	if err != nil {
		return fmt.Errorf("%s #%d (%s): %w", name, d.ops, size, err)
	}
	done := make(chan error, 1)
	go func() { done <- tensor.Catch(func() { buf.Rows(0, 1).Item() }) }() // waits for the stream
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
				d.abort()
				return fmt.Errorf("%s #%d (%s): a peer failed: %w", name, d.ops, size, err)
			}
		case <-deadline:
			d.abort()
			return setting.Errorf("%s #%d (%s): not complete after %v ({CommTimeout}): a peer is gone or stuck; the communicator was aborted",
				name, d.ops, size, d.timeout)
		}
	}
}

// broadcast gives every rank rank 0's parameters, through a flat buffer
// made for the purpose and freed after.
func (d *deviceDDP) broadcast() error {
	var flat *tensor.Tensor
	var views []*tensor.Tensor
	if err := tensor.Catch(func() {
		tensor.Persist(func() { flat, views = d.flatViews() })
		for i, p := range d.params {
			views[i].CopyFrom(p.T)
		}
	}); err != nil {
		if flat != nil {
			flat.Free()
		}
		return err
	}
	defer flat.Free()
	if err := d.collective("broadcast", flat, func(addr, stream uintptr) error {
		return d.grp.Broadcast(addr, d.n, dist.F32, 0, stream)
	}); err != nil {
		return err
	}
	return tensor.Catch(func() {
		for i, p := range d.params {
			p.T.CopyFrom(views[i])
		}
	})
}

// flatViews makes a flat F32 buffer of every parameter's size and its
// piece of each, in parameter order.
func (d *deviceDDP) flatViews() (*tensor.Tensor, []*tensor.Tensor) {
	var flat *tensor.Tensor
	var views []*tensor.Tensor
	tensor.NoGrad(func() {
		flat = tensor.Zeros(d.dev, d.n)
		off := 0
		for _, p := range d.params {
			k := p.T.Numel()
			views = append(views, flat.Rows(off, off+k).Reshape(p.T.Shape()...))
			off += k
		}
	})
	return flat, views
}

// failure is what the watchdog found, if anything.
func (d *deviceDDP) failure() error {
	d.wd.mu.Lock()
	defer d.wd.mu.Unlock()
	return d.wd.err
}

// ready is the gradient-ready hook's part: leaf's gradient is final, so
// its bucket may be complete, and then it is all-reduced at once.
func (d *deviceDDP) ready(leaf *tensor.Tensor) {
	if d.grads == nil || d.hookErr != nil || d.wd.aborted.Load() {
		return
	}
	i, ok := d.index[leaf]
	if !ok {
		return
	}
	b := &d.buckets[d.bucketOf[i]]
	if b.left--; b.left == 0 && !b.launched {
		d.early++
		d.hookErr = d.launch(d.bucketOf[i])
	}
}

// launch queues bucket b's all-reduce on the communication stream.
func (d *deviceDDP) launch(b int) error {
	if d.wd.aborted.Load() { // the watchdog gave up on the communicator
		if err := d.failure(); err != nil {
			return err
		}
		return fmt.Errorf("all-reduce of step %d: the communicator was aborted", d.steps)
	}
	bk := &d.buckets[b]
	bk.launched = true
	d.ops++
	what := "all-reduce"
	if d.sharded {
		what = "reduce-scatter"
	}
	seq := d.record(what, bk.tag, bk.n)
	err := tensor.OnCommQueue(d.dev, func(stream uintptr) error {
		if d.sharded {
			return d.grp.ReduceScatterShards(d.base+uintptr(4*bk.off), bk.off, bk.n, d.bounds, dist.F32, dist.Avg, stream)
		}
		return d.grp.AllReduce(d.base+uintptr(4*bk.off), bk.n, dist.F32, dist.Avg, stream)
	})
	if err != nil {
		d.failed(seq, err)
		return fmt.Errorf("%s of bucket %d of %d (%s) in step %d: %w", what, b+1, len(d.buckets), units.Bytes(int64(4*bk.n)), d.steps, err)
	}
	return nil
}

// shard makes the buckets reduce-scatter into the ranks' shards of the
// packed gradients (ZeRO-1), as b cuts them. It needs the overlapped
// path: the optimizer's flat buffer.
func (d *deviceDDP) shard(b dist.Bounds) error {
	if d.packed() == nil {
		return fmt.Errorf("dist: --zero 1 needs the optimizer's flat gradients")
	}
	d.sharded, d.bounds = true, b
	return nil
}

// onComm queues one of a sharded step's collectives on the communication
// stream after the compute issued so far, makes the compute after it
// wait for it, and hands it to the watchdog; the host does not wait.
func (d *deviceDDP) onComm(op, tag, what string, buf *tensor.Tensor, enqueue func(addr, stream uintptr) error) error {
	if err := d.failure(); err != nil {
		return err
	}
	if d.wd.aborted.Load() {
		return fmt.Errorf("%s: the communicator was aborted", what)
	}
	d.ops++
	seq := d.record(op, tag, buf.Numel())
	err := tensor.OnCommQueue(d.dev, func(stream uintptr) error {
		addr, ok := buf.DeviceAddress()
		if !ok {
			return fmt.Errorf("%v has no device addresses", d.dev)
		}
		return enqueue(addr, stream)
	})
	if err == nil {
		var probe backend.CommProbe
		if probe, err = tensor.JoinComm(d.dev); err == nil {
			d.watch(probe, what)
		}
	}
	if err != nil {
		d.failed(seq, err)
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// sumShards adds the ranks' acc (one F32: a shard's sum of squared
// gradients) on the device, so that every rank clips by, and fp16's
// scaler decides on, the whole gradient's norm.
func (d *deviceDDP) sumShards(acc *tensor.Tensor) error {
	return d.onComm("all-reduce", "gradient norm", fmt.Sprintf("the gradient norm's all-reduce of step %d", d.steps), acc, func(addr, stream uintptr) error {
		return d.grp.AllReduce(addr, 1, dist.F32, dist.Sum, stream)
	})
}

// gatherShards gives every rank each rank's updated shard of the flat
// parameters.
func (d *deviceDDP) gatherShards(params *tensor.Tensor) error {
	what := fmt.Sprintf("the parameters' all-gather of step %d (%s)", d.steps, units.Bytes(int64(4*params.Numel())))
	return d.onComm("all-gather-shards", "parameters", what, params, func(addr, stream uintptr) error {
		return d.grp.AllGatherShards(addr, d.bounds, dist.F32, stream)
	})
}

// sync finishes the averaging of the gradients after the last micro-step's
// backward. On the overlapped path it launches the buckets backward did
// not (all of them the first time, before the buckets are cut), and makes
// the compute stream wait for the communication; the host does not.
func (d *deviceDDP) sync() error {
	if err := d.failure(); err != nil {
		return err
	}
	d.steps++
	g := d.packed()
	if g == nil {
		return d.syncCopies()
	}
	if err := d.hookErr; err != nil {
		d.abandon(err)
		return err
	}
	if d.grads != g {
		if err := d.cut(g); err != nil {
			return err
		}
		fmt.Fprintf(d.log, "dist: the flat gradients (%s) cut into %d all-reduce buckets\n", units.Bytes(int64(4*g.Numel())), len(d.buckets))
	} else if d.steps == 2 {
		// The first step's buckets were cut after its backward; the
		// second's show the overlap.
		logOverlap(d.log, d.early, len(d.buckets), d.sharded)
	}
	d.early = 0
	for b := range d.buckets {
		if !d.buckets[b].launched {
			if err := d.launch(b); err != nil {
				d.abandon(err)
				return err
			}
		}
	}
	probe, err := tensor.JoinComm(d.dev)
	if err != nil {
		d.abandon(err)
		return fmt.Errorf("all-reduce of step %d: %w", d.steps, err)
	}
	d.watch(probe, fmt.Sprintf("the all-reduce of step %d (%d buckets, %s)", d.steps, len(d.buckets), units.Bytes(int64(4*d.n))))
	for b := range d.buckets {
		bk := &d.buckets[b]
		bk.launched, bk.left = false, bk.params
	}
	return nil
}

// cut divides the flat gradient buffer g into buckets: each parameter's
// gradient is a view of g, found by its address; consecutive gradients
// in g's order fill a bucket up to about d.bucket bytes.
func (d *deviceDDP) cut(g *tensor.Tensor) error {
	type piece struct{ param, off, n int }
	pieces := make([]piece, 0, len(d.params))
	err := tensor.OnDeviceQueue(d.dev, func(uintptr) error {
		base, ok := g.DeviceAddress()
		if !ok {
			return fmt.Errorf("%v has no device addresses", d.dev)
		}
		d.base = base
		for i, p := range d.params {
			grad := p.T.Grad
			if grad == nil {
				return fmt.Errorf("parameter %s has no gradient", p.Name)
			}
			a, _ := grad.DeviceAddress()
			off := int(a-base) / 4
			if a < base || off+grad.Numel() > g.Numel() {
				return fmt.Errorf("the gradient of %s is not in the optimizer's flat buffer", p.Name)
			}
			pieces = append(pieces, piece{i, off, grad.Numel()})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("dist: cutting the gradients into buckets: %w", err)
	}
	sort.Slice(pieces, func(a, b int) bool { return pieces[a].off < pieces[b].off })
	d.buckets, d.bucketOf = d.buckets[:0], make([]int, len(d.params))
	for _, p := range pieces {
		nb := len(d.buckets)
		if nb == 0 || 4*d.buckets[nb-1].n >= d.bucket || d.buckets[nb-1].off+d.buckets[nb-1].n != p.off {
			d.buckets = append(d.buckets, devBucket{off: p.off, tag: "bucket " + strconv.Itoa(nb)})
			nb++
		}
		b := &d.buckets[nb-1]
		b.n = p.off + p.n - b.off
		b.params++
		b.left++
		d.bucketOf[p.param] = nb - 1
	}
	d.grads = g
	return nil
}

// syncCopies is sync where the gradients are not one flat buffer: copied
// into one, averaged in one piece on the communication stream, and copied
// back once the compute stream has joined it, all ordered on the device.
func (d *deviceDDP) syncCopies() error {
	if err := tensor.Catch(func() {
		if d.flat == nil {
			tensor.Persist(func() { d.flat, d.views = d.flatViews() })
		}
		for i, p := range d.params {
			if p.T.Grad == nil {
				panic(&tensor.Error{Op: "ddp", Msg: "parameter " + p.Name + " has no gradient after backward"})
			}
			d.views[i].CopyFrom(p.T.Grad)
		}
	}); err != nil {
		return err
	}
	if d.wd.aborted.Load() {
		return fmt.Errorf("all-reduce of step %d: the communicator was aborted", d.steps)
	}
	d.ops++
	what := fmt.Sprintf("the all-reduce of step %d (%s)", d.steps, units.Bytes(int64(4*d.n)))
	seq := d.record("all-reduce", "gradients", d.n)
	err := tensor.OnCommQueue(d.dev, func(stream uintptr) error {
		addr, ok := d.flat.DeviceAddress()
		if !ok {
			return fmt.Errorf("%v has no device addresses", d.dev)
		}
		return d.grp.AllReduce(addr, d.n, dist.F32, dist.Avg, stream)
	})
	if err != nil {
		d.failed(seq, err)
		return fmt.Errorf("%s: %w", what, err)
	}
	probe, err := tensor.JoinComm(d.dev)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	d.watch(probe, what)
	return tensor.Catch(func() {
		for i, p := range d.params {
			p.T.Grad.CopyFrom(d.views[i])
		}
	})
}

// watch hands a step's joined communication to the watchdog.
func (d *deviceDDP) watch(p backend.CommProbe, what string) {
	d.wd.mu.Lock()
	d.wd.pending = append(d.wd.pending, inflight{p, time.Now(), what, d.launched})
	d.launched = nil
	d.wd.mu.Unlock()
}

// watchdog polls the communication in flight until close.
func (d *deviceDDP) watchdog() {
	defer close(d.wd.stopped)
	tick := time.NewTicker(watchPeriod)
	defer tick.Stop()
	for {
		select {
		case <-d.wd.stop:
			return
		case <-tick.C:
			d.check()
		}
	}
}

// check releases the communication that has finished, oldest first, and
// aborts the communicator, recording why, where the oldest still running
// has met a peer's failure or outlived the timeout.
func (d *deviceDDP) check() {
	d.wd.mu.Lock()
	defer d.wd.mu.Unlock()
	for len(d.wd.pending) > 0 && d.wd.err == nil {
		f := d.wd.pending[0]
		done, err := f.probe.Done()
		if err != nil {
			d.wd.err = fmt.Errorf("%s: %w", f.what, err)
			d.settle(f.seqs, dist.FlightFailed, d.wd.err)
			d.abort()
			return
		}
		if done {
			f.probe.Release()
			d.settle(f.seqs, dist.FlightDone, nil)
			d.wd.pending = d.wd.pending[1:]
			continue
		}
		if err := d.grp.CheckAsync(); err != nil {
			d.wd.err = fmt.Errorf("%s: a peer failed: %w", f.what, err)
			d.settle(f.seqs, dist.FlightFailed, d.wd.err)
			d.abort()
			return
		}
		if time.Since(f.since) > d.timeout {
			d.wd.err = setting.Errorf("%s: not complete after %v ({CommTimeout}): a peer is gone or stuck; the communicator was aborted", f.what, d.timeout)
			d.settle(f.seqs, dist.FlightFailed, d.wd.err)
			d.abort()
		}
		return
	}
}

// drain waits, polling, until the watchdog has seen every step's
// communication finish or has given up on it.
func (d *deviceDDP) drain() error {
	for {
		d.check()
		d.wd.mu.Lock()
		left, err := len(d.wd.pending), d.wd.err
		d.wd.mu.Unlock()
		if err != nil || left == 0 {
			return err
		}
		time.Sleep(watchPeriod / 5)
	}
}

func (d *deviceDDP) close(failed bool) error {
	if !failed && d.drain() != nil {
		failed = true
	}
	close(d.wd.stop)
	<-d.wd.stopped
	d.wd.mu.Lock()
	for _, f := range d.wd.pending {
		f.probe.Release()
	}
	d.wd.pending = nil
	d.wd.mu.Unlock()
	var err error
	if d.flat != nil {
		err = tensor.Catch(func() { d.flat.Free() })
	}
	if failed {
		return errors.Join(err, d.abort())
	}
	return errors.Join(err, tensor.OnDeviceQueue(d.dev, func(uintptr) error { return d.grp.Close() }))
}

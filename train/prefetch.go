package train

import (
	"errors"
	"time"
	"unsafe"

	"github.com/fleetml/fleet/backend"
	"github.com/fleetml/fleet/data"
	"github.com/fleetml/fleet/tensor"
)

// batchSlot is one of two staging slots for a micro-batch: host memory the
// device copies from without waiting (page-locked on a GPU) and persistent
// device tensors the step reads.
type batchSlot struct {
	key          [2]int // (step, micro) it holds; step -1 when empty
	hx, hy       []byte // host staging, viewed as int32 by x32 and y32
	x32, y32     []int32
	x, y         *tensor.Tensor
	ux, uy       backend.Upload // the pending copies out of hx and hy
	freeX, freeY func() error
}

// waitCopies waits until the slot's staging memory may be reused.
func (s *batchSlot) waitCopies() error {
	if s.ux == nil {
		return nil
	}
	err := errors.Join(s.ux.Wait(), s.uy.Wait())
	s.ux, s.uy = nil, nil
	return err
}

// ready makes the work issued next wait for the slot's copies.
func (s *batchSlot) ready() error {
	if s.ux == nil {
		return nil
	}
	return errors.Join(s.ux.Ready(), s.uy.Ready())
}

// batches double-buffers micro-batches onto the device: before a step is
// issued, the next micro-batch is drawn and its copy into the other slot
// queued, after the work already issued (the previous step, which read that
// slot); the step is issued next, so on a GPU the copy overlaps it. A slot's
// step waits for its copy (Ready) only when it is issued.
type batches struct {
	dev   tensor.Device
	slots [2]batchSlot
}

// fail is a failed copy, as the device error it is.
func (b *batches) fail(err error) error {
	return &backend.DeviceError{Dev: b.dev, Op: "batch copy", Err: err}
}

// open allocates the slots for B×T micro-batches on dev.
func (b *batches) open(dev tensor.Device, B, T int) error {
	b.dev = dev
	for i := range b.slots {
		s := &b.slots[i]
		var err error
		if s.hx, s.freeX, err = tensor.PinnedAlloc(dev, 4*B*T); err != nil {
			return err
		}
		if s.hy, s.freeY, err = tensor.PinnedAlloc(dev, 4*B*T); err != nil {
			return err
		}
		s.x32 = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(s.hx))), B*T)
		s.y32 = unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(s.hy))), B*T)
		tensor.Persist(func() {
			s.x = tensor.Empty(dev, tensor.I32, B, T)
			s.y = tensor.Empty(dev, tensor.I32, B, T)
		})
		s.key = [2]int{-1, 0}
	}
	return nil
}

// close releases the slots.
func (b *batches) close() {
	for i := range b.slots {
		s := &b.slots[i]
		s.waitCopies()
		if s.x != nil {
			s.x.Free()
			s.y.Free()
		}
		if s.freeX != nil {
			s.freeX()
			s.freeY()
		}
		*s = batchSlot{}
	}
}

// load draws micro-batch key into slot s and queues its copy.
func (s *batchSlot) load(key [2]int, fill filler) (copyErr, fillErr error) {
	if err := s.waitCopies(); err != nil { // the previous copy out of this staging memory
		return err, nil
	}
	if err := fill(key[0], key[1], s.x32, s.y32); err != nil {
		s.key = [2]int{-1, 0}
		return nil, err
	}
	s.ux = s.x.UploadAsync(s.hx)
	s.uy = s.y.UploadAsync(s.hy)
	s.key = key
	return nil, nil
}

// get returns the device tensors of micro-batch (step, micro), loading it
// unless it was prefetched, and prefetches the one after it (next).
func (b *batches) get(step, micro int, next [2]int, fill filler) (x, y *tensor.Tensor, err error) {
	key := [2]int{step, micro}
	cur, other := &b.slots[0], &b.slots[1]
	if other.key == key {
		cur, other = other, cur
	}
	if cur.key != key {
		if cerr, ferr := cur.load(key, fill); cerr != nil {
			return nil, nil, b.fail(cerr)
		} else if ferr != nil {
			return nil, nil, ferr
		}
	}
	// Queued after the previous step, the next copy overlaps this one.
	cerr, ferr := other.load(next, fill)
	if err := errors.Join(cerr, cur.ready()); err != nil {
		return nil, nil, b.fail(err)
	}
	if ferr != nil {
		return nil, nil, ferr
	}
	return cur.x, cur.y, nil
}

// filler fills x and y with micro-batch micro of a step.
type filler func(step, micro int, x, y []int32) error

// nextMicro is the micro-batch after (step, micro) with accum micro-steps.
func nextMicro(step, micro, accum int) [2]int {
	if micro+1 < accum {
		return [2]int{step, micro + 1}
	}
	return [2]int{step + 1, 0}
}

// slowData is a test hook: each batch fetch first sleeps this long, as if
// the loader could not keep up.
var slowData time.Duration

// openFill sets r.feed.fill: r.feed.batch where a test set it, else a loader
// dealing out the train sampler's windows for this rank from step on.
// Either way the time spent in it is added to r.feed.wait.
func (r *run) openFill(step int) error {
	var src filler
	if r.feed.batch != nil {
		src = func(step, micro int, x, y []int32) error { r.feed.batch(step, micro, x, y); return nil }
	} else {
		cfg := r.cfg
		lc := data.LoaderConfig{Batch: cfg.BatchSize, Accum: cfg.GradAccum, Rank: cfg.Rank, World: cfg.WorldSize,
			Start: step, Workers: cfg.DataWorkers, Prefetch: cfg.Prefetch, Name: "train split"}
		if r.feed.checkIDs {
			lc.Vocab = r.feed.vocab
		}
		l, err := data.NewLoader(r.train, lc)
		if err != nil {
			return err
		}
		r.feed.loader = l
		src = l.Fill
	}
	r.feed.fill = func(step, micro int, x, y []int32) error {
		t0 := time.Now()
		if slowData > 0 {
			time.Sleep(slowData)
		}
		err := src(step, micro, x, y)
		r.feed.wait += time.Since(t0)
		return err
	}
	return nil
}

package data

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// LoaderConfig says which of a Sampler's windows a Loader draws, and how
// far ahead.
type LoaderConfig struct {
	Batch int // windows per micro-batch, per process (B)
	Accum int // micro-batches per optimizer step, per process
	// Rank and World place this process in a data-parallel group: each
	// global batch of Batch*Accum*World windows is dealt out rank-major
	// (MicroBatchFirst), so the global batch is the same for any World.
	// World 0 means 1.
	Rank, World int
	Start       int // the first step; prefetching begins there
	// Workers is the number of goroutines drawing batches; 0 means
	// DefaultWorkers().
	Workers int
	// Prefetch is the number of micro-batches drawn ahead; 0 means twice
	// the workers.
	Prefetch int
	// Vocab, when positive, makes the loader check every id against it,
	// so a damaged token file fails with an error instead of reaching an
	// embedding with an id out of range.
	Vocab int
	// Name describes the tokens in errors ("train split of DIR").
	Name string
}

// DefaultWorkers is min(4, runtime.NumCPU()).
func DefaultWorkers() int { return min(4, runtime.NumCPU()) }

// Loader draws training micro-batches ahead of the trainer. Workers
// goroutines fill a ring of Prefetch buffers, each with the windows of one
// micro-batch, and Fill hands them out in order, so the trainer only waits
// when the workers fall behind.
//
// What a micro-batch holds depends only on (seed, stream, step, micro,
// rank): its windows are the Sampler's windows MicroBatchFirst(Batch,
// Accum, Rank, micro) .. +Batch-1 of the step, whichever worker draws them
// and however many workers there are. The position is just the step: a
// resumed run that asks for step s gets exactly the micro-batches an
// uninterrupted run got at step s. The buffers are allocated once and
// recycled; steady-state Fill calls make no heap allocations.
type Loader struct {
	s     *Sampler
	cfg   LoaderConfig
	slots []loaderSlot
	work  chan int // micro-batch indices for the workers
	next  int      // the index Fill expects next; next .. next+len(slots)-1 are dispatched
	wg    sync.WaitGroup
	done  bool
}

// loaderSlot is one prefetch buffer. Micro-batch k (step*Accum + micro)
// goes to slot k mod len(slots); only one is in flight per slot.
type loaderSlot struct {
	x, y  []int32
	err   error
	ready chan struct{} // a value when the worker has filled the slot
}

// NewLoader starts a loader dealing out s's windows, prefetching from step
// cfg.Start. Close stops its workers.
func NewLoader(s *Sampler, cfg LoaderConfig) (*Loader, error) {
	if cfg.World == 0 {
		cfg.World = 1
	}
	if cfg.Workers == 0 {
		cfg.Workers = DefaultWorkers()
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2 * cfg.Workers
	}
	switch {
	case cfg.Batch <= 0 || cfg.Accum <= 0:
		return nil, fmt.Errorf("data: loader batch %d and accumulation %d must be positive", cfg.Batch, cfg.Accum)
	case cfg.World < 0 || cfg.Rank < 0 || cfg.Rank >= cfg.World:
		return nil, fmt.Errorf("data: rank %d is not in a world of %d", cfg.Rank, cfg.World)
	case cfg.Workers < 0 || cfg.Prefetch < 0:
		return nil, fmt.Errorf("data: loader workers %d and prefetch %d must not be negative", cfg.Workers, cfg.Prefetch)
	case cfg.Start < 0:
		return nil, fmt.Errorf("data: loader start step %d is negative", cfg.Start)
	}
	l := &Loader{s: s, cfg: cfg, slots: make([]loaderSlot, cfg.Prefetch), work: make(chan int, cfg.Prefetch)}
	n := cfg.Batch * s.BlockSize()
	for i := range l.slots {
		l.slots[i] = loaderSlot{x: make([]int32, n), y: make([]int32, n), ready: make(chan struct{}, 1)}
	}
	l.wg.Add(cfg.Workers)
	for range cfg.Workers {
		go l.worker()
	}
	l.dispatch(cfg.Start * cfg.Accum)
	return l, nil
}

// Config returns the loader's settings, defaults filled in.
func (l *Loader) Config() LoaderConfig { return l.cfg }

// Sampler returns the sampler whose windows the loader deals out.
func (l *Loader) Sampler() *Sampler { return l.s }

func (l *Loader) worker() {
	defer l.wg.Done()
	c := &l.cfg
	for k := range l.work {
		sl := &l.slots[k%len(l.slots)]
		step, micro := k/c.Accum, k%c.Accum
		l.s.Batch(step, MicroBatchFirst(c.Batch, c.Accum, c.Rank, micro), c.Batch, sl.x, sl.y)
		sl.err = l.check(sl, step, micro)
		sl.ready <- struct{}{}
	}
}

// check finds ids outside the vocabulary.
func (l *Loader) check(sl *loaderSlot, step, micro int) error {
	V := int32(l.cfg.Vocab)
	if V <= 0 {
		return nil
	}
	for _, b := range [2][]int32{sl.x, sl.y} {
		for i, id := range b {
			if id < 0 || id >= V {
				T := l.s.BlockSize()
				first := MicroBatchFirst(l.cfg.Batch, l.cfg.Accum, l.cfg.Rank, micro) + i/T
				return fmt.Errorf("data: %s: token id %d at position %d is not below the vocabulary size %d",
					l.name(), id, l.s.Offset(step, first)+i%T, V)
			}
		}
	}
	return nil
}

func (l *Loader) name() string {
	if l.cfg.Name == "" {
		return "tokens"
	}
	return l.cfg.Name
}

// dispatch queues micro-batches k .. k+len(slots)-1; none may be in flight.
func (l *Loader) dispatch(k int) {
	for j := k; j < k+len(l.slots); j++ {
		l.work <- j
	}
	l.next = k
}

// Fill copies this process's micro-batch micro of step into x and y, each
// of length Batch*T, laid out [Batch][T] (T the sampler's block size). Asked for the
// micro-batch after the previous one it returns a prefetched one; asked
// for any other, it drops what it drew ahead and starts over from there.
// It fails on ids outside the vocabulary, and after Close.
func (l *Loader) Fill(step, micro int, x, y []int32) error {
	c := &l.cfg
	if l.done {
		return errors.New("data: loader is closed")
	}
	if step < 0 || micro < 0 || micro >= c.Accum {
		return fmt.Errorf("data: no micro-batch %d of step %d with %d per step", micro, step, c.Accum)
	}
	if n := c.Batch * l.s.BlockSize(); len(x) != n || len(y) != n {
		return fmt.Errorf("data: micro-batch of %d×%d tokens needs x and y of length %d, got %d and %d",
			c.Batch, l.s.BlockSize(), n, len(x), len(y))
	}
	k := step*c.Accum + micro
	if k != l.next {
		l.drain()
		l.dispatch(k)
	}
	sl := &l.slots[k%len(l.slots)]
	<-sl.ready
	copy(x, sl.x)
	copy(y, sl.y)
	err := sl.err
	l.work <- k + len(l.slots) // the slot is free: draw the next one into it
	l.next = k + 1
	return err
}

// drain waits for every micro-batch in flight.
func (l *Loader) drain() {
	for j := l.next; j < l.next+len(l.slots); j++ {
		<-l.slots[j%len(l.slots)].ready
	}
}

// Close stops the workers. It is safe to call more than once.
func (l *Loader) Close() {
	if l.done {
		return
	}
	l.done = true
	close(l.work)
	l.wg.Wait()
}

package gpu

import (
	"errors"
	"fmt"
	"math/bits"
	"sort"

	"github.com/fleetml/fleet/backend"
)

// pool is a caching allocator over a gpu: freed blocks wait in bins of
// their size class for the next request of that class, so steady-state
// training (the same sizes every step) stops calling the driver after its
// first step. Blocks are never split or merged.
//
// Blocks a captured graph uses (those handed out while a capture runs)
// belong to the graphs from then on: a graph reads and writes the same
// addresses at every launch, so when freed they wait in graphBins, for
// later captures only, never for other tensors, until the last graph is
// freed (graphsFreed).
type pool struct {
	g    Driver
	bins map[int][]Ptr // size class -> cached blocks

	capturing bool
	graphs    int           // graphs alive
	owned     map[Ptr]bool  // blocks the graphs use
	graphBins map[int][]Ptr // freed blocks of the graphs

	allocated, reserved, peak int64
	cached                    int64 // bytes in bins and graphBins
}

func newPool(g Driver) *pool {
	return &pool{g: g, bins: map[int][]Ptr{}, owned: map[Ptr]bool{}, graphBins: map[int][]Ptr{}}
}

// capture starts or ends handing out blocks to a capture; graphMade and
// graphFreed count the graphs alive, and when none is left their blocks
// go back to the bins.
func (p *pool) capture(on bool) { p.capturing = on }
func (p *pool) graphMade()      { p.graphs++ }
func (p *pool) graphFreed() {
	p.graphs--
	p.unclaimed()
}

// unclaimed gives the graphs' blocks back to the bins once no graph is
// alive (after the last is freed, or a capture that made none).
func (p *pool) unclaimed() {
	if p.graphs > 0 {
		return
	}
	for c, l := range p.graphBins {
		p.bins[c] = append(p.bins[c], l...)
		delete(p.graphBins, c)
	}
	clear(p.owned)
}

// sizeClass rounds a request up to its class: a multiple of 512 bytes up to
// 1 MiB, then one of eight steps between powers of two, so a class wastes
// at most 1/8 of a large block and nearby sizes share a bin.
func sizeClass(bytes int) int {
	const small = 1 << 20
	if bytes <= 0 {
		return 512
	}
	if bytes <= small {
		return (bytes + 511) &^ 511
	}
	step := 1 << (bits.Len(uint(bytes)) - 1) / 8
	return (bytes + step - 1) / step * step
}

// alloc returns a block of at least bytes. When the device is full it
// returns every cached block to the driver and tries once more; if that
// fails too, the error wraps backend.ErrOutOfMemory and says how memory
// stands.
func (p *pool) alloc(bytes int) (Ptr, int, error) {
	class := sizeClass(bytes)
	if p.capturing {
		if l := p.graphBins[class]; len(l) > 0 {
			ptr := l[len(l)-1]
			p.graphBins[class] = l[:len(l)-1]
			p.cached -= int64(class)
			p.take(class)
			return ptr, class, nil
		}
	}
	ptr, class, err := p.allocShared(bytes, class)
	if err == nil && p.capturing {
		p.owned[ptr] = true
	}
	return ptr, class, err
}

// allocShared is alloc from the bins every tensor shares, or the driver.
func (p *pool) allocShared(bytes, class int) (Ptr, int, error) {
	if l := p.bins[class]; len(l) > 0 {
		ptr := l[len(l)-1]
		p.bins[class] = l[:len(l)-1]
		p.cached -= int64(class)
		p.take(class)
		return ptr, class, nil
	}
	ptr, err := p.g.MemAlloc(class)
	if errors.Is(err, backend.ErrOutOfMemory) && p.cached > 0 {
		if ferr := p.release(); ferr != nil {
			return Ptr{}, 0, ferr
		}
		ptr, err = p.g.MemAlloc(class)
	}
	if err != nil {
		if errors.Is(err, backend.ErrOutOfMemory) {
			free, total, _ := p.g.MemInfo()
			return Ptr{}, 0, fmt.Errorf("%w: %d bytes requested; %d allocated by tensors, %d reserved by the pool; device has %d free of %d",
				err, bytes, p.allocated, p.reserved, free, total)
		}
		return Ptr{}, 0, err
	}
	p.reserved += int64(class)
	p.take(class)
	return ptr, class, nil
}

func (p *pool) take(class int) {
	p.allocated += int64(class)
	p.peak = max(p.peak, p.allocated)
}

// free puts a block back in its bin (a graph's in the graphs' bins).
func (p *pool) free(ptr Ptr, class int) {
	if p.owned[ptr] {
		p.graphBins[class] = append(p.graphBins[class], ptr)
	} else {
		p.bins[class] = append(p.bins[class], ptr)
	}
	p.allocated -= int64(class)
	p.cached += int64(class)
}

// release returns every cached block to the driver, largest first, once
// the work that may still use them is done.
func (p *pool) release() error {
	if err := p.g.Sync(); err != nil {
		return err
	}
	classes := make([]int, 0, len(p.bins))
	for c := range p.bins {
		classes = append(classes, c)
	}
	sort.Sort(sort.Reverse(sort.IntSlice(classes)))
	var errs []error
	for _, c := range classes {
		for _, ptr := range p.bins[c] {
			if err := p.g.MemFree(ptr); err != nil {
				errs = append(errs, err)
				continue
			}
			p.reserved -= int64(c)
			p.cached -= int64(c)
		}
		delete(p.bins, c)
	}
	return errors.Join(errs...)
}

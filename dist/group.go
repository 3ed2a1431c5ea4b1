package dist

import (
	"fmt"
	"github.com/fleetml/fleet/internal/units"
	"time"
)

// Op is a reduction.
type Op int

const (
	// Sum adds the ranks' values.
	Sum Op = iota
	// Avg adds them and divides by the world size.
	Avg
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Avg:
		return "avg"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Work is a collective in flight.
type Work interface {
	// Wait blocks until the collective has finished and returns its error.
	// The buffer it was given must not be touched before Wait returns.
	Wait() error
}

// ProcessGroup is a set of ranks that run collectives together. Every rank
// must issue the same collectives, with the same sizes, in the same order.
// Buffers are host float32 slices.
type ProcessGroup interface {
	Rank() int
	Size() int
	// AllReduce replaces buf on every rank with the reduction over ranks.
	AllReduce(buf []float32, op Op) error
	// AllReduceAsync starts an all-reduce and returns at once; several may be
	// in flight, and they complete in the order issued.
	AllReduceAsync(buf []float32, op Op) Work
	// Broadcast copies root's buf to every rank's buf.
	Broadcast(buf []float32, root int) error
	// AllGather puts rank r's send into recv[r*len(send):(r+1)*len(send)]
	// on every rank; len(recv) must be Size()*len(send).
	AllGather(send, recv []float32) error
	// Barrier returns once every rank has entered it.
	Barrier() error
	// Close releases the group's connections; collectives still queued fail.
	Close() error
}

// OpError is a failed collective.
type OpError struct {
	Op    string // "all-reduce", "broadcast", "all-gather", "barrier"
	Seq   int    // 1 for the group's first collective of this kind
	Bytes int64  // the size of the buffer
	Rank  int    // the rank this error was seen on
	Peer  int    // the rank at fault, or -1
	// Cause says what went wrong, e.g. "rank 2 closed its connection".
	Cause string
	// Root, if not empty, is the first failure of the job as another rank
	// reported it, when that explains this one.
	Root string
	Err  error // the underlying error, if any

	// why classifies Cause for the root-cause search: whyGone (Peer
	// closed its connection, perhaps because it failed first), whyStalled
	// (no data from Peer in time) or whyOther.
	why string
}

func (e *OpError) Error() string {
	s := fmt.Sprintf("%s #%d (%s): %s", e.Op, e.Seq, formatBytes(e.Bytes), e.Cause)
	if e.Root != "" {
		s += " (first failure, " + e.Root + ")"
	}
	return s
}

func (e *OpError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrTimeout) true for a collective that waited
// for a peer longer than its timeout.
func (e *OpError) Is(target error) bool { return target == ErrTimeout && e.why == whyStalled }

// formatBytes writes n in binary units (units.Bytes).
func formatBytes(n int64) string { return units.Bytes(n) }

const (
	whyGone    = "gone"
	whyStalled = "stalled"
	whyOther   = "other"
)

// DefaultTimeout is how long a collective waits for data from a neighbour
// before it fails.
const DefaultTimeout = 10 * time.Minute

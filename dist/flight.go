package dist

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleetml/fleet/internal/atomicfile"
)

// FlightCapacity is how many collectives a FlightRecorder keeps: the last
// ones a rank issued, which is what a hang's post-mortem needs.
const FlightCapacity = 2000

// Collective states in a flight record.
const (
	FlightQueued  = "queued"  // issued, waiting for the ones before it
	FlightRunning = "running" // entered: exchanging data with the neighbours
	FlightDone    = "done"
	FlightFailed  = "failed"
)

// FlightEntry is one collective as a rank saw it.
type FlightEntry struct {
	// Seq numbers the group's collectives of every kind from 1, in issue
	// order: the same collective has the same Seq on every rank.
	Seq int `json:"seq"`
	// Op is the kind ("all-reduce", "broadcast", "all-gather",
	// "barrier") and KindSeq its number among its kind (as errors name
	// it: "all-reduce #17").
	Op      string `json:"op"`
	KindSeq int    `json:"kind_seq"`
	// Tag says what the collective carries, where the caller said
	// ("bucket 7"); empty otherwise.
	Tag   string `json:"tag,omitempty"`
	Bytes int64  `json:"bytes"`
	State string `json:"state"`
	// Times, in Unix nanoseconds; 0 where the collective has not got there.
	Enqueued int64  `json:"enqueued_ns"`
	Started  int64  `json:"started_ns,omitempty"`
	Ended    int64  `json:"ended_ns,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FlightRecorder keeps a ring of a group's last FlightCapacity
// collectives. It is safe for concurrent use; recording takes a lock and
// no allocation.
type FlightRecorder struct {
	mu    sync.Mutex
	ring  []FlightEntry
	total int // collectives recorded; entry i lives at ring[(i-1) % cap]
	// kinds numbers the collectives Record adds, per kind.
	kinds map[string]int
}

// NewFlightRecorder makes an empty recorder, for collectives recorded
// through Record (a TCPGroup makes its own: Flight).
func NewFlightRecorder() *FlightRecorder { return newFlightRecorder() }

func newFlightRecorder() *FlightRecorder {
	return &FlightRecorder{ring: make([]FlightEntry, FlightCapacity), kinds: map[string]int{}}
}

// Record adds a collective that runs outside the group but is issued in
// one order with its own on every rank (a device group's: NCCL's, named
// "nccl all-reduce" and so on), so that it shares the group's Seq and a
// desync report sees both; its KindSeq counts the records of its kind.
// The entry starts in state (FlightRunning for work enqueued on a device
// stream: the host cannot see it start) and Set moves it on. It returns
// the entry's Seq.
func (f *FlightRecorder) Record(op, tag string, bytes int64, state string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.kinds[op]++
	f.total++
	now := time.Now().UnixNano()
	e := FlightEntry{Seq: f.total, Op: op, KindSeq: f.kinds[op], Tag: tag, Bytes: bytes, State: state, Enqueued: now}
	if state == FlightRunning {
		e.Started = now
	}
	f.ring[(f.total-1)%len(f.ring)] = e
	return f.total
}

// Set moves a recorded collective (Record's Seq) to state, stamping the
// time it started or ended and keeping err; a Seq the ring no longer
// holds is ignored.
func (f *FlightRecorder) Set(seq int, state string, err error) { f.set(seq, state, err) }

// add records a newly issued collective and returns its group-wide Seq.
func (f *FlightRecorder) add(op string, kindSeq int, tag string, bytes int64) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total++
	f.ring[(f.total-1)%len(f.ring)] = FlightEntry{Seq: f.total, Op: op, KindSeq: kindSeq, Tag: tag, Bytes: bytes,
		State: FlightQueued, Enqueued: time.Now().UnixNano()}
	return f.total
}

// set moves collective seq to state (stamping the time it started or
// ended), if the ring still holds it.
func (f *FlightRecorder) set(seq int, state string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq <= 0 || seq <= f.total-len(f.ring) || seq > f.total {
		return
	}
	e := &f.ring[(seq-1)%len(f.ring)]
	e.State = state
	now := time.Now().UnixNano()
	switch state {
	case FlightRunning:
		e.Started = now
	case FlightDone, FlightFailed:
		e.Ended = now
		if err != nil {
			e.Error = err.Error()
		}
	}
}

// Entries returns the recorded collectives, oldest first.
func (f *FlightRecorder) Entries() []FlightEntry {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := min(f.total, len(f.ring))
	out := make([]FlightEntry, 0, n)
	for seq := f.total - n + 1; seq <= f.total; seq++ {
		out = append(out, f.ring[(seq-1)%len(f.ring)])
	}
	return out
}

// FlightDump is one rank's flight record as written to a file.
type FlightDump struct {
	Rank    int           `json:"rank"`
	World   int           `json:"world"`
	Group   string        `json:"group"`
	Reason  string        `json:"reason"` // why it was dumped
	Dumped  int64         `json:"dumped_ns"`
	Entries []FlightEntry `json:"entries"`
}

// FlightFile is where rank's dump goes in a run's flight folder.
func FlightFile(dir string, rank int) string {
	return filepath.Join(dir, "rank-"+strconv.Itoa(rank)+".json")
}

// WriteFlightDump writes d into dir as FlightFile(dir, d.Rank), atomically
// (a reader never sees half a dump).
func WriteFlightDump(dir string, d FlightDump) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("flight record: %w", err)
	}
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return fmt.Errorf("flight record: %w", err)
	}
	if err := atomicfile.WriteFile(FlightFile(dir, d.Rank), b); err != nil {
		return fmt.Errorf("flight record: %w", err)
	}
	return nil
}

// ReadFlightDumps reads every rank-K.json in dir. A file that does not
// parse is an error naming it; no dumps at all is an error too.
func ReadFlightDumps(dir string) ([]FlightDump, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "rank-*.json"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no flight records (rank-K.json) in %s", dir)
	}
	var out []FlightDump
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("flight record: %w", err)
		}
		var d FlightDump
		if err := json.Unmarshal(b, &d); err != nil {
			return nil, fmt.Errorf("flight record %s: %w", p, err)
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Rank < out[j].Rank })
	return out, nil
}

// ErrNoDesync is DesyncReport's error when the dumps show no collective
// that some rank was stuck in.
var ErrNoDesync = errors.New("no rank is waiting in a collective that another has not entered")

// DesyncReport reads the ranks' flight records (world ranks; some may be
// missing: a rank stopped or dead cannot dump) and names the collective
// the group hung in and the first rank that never entered it, with what
// the others were doing, e.g.
//
//	rank 3 never entered all-reduce #1234 (seq 1240, bucket 7, 25.0 MiB);
//	ranks 0-2 waited 30.0 s in it; rank 3's last completed collective was
//	all-reduce #1233 (seq 1239)
//
// The hung collective is the earliest one that some rank entered and did
// not finish; the culprits are the ranks that never entered it: those
// whose record stops short of it, and, when every rank that left a
// record entered it, those that left none. Each rank that entered it is
// placed by its own record, with how long it had waited there: in it, or
// (where its neighbours took its part before the group stalled) past it
// and in another ("rank 0 finished it and waited 23.0 s in all-reduce
// #388 (seq 391, 12 B)"), or in none.
func DesyncReport(dumps []FlightDump, world int) (string, error) {
	byRank := map[int]*FlightDump{}
	for i := range dumps {
		byRank[dumps[i].Rank] = &dumps[i]
		world = max(world, dumps[i].World)
	}
	// The hung collective: the lowest Seq running or failed on any rank.
	hung := FlightEntry{Seq: -1}
	for _, d := range dumps {
		for _, e := range d.Entries {
			if (e.State == FlightRunning || e.State == FlightFailed) && (hung.Seq < 0 || e.Seq < hung.Seq) {
				hung = e
			}
		}
	}
	if hung.Seq < 0 {
		return "", ErrNoDesync
	}
	name := describeEntry(hung)
	// A rank that issued another collective under the same number, up to
	// the hung one: with another size the ring fails there at once; with
	// the same size it reduces mismatched data and hangs later.
	for seq := firstSeq(dumps); seq <= hung.Seq; seq++ {
		if r, ok := mismatch(dumps, seq); ok {
			return r, nil
		}
	}

	// Each rank that entered the hung collective is placed by its own
	// record: still in it (or failed in it), or past it and in another
	// one, or in none.
	var absent, missing []int
	var places []*place
	for r := range world {
		d := byRank[r]
		if d == nil {
			missing = append(missing, r)
			continue
		}
		e, ok := entryAt(d, hung.Seq)
		if !ok || e.Started == 0 {
			absent = append(absent, r)
			continue
		}
		var p place
		if e.State == FlightDone {
			p.past = true
			if e, ok = current(d); !ok {
				e = FlightEntry{}
			}
		}
		if e.Seq > 0 {
			p.in = describeEntry(e)
		}
		var waited time.Duration
		if e.Started != 0 {
			end := e.Ended
			if end == 0 {
				end = d.Dumped
			}
			waited = time.Duration(end - e.Started)
		}
		i := slices.IndexFunc(places, func(q *place) bool { return q.past == p.past && q.in == p.in })
		if i < 0 {
			places = append(places, &p)
			i = len(places) - 1
		}
		places[i].ranks = append(places[i].ranks, r)
		places[i].waited = max(places[i].waited, waited)
	}
	culprits := absent
	how := "never entered"
	if len(culprits) == 0 {
		culprits, how = missing, "left no flight record (stopped or dead) and did not report entering"
	}
	if len(culprits) == 0 {
		return "", ErrNoDesync
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s", rankList(culprits), how, name)
	slices.SortStableFunc(places, func(p, q *place) int { // those still in it first
		return cmpBool(p.past, q.past)
	})
	for _, p := range places {
		switch {
		case !p.past:
			fmt.Fprintf(&b, "; %s waited %.1f s in it", rankList(p.ranks), p.waited.Seconds())
		case p.in != "":
			fmt.Fprintf(&b, "; %s finished it and waited %.1f s in %s", rankList(p.ranks), p.waited.Seconds(), p.in)
		default:
			fmt.Fprintf(&b, "; %s finished it and %s in no collective", rankList(p.ranks), wasWere(len(p.ranks)))
		}
	}
	for _, r := range culprits {
		d := byRank[r]
		if d == nil {
			continue
		}
		if last, ok := lastDone(d); ok {
			fmt.Fprintf(&b, "; rank %d's last completed collective was %s #%d (seq %d)", r, last.Op, last.KindSeq, last.Seq)
		} else {
			fmt.Fprintf(&b, "; rank %d completed no collective", r)
		}
		if next, ok := firstAfter(d, hung.Seq); ok {
			fmt.Fprintf(&b, ", and it ran %s #%d (seq %d", next.Op, next.KindSeq, next.Seq)
			if next.Tag != "" {
				fmt.Fprintf(&b, ", %s", next.Tag)
			}
			b.WriteString(") instead")
		}
	}
	if len(missing) > 0 && len(absent) > 0 {
		fmt.Fprintf(&b, "; no flight record from %s", rankList(missing))
	}
	return b.String(), nil
}

// place is where the ranks that entered a hung collective were, each by
// its own record: in it (past false), or past it and in the collective in
// ("": none); waited is the longest any of them had waited there.
type place struct {
	ranks  []int
	past   bool
	in     string
	waited time.Duration
}

// current is the collective a rank was in when it wrote d: the earliest
// it entered and did not finish (running, or failed).
func current(d *FlightDump) (FlightEntry, bool) {
	for _, e := range d.Entries {
		if e.Started != 0 && (e.State == FlightRunning || e.State == FlightFailed) {
			return e, true
		}
	}
	return FlightEntry{}, false
}

// cmpBool orders false before true.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// describeEntry names a collective: "all-reduce #17 (seq 20, bucket 3,
// 25.0 MiB)".
func describeEntry(e FlightEntry) string {
	s := fmt.Sprintf("%s #%d (seq %d", e.Op, e.KindSeq, e.Seq)
	if e.Tag != "" {
		s += ", " + e.Tag
	}
	return s + ", " + formatBytes(e.Bytes) + ")"
}

// mismatch reports ranks that issued another collective as seq than the
// rest did (a skipped or reordered one: the neighbours' headers disagree
// and the ring fails at once): the ranks outside the largest group of
// agreeing ones, or outside rank 0's group on a tie.
func mismatch(dumps []FlightDump, seq int) (string, bool) {
	type sig struct {
		op, tag string
		bytes   int64
	}
	groups := map[sig][]int{}
	var order []sig
	of := map[sig]FlightEntry{}
	for i := range dumps {
		e, ok := entryAt(&dumps[i], seq)
		if !ok {
			continue
		}
		k := sig{e.Op, e.Tag, e.Bytes}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
			of[k] = e
		}
		groups[k] = append(groups[k], dumps[i].Rank)
	}
	if len(groups) < 2 {
		return "", false
	}
	major := order[0] // rank 0's where it has the entry (dumps are in rank order)
	for _, k := range order {
		if len(groups[k]) > len(groups[major]) {
			major = k
		}
	}
	var b strings.Builder
	for _, k := range order {
		if k == major {
			continue
		}
		fmt.Fprintf(&b, "%s issued %s as seq %d, where %s issued %s: ", rankList(groups[k]), describeEntry(of[k]), seq,
			rankList(groups[major]), describeEntry(of[major]))
	}
	b.WriteString("the ranks issued different collectives (one skipped or reordered one")
	if seqDone(dumps, seq) {
		b.WriteString("; their sizes matched, so the ring reduced mismatched data and hung later")
	}
	b.WriteString(")")
	return b.String(), true
}

// seqDone reports whether every dump that holds collective seq finished it.
func seqDone(dumps []FlightDump, seq int) bool {
	for i := range dumps {
		if e, ok := entryAt(&dumps[i], seq); ok && e.State != FlightDone {
			return false
		}
	}
	return true
}

// firstSeq is the oldest collective every dump still holds (the rings
// forget the oldest ones first), or 1.
func firstSeq(dumps []FlightDump) int {
	first := 1
	for _, d := range dumps {
		if len(d.Entries) > 0 {
			first = max(first, d.Entries[0].Seq)
		}
	}
	return first
}

// entryAt finds collective seq in d's record.
func entryAt(d *FlightDump, seq int) (FlightEntry, bool) {
	for _, e := range d.Entries {
		if e.Seq == seq {
			return e, true
		}
	}
	return FlightEntry{}, false
}

// lastDone is the newest collective d completed.
func lastDone(d *FlightDump) (FlightEntry, bool) {
	for i := len(d.Entries) - 1; i >= 0; i-- {
		if d.Entries[i].State == FlightDone {
			return d.Entries[i], true
		}
	}
	return FlightEntry{}, false
}

// firstAfter is the first collective after seq that d entered (a rank
// that skipped one runs the next in its place).
func firstAfter(d *FlightDump, seq int) (FlightEntry, bool) {
	for _, e := range d.Entries {
		if e.Seq >= seq && e.Started != 0 {
			return e, true
		}
	}
	return FlightEntry{}, false
}

// rankList writes ranks as "rank 3", "ranks 0-2" or "ranks 0, 2, 5".
func rankList(rs []int) string {
	if len(rs) == 1 {
		return "rank " + strconv.Itoa(rs[0])
	}
	contiguous := true
	for i := 1; i < len(rs); i++ {
		contiguous = contiguous && rs[i] == rs[i-1]+1
	}
	if contiguous {
		return fmt.Sprintf("ranks %d-%d", rs[0], rs[len(rs)-1])
	}
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = strconv.Itoa(r)
	}
	return "ranks " + strings.Join(parts, ", ")
}

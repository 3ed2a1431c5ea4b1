package dist

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// TCPOptions tune a TCP process group. The zero value is fine.
type TCPOptions struct {
	// Name keeps this group's keys in the store apart from other groups'.
	// By default groups are numbered in the order each rank creates them.
	Name string
	// Timeout is how long a collective waits for a neighbour to send or
	// take data before it fails (default DefaultTimeout).
	Timeout time.Duration
	// ChunkBytes is the pipelining unit (default 256 KiB).
	ChunkBytes int
	// ListenHost is the address this rank listens on for its predecessor;
	// by default the local address of its connection to the store, which is
	// loopback in a single-node job.
	ListenHost string
	// Log receives refused connections (default: the store's log).
	Log io.Writer
	// RootCauseWait bounds how long a failed collective spends asking the
	// store which rank failed first (default 3s).
	RootCauseWait time.Duration
}

// DefaultChunkBytes is the pipelining unit of the TCP ring.
const DefaultChunkBytes = 256 << 10

// TCPGroup is a ProcessGroup over TCP: each rank sends to its successor
// and receives from its predecessor. Collectives run one at a time on a
// worker goroutine, in the order they were issued.
type TCPGroup struct {
	store      *Store
	rank, size int
	opts       TCPOptions
	prefix     string // store key prefix
	chunk      int    // floats per chunk
	next, prev net.Conn
	scratch    []float32

	mu     sync.Mutex
	cond   *sync.Cond
	queue  []*tcpWork
	seq    map[string]int
	err    error // the first failure, or errGroupClosed
	closed bool
	done   chan struct{}

	flight *FlightRecorder
}

var _ ProcessGroup = (*TCPGroup)(nil)

// errGroupClosed fails collectives issued after Close.
var errGroupClosed = errors.New("dist: the process group is closed")

// NewTCPGroup connects this rank into a ring with the others of store's
// job. Every rank must call it (in the same order as its other groups).
func NewTCPGroup(store *Store, opts TCPOptions) (*TCPGroup, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.ChunkBytes <= 0 {
		opts.ChunkBytes = DefaultChunkBytes
	}
	if opts.Log == nil {
		opts.Log = store.log()
	}
	if opts.RootCauseWait <= 0 {
		opts.RootCauseWait = 3 * time.Second
	}
	if opts.Name == "" {
		n, err := store.Add(fmt.Sprintf("tcp/count/%d", store.Rank()), 1)
		if err != nil {
			return nil, fmt.Errorf("tcp group: %w", err)
		}
		opts.Name = "pg" + strconv.FormatInt(n, 10)
	}
	g := &TCPGroup{
		store: store, rank: store.Rank(), size: store.World(), opts: opts,
		prefix: "tcp/" + opts.Name, chunk: max(opts.ChunkBytes/4, 1),
		seq: map[string]int{}, done: make(chan struct{}), flight: newFlightRecorder(),
	}
	g.cond = sync.NewCond(&g.mu)
	if g.size > 1 {
		if err := g.connect(); err != nil {
			return nil, fmt.Errorf("tcp group %s: rank %d: %w", opts.Name, g.rank, err)
		}
		g.scratch = make([]float32, g.chunk)
	}
	go g.loop()
	return g, nil
}

func (g *TCPGroup) succ() int { return (g.rank + 1) % g.size }
func (g *TCPGroup) pred() int { return (g.rank + g.size - 1) % g.size }

// connect publishes this rank's listening address, dials the successor and
// accepts the predecessor, refusing (and logging) anyone else.
func (g *TCPGroup) connect() error {
	host := g.opts.ListenHost
	if host == "" {
		host = g.store.LocalIP()
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("listen on %s: %w", host, err)
	}
	defer ln.Close()
	deadline := time.Now().Add(g.store.Timeout())
	accepted := make(chan net.Conn, 1)
	go g.accept(ln, accepted)
	if err := g.store.Set(fmt.Sprintf("%s/addr/%d", g.prefix, g.rank), []byte(ln.Addr().String())); err != nil {
		return err
	}
	addr, err := g.store.GetTimeout(fmt.Sprintf("%s/addr/%d", g.prefix, g.succ()), time.Until(deadline))
	if err != nil {
		return fmt.Errorf("rank %d never published its address: %w", g.succ(), err)
	}
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		d := net.Dialer{Deadline: deadline}
		c, err := d.Dial("tcp", string(addr))
		if err == nil {
			if err = clientHandshake(c, g.store.secret, roleRing, g.rank, deadline); err == nil {
				g.next = c
				break
			}
			c.Close()
		}
		if errors.Is(err, errRefused) || errors.Is(err, errMismatch) || time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("connect to rank %d at %s: %w", g.succ(), addr, err)
		}
		time.Sleep(wait)
	}
	select {
	case g.prev = <-accepted:
	case <-time.After(time.Until(deadline)):
		g.next.Close()
		return fmt.Errorf("rank %d never connected within %v", g.pred(), g.store.Timeout())
	}
	return nil
}

func (g *TCPGroup) accept(ln net.Listener, out chan<- net.Conn) {
	var once sync.Once
	for {
		c, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		go func() {
			rank, err := serverHandshake(c, g.store.secret, roleRing)
			if err == nil && rank != g.pred() {
				err = fmt.Errorf("it says it is rank %d; this rank's predecessor is %d", rank, g.pred())
			}
			if err != nil {
				fmt.Fprintf(g.opts.Log, "dist: rank %d: refused a connection from %s: %v\n", g.rank, c.RemoteAddr(), err)
				c.Close()
				return
			}
			taken := false
			once.Do(func() { out <- c; taken = true })
			if !taken {
				fmt.Fprintf(g.opts.Log, "dist: rank %d: refused a second connection from rank %d (%s)\n", g.rank, rank, c.RemoteAddr())
				c.Close()
			}
		}()
	}
}

// Rank is this process's rank in the group.
func (g *TCPGroup) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *TCPGroup) Size() int { return g.size }

// Close fails queued collectives, closes the connections and waits for the
// worker to stop. A collective running on another rank then fails, naming
// this one.
func (g *TCPGroup) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		<-g.done
		return nil
	}
	g.closed = true
	if g.err == nil {
		g.err = errGroupClosed
	}
	g.cond.Broadcast()
	g.mu.Unlock()
	if g.next != nil {
		g.next.Close()
		g.prev.Close()
	}
	<-g.done
	return nil
}

// tcpWork is one queued collective.
type tcpWork struct {
	kind      string
	seq       int
	fseq      int    // its Seq in the flight record
	tag       string // what it carries, for the flight record
	buf, recv []float32
	op        Op
	root      int
	// off and bounds place a reduce-scatter's buf in the flat buffer
	// whose shards it reduces into (its elements [off, off+len(buf)) of
	// bounds.Total()); bounds cut an all-gather-shards' buf.
	off    int
	bounds Bounds
	done   chan struct{}
	err    error
}

func (w *tcpWork) Wait() error {
	<-w.done
	return w.err
}

func (w *tcpWork) bytes() int64 {
	if w.kind == "all-gather" {
		return int64(len(w.recv)) * 4
	}
	return int64(len(w.buf)) * 4
}

func (g *TCPGroup) submit(w *tcpWork) *tcpWork {
	w.done = make(chan struct{})
	g.mu.Lock()
	g.seq[w.kind]++
	w.seq = g.seq[w.kind]
	w.fseq = g.flight.add(w.kind, w.seq, w.tag, w.bytes())
	if g.err != nil {
		w.err = g.err
		g.flight.set(w.fseq, FlightFailed, w.err)
		close(w.done)
	} else {
		g.queue = append(g.queue, w)
		g.cond.Signal()
	}
	g.mu.Unlock()
	return w
}

func (g *TCPGroup) loop() {
	defer close(g.done)
	for {
		g.mu.Lock()
		for len(g.queue) == 0 && !g.closed {
			g.cond.Wait()
		}
		if len(g.queue) == 0 {
			g.mu.Unlock()
			return
		}
		w := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		err := g.err
		g.mu.Unlock()
		if err == nil {
			g.flight.set(w.fseq, FlightRunning, nil)
			if err = g.run(w); err != nil {
				err = g.failed(w, err)
			}
		}
		if err != nil {
			g.flight.set(w.fseq, FlightFailed, err)
		} else {
			g.flight.set(w.fseq, FlightDone, nil)
		}
		w.err = err
		close(w.done)
	}
}

// failed poisons the group with err, after asking the store whether
// another rank failed first and explains it.
func (g *TCPGroup) failed(w *tcpWork, err error) error {
	g.mu.Lock()
	closed := g.closed
	if g.err == nil {
		g.err = err
	}
	g.mu.Unlock()
	g.next.Close()
	g.prev.Close()
	var oe *OpError
	if closed || !errors.As(err, &oe) {
		return err
	}
	// The report and the search run on a goroutine of their own, which
	// may outlive this wait where the store cannot be reached (closing
	// the store ends it); oe is the caller's once this returns, so the
	// goroutine hands the root cause over rather than setting it.
	root := make(chan string, 1)
	go func() {
		g.store.Set(fmt.Sprintf("%s/err/%d", g.prefix, g.rank), []byte(fmt.Sprintf("%d\n%s\n%s", oe.Peer, oe.why, oe.Cause)))
		r := ""
		if oe.why != whyOther {
			r = g.rootCause(oe.Peer, oe.why)
		}
		root <- r
	}()
	select {
	case oe.Root = <-root:
	case <-time.After(g.opts.RootCauseWait + time.Second):
	}
	g.mu.Lock()
	g.err = oe
	g.mu.Unlock()
	return oe
}

// rootCause follows the failure reports in the store from peer, the rank
// this one blames, to the first failure. A rank whose neighbour went away
// may be a victim, so its neighbour's report is followed whatever it says;
// a rank that got no data in time is a witness, and its neighbour's report
// is followed only if that neighbour was itself waiting for data (a stall
// seen down the ring), not if it failed later for another reason.
func (g *TCPGroup) rootCause(peer int, why string) string {
	deadline := time.Now().Add(g.opts.RootCauseWait)
	seen := map[int]bool{g.rank: true}
	root := ""
	for cur := peer; cur >= 0 && cur < g.size && !seen[cur]; {
		seen[cur] = true
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		v, err := g.store.GetTimeout(fmt.Sprintf("%s/err/%d", g.prefix, cur), left)
		if err != nil {
			break
		}
		parts := strings.SplitN(string(v), "\n", 3)
		if len(parts) != 3 || (why == whyStalled && parts[1] != whyStalled) {
			break
		}
		root = fmt.Sprintf("reported by rank %d: %s", cur, parts[2])
		why = parts[1]
		if why == whyOther {
			break
		}
		cur, _ = strconv.Atoi(parts[0])
	}
	return root
}

// AllReduce replaces buf with the sum (or average) over ranks.
func (g *TCPGroup) AllReduce(buf []float32, op Op) error { return g.AllReduceAsync(buf, op).Wait() }

// AllReduceAsync queues an all-reduce.
func (g *TCPGroup) AllReduceAsync(buf []float32, op Op) Work {
	return g.submit(&tcpWork{kind: "all-reduce", buf: buf, op: op})
}

// AllReduceAsyncTag is AllReduceAsync with a tag that says what buf
// carries ("bucket 7"), kept in the flight record.
func (g *TCPGroup) AllReduceAsyncTag(buf []float32, op Op, tag string) Work {
	return g.submit(&tcpWork{kind: "all-reduce", buf: buf, op: op, tag: tag})
}

// Flight is the group's flight recorder: its last FlightCapacity
// collectives, for a hang's post-mortem (DesyncReport).
func (g *TCPGroup) Flight() *FlightRecorder { return g.flight }

// Broadcast copies root's buf to every rank.
func (g *TCPGroup) Broadcast(buf []float32, root int) error {
	if root < 0 || root >= g.size {
		return fmt.Errorf("broadcast: root %d outside world size %d", root, g.size)
	}
	return g.submit(&tcpWork{kind: "broadcast", buf: buf, root: root}).Wait()
}

// AllGather gathers every rank's send into recv, in rank order.
func (g *TCPGroup) AllGather(send, recv []float32) error {
	if len(recv) != g.size*len(send) {
		return fmt.Errorf("all-gather: recv holds %d floats, want %d×%d", len(recv), g.size, len(send))
	}
	return g.submit(&tcpWork{kind: "all-gather", buf: send, recv: recv}).Wait()
}

// ReduceScatter reduces buf over the ranks into this rank's shard of it
// (Shard(len(buf), Size(), Rank())): the first half of an all-reduce, half
// its traffic. The rest of buf is left holding partial sums.
func (g *TCPGroup) ReduceScatter(buf []float32, op Op) error {
	return g.ReduceScatterAsync(buf, 0, EvenBounds(len(buf), g.size), op, "").Wait()
}

// ReduceScatterAsync queues the reduce-scatter of a piece of a flat
// buffer cut into shards by b: buf is its elements [off, off+len(buf)) of
// b.Total(), and each rank ends with the reduction of the part of buf its
// shard (b.Shard(rank)) covers; the rest of buf holds partial sums.
// Reduce-scattering a flat buffer's pieces one by one, as backward
// finishes them (a sharded optimizer's buckets), leaves every rank what
// one ReduceScatter of the whole would: the pieces are contiguous shards'
// parts, so a piece inside one shard travels the ring once, pipelined
// chunk by chunk, and ends at its owner (a ring reduce). tag says what
// buf carries, for the flight record.
func (g *TCPGroup) ReduceScatterAsync(buf []float32, off int, b Bounds, op Op, tag string) Work {
	w := &tcpWork{kind: "reduce-scatter", buf: buf, op: op, off: off, bounds: b, tag: tag}
	err := b.check(g.size)
	if err == nil && (off < 0 || off+len(buf) > b.Total()) {
		err = fmt.Errorf("elements [%d, %d) are not within a flat buffer of %d", off, off+len(buf), b.Total())
	}
	if err != nil {
		w.err = fmt.Errorf("reduce-scatter: %w", err)
		w.done = make(chan struct{})
		close(w.done)
		return w
	}
	return g.submit(w)
}

// AllGatherShards copies each rank's shard of buf, as b cuts it, into
// every rank's buf: the second half of an all-reduce, and what a sharded
// optimizer's updated parameters need.
func (g *TCPGroup) AllGatherShards(buf []float32, b Bounds) error {
	w := &tcpWork{kind: "all-gather-shards", buf: buf, bounds: b}
	err := b.check(g.size)
	if err == nil && b.Total() != len(buf) {
		err = fmt.Errorf("the shards cut %d elements, the buffer holds %d", b.Total(), len(buf))
	}
	if err != nil {
		return fmt.Errorf("all-gather of shards: %w", err)
	}
	return g.submit(w).Wait()
}

// Barrier returns once every rank has entered it.
func (g *TCPGroup) Barrier() error {
	return g.submit(&tcpWork{kind: "barrier", buf: make([]float32, g.size)}).Wait()
}

// xfer is one chunk to send or receive. A send waits until `after` chunks
// have been received (the data it forwards); a receive waits until `after`
// chunks have been sent (the data it overwrites).
type xfer struct {
	data   []float32
	reduce bool // receive: add into data instead of overwriting
	finish bool // receive: divide by the world size afterwards (avg)
	after  int
}

// plan lists the chunks this rank sends and receives for w, in order.
func (g *TCPGroup) plan(w *tcpWork) (sends, recvs []xfer) {
	n, r := g.size, g.rank
	mod := func(i int) int { return ((i % n) + n) % n }
	chunks := func(seg []float32) [][]float32 {
		if len(seg) == 0 {
			return nil
		}
		k := (len(seg) + g.chunk - 1) / g.chunk
		out := make([][]float32, k)
		for j := range k {
			out[j] = seg[j*len(seg)/k : (j+1)*len(seg)/k]
		}
		return out
	}
	// ring runs steps over segments: at step t this rank sends segment
	// r-t and receives segment r-t-1; what it sends from step 1 on is what
	// it received the step before, chunk by chunk.
	//
	// A receive that overwrites a segment sent earlier (the all-gather
	// phase of an all-reduce on the ring's second lap) also waits until that
	// send has finished, which the ring's causality already implies but
	// which this way is explicit.
	ring := func(segs [][]float32, steps, reduceSteps int, avg bool) {
		var sendIdx [][]int // per step, the index in sends of each chunk
		var recvIdx []int   // index in recvs of each chunk of the previous step
		for t := range steps {
			var si []int
			for j, c := range chunks(segs[mod(r-t)]) {
				after := 0
				if t > 0 {
					after = recvIdx[j] + 1
				}
				si = append(si, len(sends))
				sends = append(sends, xfer{data: c, after: after})
			}
			sendIdx = append(sendIdx, si)
			recvIdx = recvIdx[:0]
			for j, c := range chunks(segs[mod(r-t-1)]) {
				x := xfer{data: c, reduce: t < reduceSteps, finish: avg && t == reduceSteps-1}
				if p := t + 1 - n; p >= 0 {
					x.after = sendIdx[p][j] + 1
				}
				recvIdx = append(recvIdx, len(recvs))
				recvs = append(recvs, x)
			}
		}
	}
	switch w.kind {
	case "all-reduce", "barrier":
		segs := make([][]float32, n)
		for i := range n {
			segs[i] = w.buf[i*len(w.buf)/n : (i+1)*len(w.buf)/n]
		}
		ring(segs, 2*(n-1), n-1, w.op == Avg)
	case "all-gather":
		m := len(w.buf)
		segs := make([][]float32, n)
		for i := range n {
			segs[i] = w.recv[i*m : (i+1)*m]
		}
		ring(segs, n-1, 0, false)
	case "reduce-scatter":
		// The all-reduce's first lap, with the segments turned by one so
		// that rank r ends with the reduction of its own shard (Shard) of
		// the flat buffer, or of the part of it buf holds: the segments
		// of ranks whose shards buf misses are empty.
		segs := make([][]float32, n)
		for i := range n {
			lo, hi := w.bounds.Shard(mod(i - 1))
			lo, hi = min(max(lo-w.off, 0), len(w.buf)), min(max(hi-w.off, 0), len(w.buf))
			segs[i] = w.buf[lo:hi]
		}
		ring(segs, n-1, n-1, w.op == Avg)
	case "all-gather-shards":
		// The all-reduce's second lap: each rank starts with its shard.
		segs := make([][]float32, n)
		for i := range n {
			lo, hi := w.bounds.Shard(i)
			segs[i] = w.buf[lo:hi]
		}
		ring(segs, n-1, 0, false)
	case "broadcast":
		rel := mod(r - w.root)
		for j, c := range chunks(w.buf) {
			if rel != 0 {
				recvs = append(recvs, xfer{data: c})
			}
			if rel == 0 {
				sends = append(sends, xfer{data: c})
			} else if rel != n-1 {
				sends = append(sends, xfer{data: c, after: j + 1})
			}
		}
	}
	return sends, recvs
}

var kindCode = map[string]byte{"all-reduce": 1, "broadcast": 2, "all-gather": 3, "barrier": 4, "reduce-scatter": 5, "all-gather-shards": 6}

const headerLen = 32

// header describes a collective so that the neighbour can check it is
// running the same one: greeting, kind, op, root, sequence, size, and a
// reduce-scatter's place in its flat buffer (its offset's low 32 bits)
// and the shards' bounds (a hash of them), so that ranks cutting a buffer
// apart fail at once instead of reducing into the wrong shards.
func header(w *tcpWork) []byte {
	h := make([]byte, headerLen)
	copy(h, "FLRG")
	h[4] = kindCode[w.kind]
	h[5] = byte(w.op)
	binary.LittleEndian.PutUint16(h[6:], uint16(w.root))
	binary.LittleEndian.PutUint64(h[8:], uint64(w.seq))
	binary.LittleEndian.PutUint64(h[16:], uint64(w.bytes()))
	binary.LittleEndian.PutUint32(h[24:], uint32(w.off))
	binary.LittleEndian.PutUint32(h[28:], w.bounds.hash())
	return h
}

func describeHeader(h []byte) string {
	kind := "unknown collective"
	for k, c := range kindCode {
		if c == h[4] {
			kind = k
		}
	}
	if string(h[:4]) != "FLRG" {
		return "garbage"
	}
	return fmt.Sprintf("%s #%d (%s)", kind, binary.LittleEndian.Uint64(h[8:]), formatBytes(int64(binary.LittleEndian.Uint64(h[16:]))))
}

// bytesOf views f's memory as bytes (the wire carries floats in the host's
// byte order; fleet's targets are all little-endian).
func bytesOf(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&f[0])), 4*len(f))
}

// run executes one collective: a sender goroutine streams chunks to the
// successor while this goroutine receives from the predecessor.
func (g *TCPGroup) run(w *tcpWork) error {
	if w.kind == "all-gather" {
		copy(w.recv[g.rank*len(w.buf):], w.buf)
	}
	if g.size == 1 {
		return nil
	}
	sends, recvs := g.plan(w)
	hdr := header(w)
	sendHeader := w.kind != "broadcast" || g.succ() != w.root
	recvHeader := w.kind != "broadcast" || g.rank != w.root

	var (
		once     sync.Once
		first    error
		abort    = make(chan struct{})
		progress = make(chan struct{}, len(recvs))
		sent     = make(chan struct{}, len(sends))
		sendDone = make(chan struct{})
	)
	fail := func(err error) {
		once.Do(func() {
			first = err
			close(abort)
			g.next.Close()
			g.prev.Close()
		})
	}
	opErr := func(peer int, cause string, err error) *OpError {
		return &OpError{Op: w.kind, Seq: w.seq, Bytes: w.bytes(), Rank: g.rank, Peer: peer, Cause: cause, Err: err, why: whyOther}
	}
	sendErr := func(err error) error {
		var ne net.Error
		switch {
		case g.isClosed():
			return errGroupClosed
		case errors.As(err, &ne) && ne.Timeout():
			e := opErr(g.succ(), fmt.Sprintf("rank %d took no data for %v", g.succ(), g.opts.Timeout), err)
			e.why = whyStalled
			return e
		case isClosed(err):
			e := opErr(g.succ(), fmt.Sprintf("rank %d closed its connection", g.succ()), err)
			e.why = whyGone
			return e
		}
		return opErr(g.succ(), fmt.Sprintf("sending to rank %d: %v", g.succ(), err), err)
	}
	recvErr := func(err error) error {
		var ne net.Error
		switch {
		case g.isClosed():
			return errGroupClosed
		case errors.As(err, &ne) && ne.Timeout():
			e := opErr(g.pred(), fmt.Sprintf("no data from rank %d for %v", g.pred(), g.opts.Timeout), err)
			e.why = whyStalled
			return e
		case isClosed(err):
			e := opErr(g.pred(), fmt.Sprintf("rank %d closed its connection", g.pred()), err)
			e.why = whyGone
			return e
		}
		return opErr(g.pred(), fmt.Sprintf("receiving from rank %d: %v", g.pred(), err), err)
	}

	go func() {
		defer close(sendDone)
		write := func(b []byte) bool {
			g.next.SetWriteDeadline(time.Now().Add(g.opts.Timeout))
			if _, err := g.next.Write(b); err != nil {
				fail(sendErr(err))
				return false
			}
			return true
		}
		if sendHeader && !write(hdr) {
			return
		}
		got := 0
		for _, s := range sends {
			for got < s.after {
				select {
				case <-progress:
					got++
				case <-abort:
					return
				}
			}
			if !write(bytesOf(s.data)) {
				return
			}
			sent <- struct{}{}
		}
	}()

	read := func(b []byte) bool {
		g.prev.SetReadDeadline(time.Now().Add(g.opts.Timeout))
		if _, err := io.ReadFull(g.prev, b); err != nil {
			fail(recvErr(err))
			return false
		}
		return true
	}
	func() {
		if recvHeader {
			got := make([]byte, headerLen)
			if !read(got) {
				return
			}
			if string(got) != string(hdr) {
				fail(opErr(g.pred(), fmt.Sprintf("rank %d is running %s instead: the ranks issued different collectives", g.pred(), describeHeader(got)), nil))
				return
			}
		}
		inv := float32(g.size)
		nsent := 0
		for _, x := range recvs {
			for nsent < x.after {
				select {
				case <-sent:
					nsent++
				case <-abort:
					return
				}
			}
			if x.reduce {
				s := g.scratch[:len(x.data)]
				if !read(bytesOf(s)) {
					return
				}
				addInto(x.data, s)
				if x.finish {
					for i := range x.data {
						x.data[i] /= inv
					}
				}
			} else if !read(bytesOf(x.data)) {
				return
			}
			progress <- struct{}{}
		}
	}()
	<-sendDone
	return first
}

func (g *TCPGroup) isClosed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// addInto adds src to dst element by element.
func addInto(dst, src []float32) {
	src = src[:len(dst)]
	for i := range dst {
		dst[i] += src[i]
	}
}

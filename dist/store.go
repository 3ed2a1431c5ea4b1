package dist

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// StoreConfig says how a rank joins a job's rendezvous.
type StoreConfig struct {
	// Addr is MASTER_ADDR:MASTER_PORT. Rank 0 listens on exactly this
	// address (a host is required: 127.0.0.1 for a single-node job); the
	// others connect to it.
	Addr string
	// Rank and World are this process's rank and the number of ranks.
	Rank, World int
	// Secret is the per-job secret every connection must prove it holds.
	Secret string
	// Timeout bounds the rendezvous (default 5 minutes) and is the default
	// wait of Get and Wait. A request whose reply has not come within its
	// wait plus Timeout (at least 5 s, at most 30 s) fails: a rank cut off
	// from the store (a network partition) gives up on it then.
	Timeout time.Duration
	// Log receives the lines about refused connections (default
	// os.Stderr). Rank 0's store logs the first few refusals in full and
	// then at most one summary line per interval, so that a flood of
	// strangers cannot flood the log.
	Log io.Writer
	// Listener, if set on rank 0, is used instead of listening on Addr
	// (tests and benchmarks listen on port 0 first).
	Listener net.Listener
}

// Store is a rank's handle on the job's key-value store, which rank 0
// hosts. Its methods are safe for concurrent use; requests go one at a time
// over one authenticated connection. Close never waits for a request in
// flight: it cuts the connection under it, so that a rank whose store is
// unreachable (a network partition) closes at once, not when the
// request's deadline passes.
type Store struct {
	cfg    StoreConfig
	secret []byte
	srv    *storeServer // rank 0 only

	// mu is held for a whole request, its reply included: requests go one
	// at a time. Close does not take it.
	mu     sync.Mutex
	r      *bufio.Reader
	w      *bufio.Writer
	broken error

	// cmu guards conn and closed, briefly: Close takes it, never mu.
	cmu    sync.Mutex
	conn   net.Conn
	closed bool
}

// errStoreClosed fails the requests of a store this rank closed.
var errStoreClosed = errors.New("store closed")

// ErrTimeout is matched (errors.Is) by a Get or Wait that ran out of time,
// a rendezvous whose ranks did not all arrive in time, and a collective
// that waited for a peer past its timeout.
var ErrTimeout = errors.New("timed out")

// timeoutError is a timeout with a message of its own that matches
// ErrTimeout.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string        { return e.msg }
func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// timeoutf formats a timeoutError.
func timeoutf(format string, args ...any) error {
	return &timeoutError{fmt.Sprintf(format, args...)}
}

const defaultStoreTimeout = 5 * time.Minute

// NewStore joins the job: rank 0 starts the store on cfg.Addr, every rank
// connects to it and registers, and NewStore returns once all cfg.World
// ranks have registered. If some have not within cfg.Timeout (or before ctx
// ends), the error names them:
//
//	rendezvous timed out after 30s: ranks 2, 3 of 4 never arrived
func NewStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if cfg.World < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.World {
		return nil, fmt.Errorf("rendezvous: rank %d is outside world size %d", cfg.Rank, cfg.World)
	}
	if cfg.Secret == "" {
		return nil, errors.New("rendezvous: the job secret is empty")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultStoreTimeout
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	s := &Store{cfg: cfg, secret: []byte(cfg.Secret)}
	start := time.Now()
	deadline := start.Add(cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	timedOut := func() string {
		return fmt.Sprintf("rendezvous timed out after %v", time.Since(start).Round(time.Second))
	}

	if cfg.Rank == 0 {
		ln := cfg.Listener
		if ln == nil {
			host, _, err := net.SplitHostPort(cfg.Addr)
			if err != nil {
				return nil, fmt.Errorf("rendezvous: store address %q: %v", cfg.Addr, err)
			}
			if host == "" {
				return nil, fmt.Errorf("rendezvous: store address %q names no host (use 127.0.0.1 for one node, or this node's address)", cfg.Addr)
			}
			ln, err = net.Listen("tcp", cfg.Addr)
			if err != nil {
				return nil, fmt.Errorf("rendezvous: rank 0 cannot listen on %s: %w", cfg.Addr, err)
			}
		}
		s.cfg.Addr = ln.Addr().String()
		s.srv = newStoreServer(ln, s.secret, cfg.Log)
	}

	// Connect, retrying while rank 0 is not up yet.
	var lastErr error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		lastErr = s.connect(deadline)
		if lastErr == nil {
			break
		}
		fatal := errors.Is(lastErr, errRefused) || errors.Is(lastErr, errMismatch)
		if fatal || time.Now().Add(wait).After(deadline) || ctx.Err() != nil {
			s.Close()
			if fatal {
				return nil, fmt.Errorf("rendezvous: the store at %s %v", s.cfg.Addr, lastErr)
			}
			return nil, timeoutf("%s: cannot reach rank 0's store at %s (%v): rank 0 never arrived", timedOut(), s.cfg.Addr, lastErr)
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
	}
	stop := context.AfterFunc(ctx, func() { s.connection().Close() })
	defer stop()

	// Register, then wait for everyone.
	n, err := s.Add(fmt.Sprintf("rendezvous/rank/%d", cfg.Rank), 1)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("rendezvous: register rank %d: %w", cfg.Rank, err)
	}
	if n != 1 {
		s.Close()
		return nil, fmt.Errorf("rendezvous: rank %d joined twice (two processes were given the same rank)", cfg.Rank)
	}
	if cfg.Rank == 0 {
		err = s.Set("rendezvous/world", []byte(strconv.Itoa(cfg.World)))
	} else {
		var v []byte
		v, err = s.GetTimeout("rendezvous/world", time.Until(deadline))
		if err == nil && string(v) != strconv.Itoa(cfg.World) {
			err = fmt.Errorf("this rank was told world size %d, rank 0 %s", cfg.World, v)
		}
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("rendezvous: %w", err)
	}
	keys := make([]string, cfg.World)
	for r := range keys {
		keys[r] = fmt.Sprintf("rendezvous/rank/%d", r)
	}
	if err := s.WaitTimeout(keys, time.Until(deadline)); err != nil {
		s.Close()
		var me *MissingKeysError
		if errors.As(err, &me) {
			var ranks []string
			for _, k := range me.Keys {
				ranks = append(ranks, strings.TrimPrefix(k, "rendezvous/rank/"))
			}
			word := "ranks"
			if len(ranks) == 1 {
				word = "rank"
			}
			return nil, timeoutf("%s: %s %s of %d never arrived", timedOut(), word, strings.Join(ranks, ", "), cfg.World)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("rendezvous: %w", ctx.Err())
		}
		return nil, fmt.Errorf("rendezvous: %w", err)
	}
	return s, nil
}

func (s *Store) connect(deadline time.Time) error {
	d := net.Dialer{Deadline: deadline}
	c, err := d.Dial("tcp", s.cfg.Addr)
	if err != nil {
		return err
	}
	if err := clientHandshake(c, s.secret, roleStore, s.cfg.Rank, deadline); err != nil {
		c.Close()
		return err
	}
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if s.closed {
		c.Close()
		return errStoreClosed
	}
	s.conn, s.r, s.w = c, bufio.NewReader(c), bufio.NewWriter(c)
	return nil
}

// connection is the connection to the store (nil before one is made).
func (s *Store) connection() net.Conn {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.conn
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	return s.closed
}

// Rank is this process's rank.
func (s *Store) Rank() int { return s.cfg.Rank }

// World is the number of ranks.
func (s *Store) World() int { return s.cfg.World }

// Addr is the store's address.
func (s *Store) Addr() string { return s.cfg.Addr }

// Timeout is the default wait of Get and Wait.
func (s *Store) Timeout() time.Duration { return s.cfg.Timeout }

// LocalIP is the address of this host's interface that reaches rank 0,
// which is where its peers should connect to it.
func (s *Store) LocalIP() string {
	c := s.connection()
	if c == nil {
		return ""
	}
	h, _, _ := net.SplitHostPort(c.LocalAddr().String())
	return h
}

func (s *Store) log() io.Writer { return s.cfg.Log }

// Close leaves the store; on rank 0 it also stops serving, so rank 0
// should close last (after a final barrier). It does not wait for a
// request in flight (another goroutine's, say a Set to an unreachable
// store): that request fails at once, and so do later ones.
func (s *Store) Close() error {
	s.cmu.Lock()
	s.closed = true
	if s.conn != nil {
		s.conn.Close()
	}
	s.cmu.Unlock()
	if s.srv != nil {
		s.srv.close()
	}
	return nil
}

// Store requests and replies.
const (
	opSet byte = iota + 1
	opGet
	opAdd
	opWait

	stOK byte = iota
	stTimeout
	stErr
)

const (
	maxKeyLen   = 4 << 10
	maxValueLen = 64 << 20
	maxKeys     = 1 << 16
)

// MissingKeysError is a Wait that ran out of time; Keys are those still
// missing, sorted.
type MissingKeysError struct {
	Keys    []string
	Timeout time.Duration
}

func (e *MissingKeysError) Error() string {
	return fmt.Sprintf("waited %v for keys; missing: %s", e.Timeout, strings.Join(e.Keys, ", "))
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *MissingKeysError) Is(target error) bool { return target == ErrTimeout }

// Set stores value under key, waking anyone waiting for it.
func (s *Store) Set(key string, value []byte) error {
	_, err := s.do(0, func(w *bufio.Writer) {
		w.WriteByte(opSet)
		putBytes(w, []byte(key))
		putBytes(w, value)
	}, func(r *bufio.Reader) ([]byte, error) { return nil, nil })
	return err
}

// Get waits up to the store's timeout for key to be set and returns its
// value.
func (s *Store) Get(key string) ([]byte, error) { return s.GetTimeout(key, s.cfg.Timeout) }

// GetTimeout is Get with its own timeout (0: do not wait).
func (s *Store) GetTimeout(key string, timeout time.Duration) ([]byte, error) {
	v, err := s.do(timeout, func(w *bufio.Writer) {
		w.WriteByte(opGet)
		putInt(w, int64(max(timeout, 0)))
		putBytes(w, []byte(key))
	}, func(r *bufio.Reader) ([]byte, error) { return getBytes(r, maxValueLen) })
	if errors.Is(err, ErrTimeout) {
		return nil, fmt.Errorf("key %q not set within %v: %w", key, timeout, ErrTimeout)
	}
	return v, err
}

// Add adds delta to the counter under key (a decimal number; missing is 0)
// and returns the new value.
func (s *Store) Add(key string, delta int64) (int64, error) {
	v, err := s.do(0, func(w *bufio.Writer) {
		w.WriteByte(opAdd)
		putBytes(w, []byte(key))
		putInt(w, delta)
	}, func(r *bufio.Reader) ([]byte, error) { return getBytes(r, 64) })
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(string(v), 10, 64)
}

// Wait waits up to the store's timeout until every key is set.
func (s *Store) Wait(keys ...string) error { return s.WaitTimeout(keys, s.cfg.Timeout) }

// WaitTimeout is Wait with its own timeout. On timeout the error is a
// *MissingKeysError naming the keys still missing.
func (s *Store) WaitTimeout(keys []string, timeout time.Duration) error {
	_, err := s.do(timeout, func(w *bufio.Writer) {
		w.WriteByte(opWait)
		putInt(w, int64(max(timeout, 0)))
		putInt(w, int64(len(keys)))
		for _, k := range keys {
			putBytes(w, []byte(k))
		}
	}, func(r *bufio.Reader) ([]byte, error) { return nil, nil })
	var me *MissingKeysError
	if errors.As(err, &me) {
		me.Timeout = timeout
	}
	return err
}

// do sends one request and reads its reply. Network failures break the
// store handle for good.
func (s *Store) do(wait time.Duration, req func(*bufio.Writer), ok func(*bufio.Reader) ([]byte, error)) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return nil, s.broken
	}
	conn := s.connection()
	if s.isClosed() || conn == nil {
		return nil, errStoreClosed
	}
	limit := max(wait, 0) + s.replySlack()
	fail := func(err error) ([]byte, error) {
		var ne net.Error
		switch {
		case s.isClosed(): // Close cut the connection under this request
			err = errStoreClosed
		case errors.As(err, &ne) && ne.Timeout():
			err = timeoutf("store at %s: no reply within %v: rank 0 or the network to it is down", s.cfg.Addr, limit)
		case isClosed(err):
			err = fmt.Errorf("store at %s: rank 0 closed the connection", s.cfg.Addr)
		default:
			err = fmt.Errorf("store at %s: %w", s.cfg.Addr, err)
		}
		s.broken = err
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Now().Add(limit))
	req(s.w)
	if err := s.w.Flush(); err != nil {
		return fail(err)
	}
	st, err := s.r.ReadByte()
	if err != nil {
		return fail(err)
	}
	switch st {
	case stOK:
		v, err := ok(s.r)
		if err != nil {
			return fail(err)
		}
		return v, nil
	case stTimeout:
		n, err := getInt(s.r)
		if err != nil || n < 0 || n > maxKeys {
			return fail(fmt.Errorf("bad reply"))
		}
		me := &MissingKeysError{Timeout: wait}
		for range n {
			k, err := getBytes(s.r, maxKeyLen)
			if err != nil {
				return fail(err)
			}
			me.Keys = append(me.Keys, string(k))
		}
		return nil, me
	case stErr:
		msg, err := getBytes(s.r, maxKeyLen)
		if err != nil {
			return fail(err)
		}
		return nil, fmt.Errorf("store: %s", msg)
	}
	return fail(fmt.Errorf("bad reply status %d", st))
}

// replySlack is how long past its wait a request waits for its reply: the
// store's timeout (in a run, the collective timeout), within 5 to 30 s.
func (s *Store) replySlack() time.Duration {
	return min(max(s.cfg.Timeout, 5*time.Second), 30*time.Second)
}

// The wire: integers are 8-byte little-endian, byte strings a length then
// the bytes.

func putInt(w *bufio.Writer, v int64) {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(v))
	w.Write(b[:])
}

func putBytes(w *bufio.Writer, b []byte) {
	putInt(w, int64(len(b)))
	w.Write(b)
}

func getInt(r *bufio.Reader) (int64, error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return int64(binary.LittleEndian.Uint64(b[:])), nil
}

func getBytes(r *bufio.Reader, limit int) ([]byte, error) {
	n, err := getInt(r)
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(limit) {
		return nil, fmt.Errorf("length %d out of range", n)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(r, b)
	return b, err
}

// storeServer is rank 0's store: a map, and a channel closed (and
// replaced) on every change to wake waiters.
type storeServer struct {
	ln      net.Listener
	secret  []byte
	refused *refusalLog

	mu      sync.Mutex
	data    map[string][]byte
	changed chan struct{}
	conns   map[net.Conn]connState
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// connState is where a connection to the store is; close uses it to decide
// which connections to cut at once and which to answer first.
type connState int

const (
	// connHandshake: accepted, the client has not proven itself yet.
	connHandshake connState = iota
	// connIdle: authenticated, between requests (or reading one).
	connIdle
	// connWaiting: in a Get or Wait, to be answered before the server
	// closes.
	connWaiting
	// connCut: was in its handshake when the server closed, and was
	// closed by it; its failed handshake is no refusal.
	connCut
)

func newStoreServer(ln net.Listener, secret []byte, log io.Writer) *storeServer {
	s := &storeServer{ln: ln, secret: secret, data: map[string][]byte{},
		changed: make(chan struct{}), conns: map[net.Conn]connState{}, done: make(chan struct{})}
	s.refused = newRefusalLog(log, ln.Addr().String())
	s.wg.Add(1)
	go s.accept()
	return s
}

func (s *storeServer) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: wait, do not give up.
			select {
			case <-s.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = connHandshake
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// close stops the server. Connections waiting in a Get or Wait are answered
// first (with what is still missing), so that a rank 0 that gives up on the
// rendezvous tells the others which ranks never came. All others, those
// still in their handshake included, are closed at once: a client that
// connects and says nothing does not hold rank 0 up for the handshake's
// timeout. Refusals not yet logged are summed up in a last line.
func (s *storeServer) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	s.ln.Close()
	for c, st := range s.conns {
		switch st {
		case connHandshake:
			s.conns[c] = connCut
			c.Close()
		case connIdle:
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.refused.close()
}

func (s *storeServer) serve(c net.Conn) {
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.wg.Done()
	}()
	_, err := serverHandshake(c, s.secret, roleStore)
	s.mu.Lock()
	cut := s.conns[c] == connCut
	if err == nil && !cut {
		s.conns[c] = connIdle
	}
	s.mu.Unlock()
	if cut {
		return
	}
	if err != nil {
		s.refused.add(c.RemoteAddr(), err)
		return
	}
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	for {
		if err := s.request(c, r, w); err != nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(5 * time.Second))
		if err := w.Flush(); err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = connIdle
		closed := s.closed
		s.mu.Unlock()
		if closed {
			return
		}
	}
}

func (s *storeServer) request(c net.Conn, r *bufio.Reader, w *bufio.Writer) error {
	op, err := r.ReadByte()
	if err != nil {
		return err
	}
	switch op {
	case opSet:
		k, err := getBytes(r, maxKeyLen)
		if err != nil {
			return err
		}
		v, err := getBytes(r, maxValueLen)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.data[string(k)] = v
		s.notify()
		s.mu.Unlock()
		w.WriteByte(stOK)
	case opAdd:
		k, err := getBytes(r, maxKeyLen)
		if err != nil {
			return err
		}
		d, err := getInt(r)
		if err != nil {
			return err
		}
		s.mu.Lock()
		old, _ := strconv.ParseInt(string(s.data[string(k)]), 10, 64)
		v := []byte(strconv.FormatInt(old+d, 10))
		s.data[string(k)] = v
		s.notify()
		s.mu.Unlock()
		w.WriteByte(stOK)
		putBytes(w, v)
	case opGet, opWait:
		t, err := getInt(r)
		if err != nil {
			return err
		}
		n := int64(1)
		if op == opWait {
			if n, err = getInt(r); err != nil {
				return err
			}
			if n < 0 || n > maxKeys {
				return fmt.Errorf("too many keys")
			}
		}
		keys := make([]string, n)
		for i := range keys {
			k, err := getBytes(r, maxKeyLen)
			if err != nil {
				return err
			}
			keys[i] = string(k)
		}
		s.mu.Lock()
		s.conns[c] = connWaiting // answered before the server closes
		s.mu.Unlock()
		missing, v := s.wait(keys, time.Duration(t))
		if len(missing) > 0 {
			w.WriteByte(stTimeout)
			putInt(w, int64(len(missing)))
			for _, k := range missing {
				putBytes(w, []byte(k))
			}
			return nil
		}
		w.WriteByte(stOK)
		if op == opGet {
			putBytes(w, v)
		}
	default:
		return fmt.Errorf("unknown request %d", op)
	}
	return nil
}

// notify wakes waiters; s.mu is held.
func (s *storeServer) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// wait waits up to t for all keys; it returns those still missing (in
// natural order) and the value of the first key.
func (s *storeServer) wait(keys []string, t time.Duration) ([]string, []byte) {
	timer := time.NewTimer(t)
	defer timer.Stop()
	for {
		s.mu.Lock()
		var missing []string
		for _, k := range keys {
			if _, ok := s.data[k]; !ok {
				missing = append(missing, k)
			}
		}
		var v []byte
		if len(missing) == 0 && len(keys) > 0 {
			v = s.data[keys[0]]
		}
		ch := s.changed
		s.mu.Unlock()
		if len(missing) == 0 {
			return nil, v
		}
		select {
		case <-ch:
		case <-timer.C:
			sortNatural(missing)
			return missing, nil
		case <-s.done:
			return missing, nil
		}
	}
}

// sortNatural sorts keys so that "r/10" comes after "r/9".
func sortNatural(keys []string) {
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if len(a) != len(b) {
			pa, pb := strings.TrimRight(a, "0123456789"), strings.TrimRight(b, "0123456789")
			if pa == pb {
				return len(a) < len(b)
			}
		}
		return a < b
	})
}

// isClosed says err means the other end closed (or reset) the connection.
func isClosed(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// How the store logs refused connections: the first refusalsInFull in
// full, then at most one summary line per refusalInterval. After a whole
// interval with no refusal the full lines start again. Tests shorten the
// interval.
var (
	refusalsInFull  = 3
	refusalInterval = 10 * time.Second
)

// refusalFrom is how many distinct hosts a summary line names.
const refusalFrom = 3

// refusalLog rate-limits the store's lines about refused connections, so
// that a port scan or a flood of strangers costs a few lines, not one a
// connection, while every refusal is still counted.
type refusalLog struct {
	w     io.Writer
	addr  string        // the store's address, for the lines
	full  int           // refusals logged in full before summarising
	every time.Duration // least time between summary lines

	mu      sync.Mutex
	logged  int         // refusals logged in full since the log was last quiet
	last    time.Time   // the latest refusal
	pending int         // refusals neither logged in full nor summed up yet
	since   time.Time   // the first of those
	from    []string    // up to refusalFrom distinct hosts they came from
	more    bool        // they came from more hosts than from names
	timer   *time.Timer // writes the next summary line
	closed  bool
}

func newRefusalLog(w io.Writer, addr string) *refusalLog {
	return &refusalLog{w: w, addr: addr, full: refusalsInFull, every: refusalInterval}
}

// add records that the store refused a connection from remote, because of
// why.
func (l *refusalLog) add(remote net.Addr, why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.pending == 0 && now.Sub(l.last) >= l.every {
		l.logged = 0 // quiet for a whole interval
	}
	l.last = now
	if l.logged < l.full && l.pending == 0 {
		l.logged++
		fmt.Fprintf(l.w, "dist: store %s: refused a connection from %s: %v\n", l.addr, remote, why)
		return
	}
	if l.pending == 0 {
		l.since = now
		if !l.closed {
			l.timer = time.AfterFunc(l.every, l.flush)
		}
	}
	l.pending++
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !slices.Contains(l.from, host) {
		if len(l.from) < refusalFrom {
			l.from = append(l.from, host)
		} else {
			l.more = true
		}
	}
}

// flush writes a summary of the refusals not yet logged, if any.
func (l *refusalLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.summarise()
}

// summarise is flush with l.mu held.
func (l *refusalLog) summarise() {
	if l.pending == 0 {
		return
	}
	word := "connections"
	if l.pending == 1 {
		word = "connection"
	}
	from := strings.Join(l.from, ", ")
	if l.more {
		from += " and others"
	}
	fmt.Fprintf(l.w, "dist: store %s: refused %d more %s in the last %v (from %s)\n",
		l.addr, l.pending, word, roundDuration(time.Since(l.since)), from)
	l.pending, l.from, l.more = 0, nil, false
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
}

// close writes a last summary of the refusals not yet logged; the store
// calls it once no connection can be refused any more.
func (l *refusalLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.summarise()
}

// roundDuration rounds d for a log line: to seconds from a second up, to
// milliseconds below.
func roundDuration(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}

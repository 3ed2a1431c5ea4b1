package dist

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

// rank0 starts a one-rank job's store, logging to log.
func rank0(t *testing.T, log *testenv.SyncBuffer) *Store {
	t.Helper()
	ln := listen(t)
	s, err := NewStore(context.Background(), StoreConfig{Addr: ln.Addr().String(), Rank: 0, World: 1,
		Secret: testSecret, Timeout: 10 * time.Second, Log: log, Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// refuse makes the store at addr refuse one connection, in one of three
// ways picked by i, and returns once the store has closed it (so the
// refusal has been counted).
func refuse(t *testing.T, addr string, i int) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	switch i % 3 {
	case 0: // another protocol
		fmt.Fprintf(c, "GET / HTTP/1.0\r\n\r\n")
	case 1: // another job's secret
		if err := clientHandshake(c, []byte("wrong"), roleStore, 1, deadline); err == nil {
			t.Fatal("a client with the wrong secret was let in")
		}
	case 2: // the right secret at the wrong door
		if err := clientHandshake(c, []byte(testSecret), roleRing, 1, deadline); err == nil {
			t.Fatal("a client with the wrong role was let in")
		}
	}
	c.SetDeadline(deadline)
	if _, err := io.Copy(io.Discard, c); err != nil && !isClosed(err) {
		t.Fatalf("refused connection %d: the store did not close it: %v", i, err)
	}
}

var summaryLine = regexp.MustCompile(`^dist: store \S+: refused (\d+) more connections? in the last \S+ \(from ([^)]*)\)$`)

// refusalLines splits the log into lines about refused connections: those
// logged in full, and the number of refusals the summary lines count. It
// fails on any other line.
func refusalLines(t *testing.T, log string) (full []string, summaries []string, summed int) {
	t.Helper()
	for line := range strings.Lines(log) {
		line = strings.TrimSuffix(line, "\n")
		if strings.Contains(line, ": refused a connection from ") {
			full = append(full, line)
			continue
		}
		m := summaryLine.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("unexpected log line %q", line)
			continue
		}
		n, _ := strconv.Atoi(m[1])
		summed += n
		summaries = append(summaries, line)
	}
	return full, summaries, summed
}

// A flood of strangers costs a few log lines, not one a connection, and the
// summary counts every refusal.
func TestStoreRefusalFlood(t *testing.T) {
	log := &testenv.SyncBuffer{}
	s := rank0(t, log)
	const n = 300
	start := time.Now()
	for i := range n {
		refuse(t, s.Addr(), i)
	}
	elapsed := time.Since(start)
	// The store still serves.
	if _, err := s.Add("after-flood", 1); err != nil {
		t.Fatal(err)
	}
	s.Close()
	full, summaries, summed := refusalLines(t, log.String())
	if len(full) != refusalsInFull {
		t.Errorf("%d refusals logged in full, want %d", len(full), refusalsInFull)
	}
	// One summary per interval while the flood lasted, and the last one
	// when the store closed.
	if most := int(elapsed/refusalInterval) + 2; len(summaries) < 1 || len(summaries) > most {
		t.Errorf("%d summary lines for a flood of %v, want 1 to %d", len(summaries), elapsed, most)
	}
	if got := len(full) + summed; got != n {
		t.Errorf("the log counts %d refusals, want %d", got, n)
	}
	for _, want := range []string{"bad greeting", "wrong secret", "wrong role"} {
		if !strings.Contains(strings.Join(full, "\n"), want) {
			t.Errorf("the lines logged in full lack %q", want)
		}
	}
	for _, line := range summaries {
		if !strings.HasSuffix(line, "(from 127.0.0.1)") {
			t.Errorf("summary %q does not name the one host the refusals came from", line)
		}
	}
	if t.Failed() {
		t.Logf("log:\n%s", log.String())
	}
}

// Refusals beyond the first few are summed up once an interval has passed,
// without waiting for the store to close; after a quiet interval, refusals
// are logged in full again.
func TestStoreRefusalInterval(t *testing.T) {
	defer func(d time.Duration) { refusalInterval = d }(refusalInterval)
	refusalInterval = 100 * time.Millisecond
	log := &testenv.SyncBuffer{}
	s := rank0(t, log)
	defer s.Close()
	const n = 20
	for i := range n {
		refuse(t, s.Addr(), i)
	}
	// The summary comes by itself.
	deadline := time.Now().Add(5 * time.Second)
	for {
		full, _, summed := refusalLines(t, log.String())
		if len(full)+summed == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no summary of all %d refusals before the store closed:\n%s", n, log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Quiet for a whole interval: the next refusal is logged in full.
	time.Sleep(2 * refusalInterval)
	refuse(t, s.Addr(), 1)
	full, _, summed := refusalLines(t, log.String())
	if len(full) != refusalsInFull+1 || !strings.Contains(full[len(full)-1], "wrong secret") {
		t.Errorf("after a quiet interval: %d lines in full, want %d:\n%s", len(full), refusalsInFull+1, log.String())
	}
	s.Close()
	full, _, summed = refusalLines(t, log.String())
	if got := len(full) + summed; got != n+1 {
		t.Errorf("the log counts %d refusals, want %d:\n%s", got, n+1, log.String())
	}
}

// Clients that connect to the store and say nothing, or prove themselves
// and then say nothing, do not hold up rank 0's Close, which cuts them at
// once and does not count them as refused.
func TestStoreCloseCutsSilentConnections(t *testing.T) {
	log := &testenv.SyncBuffer{}
	s := rank0(t, log)
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	const silent = 5
	for range silent {
		c, err := net.Dial("tcp", s.Addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	c, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	clients = append(clients, c)
	if err := clientHandshake(c, []byte(testSecret), roleStore, 0, time.Now().Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Wait until the store has accepted them all (and rank 0's own
	// connection).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		s.srv.mu.Lock()
		n := len(s.srv.conns)
		s.srv.mu.Unlock()
		if n == len(clients)+1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store accepted %d connections, want %d", n, len(clients)+1)
		}
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		s.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		// Let Close end before the test does.
		for _, c := range clients {
			c.Close()
		}
		<-done
		t.Fatalf("Close waited %v for silent connections (%v in all)", 3*time.Second, time.Since(start))
	}
	t.Logf("Close took %v", time.Since(start))
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("client %d: the store did not close its connection", i)
		}
	}
	if strings.Contains(log.String(), "refused") {
		t.Errorf("connections cut by Close were logged as refused:\n%s", log.String())
	}
}

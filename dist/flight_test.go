package dist

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFlightRecorderRing keeps the last FlightCapacity collectives, oldest
// first, with their states and times.
func TestFlightRecorderRing(t *testing.T) {
	f := newFlightRecorder()
	for i := 1; i <= FlightCapacity+5; i++ {
		seq := f.add("all-reduce", i, fmt.Sprintf("bucket %d", i%3), int64(4*i))
		f.set(seq, FlightRunning, nil)
		if i < FlightCapacity+5 {
			f.set(seq, FlightDone, nil)
		}
	}
	f.set(3, FlightFailed, nil) // long gone from the ring: ignored
	es := f.Entries()
	if len(es) != FlightCapacity || es[0].Seq != 6 || es[len(es)-1].Seq != FlightCapacity+5 {
		t.Fatalf("%d entries, seq %d to %d; want %d, 6 to %d", len(es), es[0].Seq, es[len(es)-1].Seq, FlightCapacity, FlightCapacity+5)
	}
	last := es[len(es)-1]
	if last.State != FlightRunning || last.Started == 0 || last.Ended != 0 || es[0].State != FlightDone || es[0].Ended < es[0].Started {
		t.Errorf("states or times wrong: first %+v, last %+v", es[0], last)
	}
}

// flightJob runs fn(rank, group) on each of 4 in-process ranks whose
// collectives time out after 600 ms, and returns their flight dumps.
func flightJob(t *testing.T, fn func(r int, g *TCPGroup)) []FlightDump {
	t.Helper()
	groups := job(t, 4, TCPOptions{Timeout: 600 * time.Millisecond, RootCauseWait: 300 * time.Millisecond}, nil)
	var wg sync.WaitGroup
	for r, g := range groups {
		wg.Go(func() { fn(r, g) })
	}
	wg.Wait()
	dumps := make([]FlightDump, len(groups))
	for r, g := range groups {
		dumps[r] = FlightDump{Rank: r, World: len(groups), Group: "ddp", Reason: "test", Dumped: time.Now().UnixNano(), Entries: g.Flight().Entries()}
	}
	return dumps
}

// TestDesyncReportNamesTheRankThatNeverEntered: rank 3 skips the second
// all-reduce (it is alive, but busy elsewhere); the others time out in
// it, and the report names rank 3, the collective and what it had done,
// from every rank's dump and from the others' alone (as when rank 3 is
// stopped and cannot dump), also after a round trip through files.
func TestDesyncReportNamesTheRankThatNeverEntered(t *testing.T) {
	start := time.Now()
	dumps := flightJob(t, func(r int, g *TCPGroup) {
		buf := make([]float32, 1000)
		if err := g.AllReduceAsyncTag(buf, Sum, "bucket 0").Wait(); err != nil {
			t.Errorf("rank %d: first all-reduce: %v", r, err)
		}
		if r == 3 {
			return
		}
		if err := g.AllReduceAsyncTag(buf, Sum, "bucket 1").Wait(); err == nil {
			t.Errorf("rank %d: the second all-reduce succeeded without rank 3", r)
		}
	})
	t.Logf("the ranks failed %v after starting", time.Since(start).Round(time.Millisecond))
	got, err := DesyncReport(dumps, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rank 3 never entered all-reduce #2 (seq 2, bucket 1, 3.9 KiB)", "ranks 0-2 waited", "rank 3's last completed collective was all-reduce #1 (seq 1)"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	t.Logf("report: %s", got)

	dir := t.TempDir()
	for _, d := range dumps[:3] { // rank 3 stopped: no dump
		if err := WriteFlightDump(dir, d); err != nil {
			t.Fatal(err)
		}
	}
	read, err := ReadFlightDumps(dir)
	if err != nil || len(read) != 3 {
		t.Fatalf("read %d dumps: %v", len(read), err)
	}
	got, err = DesyncReport(read, 4)
	if err != nil || !strings.HasPrefix(got, "rank 3 left no flight record") || !strings.Contains(got, "all-reduce #2 (seq 2") {
		t.Errorf("without rank 3's dump: %q, %v", got, err)
	}
}

// TestDesyncReportNamesTheRankThatSkipped: rank 2 skips bucket 0 and
// issues bucket 1 first; its neighbours see another collective's header
// and fail at once, and the report names rank 2 and both collectives.
func TestDesyncReportNamesTheRankThatSkipped(t *testing.T) {
	dumps := flightJob(t, func(r int, g *TCPGroup) {
		b0, b1 := make([]float32, 64), make([]float32, 32)
		if r != 2 {
			g.AllReduceAsyncTag(b0, Avg, "bucket 0").Wait()
		}
		g.AllReduceAsyncTag(b1, Avg, "bucket 1").Wait()
	})
	got, err := DesyncReport(dumps, 4)
	if err != nil {
		t.Fatal(err)
	}
	want := "rank 2 issued all-reduce #1 (seq 1, bucket 1, 128 B) as seq 1, where ranks 0, 1, 3 issued all-reduce #1 (seq 1, bucket 0, 256 B)"
	if !strings.Contains(got, want) {
		t.Errorf("report %q lacks %q", got, want)
	}
}

// TestDesyncReportQuiet: dumps of a group that finished everything show
// no desync; an empty folder is an error naming it.
func TestDesyncReportQuiet(t *testing.T) {
	dumps := flightJob(t, func(r int, g *TCPGroup) { g.AllReduce(make([]float32, 10), Sum) })
	if _, err := DesyncReport(dumps, 4); err != ErrNoDesync {
		t.Errorf("a clean group: %v, want ErrNoDesync", err)
	}
	dir := t.TempDir()
	if _, err := ReadFlightDumps(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("an empty folder: %v", err)
	}
}

// TestDesyncReportReducerSkipsABucket: rank 1's Reducer drops bucket 0
// (the test hook). The buckets have the same size, so the ring pairs
// rank 1's bucket 1 with the others' bucket 0 (the headers agree) and the
// group hangs in the next all-reduce, which rank 1 never issues; the report
// goes back to where the ranks first diverged and names rank 1 and the
// buckets.
func TestDesyncReportReducerSkipsABucket(t *testing.T) {
	dumps := flightJob(t, func(r int, g *TCPGroup) {
		grads := [][]float32{make([]float32, 300), make([]float32, 200), make([]float32, 100)}
		red := NewReducer(g, grads, 4*250) // buckets {2, 1} and {0}
		if r == 1 {
			red.skip = func(b int) bool { return b == 0 }
		}
		for i := len(grads) - 1; i >= 0; i-- {
			red.GradReady(i)
		}
		if err := red.Wait(); err == nil && r != 1 {
			t.Errorf("rank %d: the step succeeded with rank 1 skipping a bucket", r)
		}
	})
	got, err := DesyncReport(dumps, 4)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rank 1 issued all-reduce #1 (seq 1, bucket 1, 1.2 KiB) as seq 1, where ranks 0, 2, 3 issued all-reduce #1 (seq 1, bucket 0, 1.2 KiB)",
		"their sizes matched"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
}

// TestDesyncReportPlacesEachRankByItsOwnRecord: rank 1 of 3 was stopped
// (no record); rank 2 failed in all-reduce #387, but rank 0 had finished
// #387 (its neighbours passed its part on before the ring stalled) and
// failed in #388. The report names #387 and rank 1, and says of each
// other rank where its own record has it, with its own wait: rank 2 in
// #387, rank 0 past it and in #388, never "ranks 0, 2 waited in it".
func TestDesyncReportPlacesEachRankByItsOwnRecord(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	sec := func(s float64) int64 { return t0 + int64(s*1e9) }
	entry := func(seq int, state string, start, end float64) FlightEntry {
		e := FlightEntry{Seq: seq + 3, Op: "all-reduce", KindSeq: seq, Bytes: 12, State: state, Enqueued: sec(start), Started: sec(start)}
		if end > 0 {
			e.Ended = sec(end)
		}
		return e
	}
	dumps := []FlightDump{
		{Rank: 0, World: 3, Dumped: sec(30), Entries: []FlightEntry{
			entry(386, FlightDone, 0, 0.1), entry(387, FlightDone, 0.2, 0.3), entry(388, FlightFailed, 0.5, 21.5)}},
		{Rank: 2, World: 3, Dumped: sec(30), Entries: []FlightEntry{
			entry(386, FlightDone, 0, 0.1), entry(387, FlightFailed, 0.2, 23.2)}},
	}
	got, err := DesyncReport(dumps, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("report: %s", got)
	for _, want := range []string{
		"rank 1 left no flight record (stopped or dead) and did not report entering all-reduce #387 (seq 390, 12 B)",
		"; rank 2 waited 23.0 s in it",
		"; rank 0 finished it and waited 21.0 s in all-reduce #388 (seq 391, 12 B)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "ranks 0, 2") {
		t.Errorf("report %q puts rank 0 in the collective it had finished", got)
	}

	// Rank 0 dumped (SIGUSR1) between collectives: past it, and in none;
	// rank 2's collective still running, its wait counted to its dump.
	dumps[0].Entries = dumps[0].Entries[:2]
	dumps[1].Entries[1].State, dumps[1].Entries[1].Ended = FlightRunning, 0
	got, err = DesyncReport(dumps, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"; rank 2 waited 29.8 s in it", "; rank 0 finished it and was in no collective"} {
		if !strings.Contains(got, want) {
			t.Errorf("report %q lacks %q", got, want)
		}
	}
}

package sysstat

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeSource returns the readings it is given, in turn, then repeats the
// last; an entry with a nil reading is an error.
type fakeSource struct {
	mu       sync.Mutex
	readings []*Sample
	reads    int
	closed   atomic.Bool
}

func (f *fakeSource) Name() string { return "fake" }

func (f *fakeSource) Read() (Sample, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := min(f.reads, len(f.readings)-1)
	f.reads++
	if f.readings[i] == nil {
		return Sample{}, errors.New("fake read error")
	}
	s := *f.readings[i]
	s.At = time.Now()
	return s, nil
}

func (f *fakeSource) Close() error { f.closed.Store(true); return nil }

func TestSamplerStats(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	var readings []*Sample
	var sumUtil, sumProc, sumUsed, peakUtil, peakProc float64
	var peakUsed uint64
	n := 20
	for i := range n {
		s := &Sample{Util: r.Float64() * 100, ProcCPU: r.Float64() * 400, Used: r.Uint64N(1 << 40), Total: 1 << 41}
		if i == 7 {
			s.PeakUsed = 1<<40 + 5 // a peak the source saw between samples
		}
		readings = append(readings, s)
		sumUtil += s.Util
		sumProc += s.ProcCPU
		sumUsed += float64(s.Used)
		peakUtil = max(peakUtil, s.Util)
		peakProc = max(peakProc, s.ProcCPU)
		peakUsed = max(peakUsed, s.Used, s.PeakUsed)
	}
	src := &fakeSource{readings: readings}
	s := NewSampler(src, time.Hour) // no ticks: drive it by hand
	s.Start()
	for range n - 1 {
		s.sample()
	}
	st := s.Stop() // the last sample
	if !src.closed.Load() {
		t.Error("Stop did not close the source")
	}
	if st.Samples != n || st.Errors != 0 || st.Err != nil {
		t.Fatalf("samples %d errors %d err %v, want %d 0 nil", st.Samples, st.Errors, st.Err, n)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
	if !near(st.MeanUtil, sumUtil/float64(n)) || st.PeakUtil != peakUtil {
		t.Errorf("util mean %v peak %v, want %v %v", st.MeanUtil, st.PeakUtil, sumUtil/float64(n), peakUtil)
	}
	if !near(st.MeanProcCPU, sumProc/float64(n)) || st.PeakProcCPU != peakProc {
		t.Errorf("proc CPU mean %v peak %v, want %v %v", st.MeanProcCPU, st.PeakProcCPU, sumProc/float64(n), peakProc)
	}
	if d := math.Abs(float64(st.MeanUsed) - sumUsed/float64(n)); d > 1 || st.PeakUsed != peakUsed || st.Total != 1<<41 {
		t.Errorf("memory mean %d peak %d total %d, want %.0f %d %d", st.MeanUsed, st.PeakUsed, st.Total, sumUsed/float64(n), peakUsed, uint64(1<<41))
	}
	if st.Latest.Util != readings[n-1].Util {
		t.Errorf("latest %+v, want the last reading %+v", st.Latest, *readings[n-1])
	}
	if again := s.Stop(); again.Samples != n {
		t.Errorf("a second Stop sampled again: %d", again.Samples)
	}
	if !strings.Contains(st.String(), "fake: util") {
		t.Errorf("summary %q", st.String())
	}
}

func TestSamplerErrors(t *testing.T) {
	src := &fakeSource{readings: []*Sample{{Util: 50, Used: 10}, nil, nil, {Util: 100, Used: 30}}}
	s := NewSampler(src, time.Hour)
	s.Start()
	s.sample()
	s.sample()
	if st := s.Stats(); st.Samples != 1 || st.Errors != 1 || st.Err == nil || st.Latest.Util != 50 {
		t.Errorf("after an error: %+v", st)
	}
	s.sample()
	st := s.Stop()
	if st.Samples != 2 || st.Errors != 2 || st.Err != nil || st.MeanUtil != 75 || st.PeakUsed != 30 || st.MeanUsed != 20 {
		t.Errorf("final: %+v", st)
	}
	// Never started: Stop takes no sample, Start afterwards does nothing.
	src = &fakeSource{readings: []*Sample{{Util: 1}}}
	s = NewSampler(src, time.Millisecond)
	if st := s.Stop(); st.Samples != 0 || !src.closed.Load() {
		t.Errorf("stopped unstarted sampler: %+v", st)
	}
	s.Start()
	time.Sleep(5 * time.Millisecond)
	if st := s.Stats(); st.Samples != 0 {
		t.Errorf("Start after Stop sampled: %+v", st)
	}
	if !strings.Contains(st.String(), "no samples") && st.Samples == 0 {
		t.Errorf("summary %q", st.String())
	}
}

// The background loop runs, and Stats, Start and Stop from several
// goroutines at once are race-free (run with -race).
func TestSamplerBackground(t *testing.T) {
	src := &fakeSource{readings: []*Sample{{Util: 10, Used: 1}, {Util: 20, Used: 2}, {Util: 30, Used: 3}}}
	s := NewSampler(src, time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.Start()
			for range 50 {
				_ = s.Stats()
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Samples < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); s.Stop() }()
	}
	wg.Wait()
	st := s.Stats()
	if st.Samples < 3 || st.PeakUtil != 30 || st.PeakUsed != 3 || st.Elapsed <= 0 {
		t.Errorf("background sampling: %+v", st)
	}
	if reads := func() int { src.mu.Lock(); defer src.mu.Unlock(); return src.reads }(); reads != st.Samples {
		t.Errorf("%d reads for %d samples: a read after Stop?", reads, st.Samples)
	}
}

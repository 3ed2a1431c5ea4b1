package sysstat

import (
	"fmt"
	"github.com/fleetml/fleet/internal/units"
	"sync"
	"time"

	"github.com/fleetml/fleet/monitor/nvml"
)

// DefaultInterval is the Sampler's interval when none is given.
const DefaultInterval = time.Second

// Sample is one reading of a Source.
type Sample struct {
	At time.Time
	// Util is how busy the device was, in percent (0 to 100): for a GPU,
	// NVML's utilisation (the share of time a kernel was running); for the
	// CPU, all cores together since the previous sample.
	Util float64
	// ProcCPU is, for the CPU source, the process's own CPU use since the
	// previous sample in percent of one core (400 = four busy cores); 0 for
	// a GPU.
	ProcCPU float64
	// Used and Total are memory in bytes. For a GPU: the device's memory in
	// use (by every process, and the driver's reservation) and its size. For
	// the CPU: the process's resident memory (RSS) and the machine's memory.
	Used, Total uint64
	// PeakUsed is the source's own record of the most memory used so far,
	// where it keeps one (the process's VmHWM for the CPU), else 0. It
	// catches peaks that fall between samples.
	PeakUsed uint64
}

// Source is something a Sampler reads: [NewGPUSource] or [NewCPUSource],
// or a fake in tests. Read is called from one goroutine at a time.
type Source interface {
	// Name says what is sampled, e.g. "GPU 0 (NVIDIA H200)" or "CPU (16 cores), pid 1234".
	Name() string
	Read() (Sample, error)
	Close() error
}

// Stats is what a Sampler has seen.
type Stats struct {
	Source  string // Source.Name
	Samples int    // successful reads
	Errors  int    // failed reads
	Err     error  // the last read's error, nil if it succeeded
	Latest  Sample // the last successful read
	// Mean and peak of Sample.Util and Sample.ProcCPU over the samples.
	MeanUtil, PeakUtil       float64
	MeanProcCPU, PeakProcCPU float64
	// MeanUsed is the mean of Sample.Used; PeakUsed the largest Used or
	// PeakUsed seen. Total is the latest Sample.Total.
	MeanUsed, PeakUsed, Total uint64
	// Elapsed is the time from Start to the latest sample.
	Elapsed time.Duration
}

// String is a one-line summary, e.g. "GPU 0 (NVIDIA H200): util 87% mean,
// 100% peak; memory 61.2 GiB mean, 70.3 GiB peak of 140.0 GiB (120 samples)".
func (s Stats) String() string {
	if s.Samples == 0 {
		if s.Err != nil {
			return fmt.Sprintf("%s: no samples: %v", s.Source, s.Err)
		}
		return s.Source + ": no samples"
	}
	out := fmt.Sprintf("%s: util %.0f%% mean, %.0f%% peak", s.Source, s.MeanUtil, s.PeakUtil)
	if s.PeakProcCPU > 0 {
		out += fmt.Sprintf("; process CPU %.0f%% mean, %.0f%% peak", s.MeanProcCPU, s.PeakProcCPU)
	}
	out += fmt.Sprintf("; memory %s mean, %s peak of %s (%d samples)", Bytes(s.MeanUsed), Bytes(s.PeakUsed), Bytes(s.Total), s.Samples)
	if s.Errors > 0 {
		out += fmt.Sprintf(", %d failed", s.Errors)
	}
	return out
}

// Sampler reads a Source in the background every interval and keeps the
// latest, mean and peak. Its methods are safe from any goroutine.
type Sampler struct {
	src      Source
	interval time.Duration

	mu                        sync.Mutex
	started                   time.Time
	stats                     Stats
	sumUtil, sumProc, sumUsed float64

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewSampler returns a Sampler of src, reading it every interval
// (DefaultInterval if interval <= 0). It takes ownership of src: Stop
// closes it.
func NewSampler(src Source, interval time.Duration) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	return &Sampler{src: src, interval: interval, stats: Stats{Source: src.Name()}}
}

// NewGPUSampler samples GPU index (NVML's order) every interval.
func NewGPUSampler(index int, interval time.Duration) (*Sampler, error) {
	src, err := NewGPUSource(index)
	if err != nil {
		return nil, err
	}
	return NewSampler(src, interval), nil
}

// NewCPUSampler samples the CPU and process pid (0: this process) every
// interval.
func NewCPUSampler(pid int, interval time.Duration) (*Sampler, error) {
	src, err := NewCPUSource(pid)
	if err != nil {
		return nil, err
	}
	return NewSampler(src, interval), nil
}

// Start begins sampling: the first sample is taken one interval later (the
// CPU figures are rates over the time between samples). Start on a started
// or stopped Sampler does nothing.
func (s *Sampler) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stop != nil {
		return
	}
	s.started = time.Now()
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	go s.loop(s.stop, s.done)
}

func (s *Sampler) loop(stop, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.sample()
		}
	}
}

// sample reads the source once and folds the reading into the stats.
func (s *Sampler) sample() {
	r, err := s.src.Read()
	s.mu.Lock()
	defer s.mu.Unlock()
	st := &s.stats
	st.Err = err
	if err != nil {
		st.Errors++
		return
	}
	st.Samples++
	st.Latest = r
	st.Elapsed = r.At.Sub(s.started)
	st.Total = r.Total
	s.sumUtil += r.Util
	s.sumProc += r.ProcCPU
	s.sumUsed += float64(r.Used)
	n := float64(st.Samples)
	st.MeanUtil, st.MeanProcCPU, st.MeanUsed = s.sumUtil/n, s.sumProc/n, uint64(s.sumUsed/n)
	st.PeakUtil = max(st.PeakUtil, r.Util)
	st.PeakProcCPU = max(st.PeakProcCPU, r.ProcCPU)
	st.PeakUsed = max(st.PeakUsed, r.Used, r.PeakUsed)
}

// Stats returns what has been sampled so far.
func (s *Sampler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Stop ends sampling, takes one last sample (so that a run shorter than
// the interval still has one), closes the source and returns the final
// Stats. Later calls return the same Stats.
func (s *Sampler) Stop() Stats {
	s.once.Do(func() {
		s.mu.Lock()
		stop, done := s.stop, s.done
		if stop == nil { // never started: mark it so Start does nothing
			s.stop = make(chan struct{})
			s.started = time.Now()
		}
		s.mu.Unlock()
		if stop != nil {
			close(stop)
			<-done
			s.sample()
		}
		if err := s.src.Close(); err != nil {
			s.mu.Lock()
			if s.stats.Err == nil {
				s.stats.Err = err
			}
			s.mu.Unlock()
		}
	})
	return s.Stats()
}

// gpuSource samples one GPU through NVML.
type gpuSource struct {
	dev  nvml.Device
	name string
}

// NewGPUSource initialises NVML and opens GPU index. Its samples hold the
// GPU's utilisation and its memory used and total.
func NewGPUSource(index int) (Source, error) {
	if err := nvml.Init(); err != nil {
		return nil, err
	}
	dev, err := nvml.DeviceByIndex(index)
	if err != nil {
		nvml.Shutdown()
		return nil, err
	}
	name := fmt.Sprintf("GPU %d", index)
	if n, err := dev.Name(); err == nil {
		name += " (" + n + ")"
	}
	return &gpuSource{dev: dev, name: name}, nil
}

func (g *gpuSource) Name() string { return g.name }

func (g *gpuSource) Read() (Sample, error) {
	u, err := g.dev.Utilization()
	if err != nil {
		return Sample{}, err
	}
	m, err := g.dev.Memory()
	if err != nil {
		return Sample{}, err
	}
	return Sample{At: time.Now(), Util: float64(u.GPU), Used: m.Used, Total: m.Total}, nil
}

func (g *gpuSource) Close() error { return nvml.Shutdown() }

// cpuSource samples the machine's CPUs and memory and one process.
type cpuSource struct {
	r        *cpuReader
	name     string
	prevCPU  CPUTimes
	prevProc uint64 // ticks
	prevAt   time.Time
}

// NewCPUSource samples the machine's CPU use and process pid's (0: this
// process) CPU use and resident memory, from /proc files it keeps open
// until Close. On systems other than Linux it returns ErrNotSupported.
func NewCPUSource(pid int) (Source, error) {
	r, err := newCPUReader(pid)
	if err != nil {
		return nil, err
	}
	c := &cpuSource{r: r}
	if _, err := r.read(); err != nil {
		r.close()
		return nil, err
	}
	c.prevCPU, c.prevProc, c.prevAt = r.cpu.All, r.proc.UTime+r.proc.STime, time.Now()
	c.name = fmt.Sprintf("CPU (%d cores), pid %d", len(r.cpu.Cores), r.proc.PID)
	return c, nil
}

func (c *cpuSource) Name() string { return c.name }

func (c *cpuSource) Read() (Sample, error) {
	mem, err := c.r.read()
	if err != nil {
		return Sample{}, err
	}
	now := time.Now()
	proc := c.r.proc.UTime + c.r.proc.STime
	s := Sample{
		At:       now,
		Util:     Utilization(c.prevCPU, c.r.cpu.All),
		Used:     c.r.proc.RSS,
		Total:    mem.Total,
		PeakUsed: c.r.proc.PeakRSS,
	}
	if dt := now.Sub(c.prevAt); dt > 0 && proc >= c.prevProc {
		s.ProcCPU = 100 * float64(ticks(proc-c.prevProc)) / float64(dt)
	}
	c.prevCPU, c.prevProc, c.prevAt = c.r.cpu.All, proc, now
	return s, nil
}

func (c *cpuSource) Close() error { return c.r.close() }

// Bytes formats a byte count with a binary unit (units.Bytes).
func Bytes(n uint64) string { return units.Bytes(int64(min(n, 1<<62))) }

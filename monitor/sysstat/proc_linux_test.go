//go:build linux

package sysstat

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/fleetml/fleet/internal/testenv"
)

// spin keeps the CPU busy for d.
func spin(d time.Duration) {
	x := 1.0
	for end := time.Now().Add(d); time.Now().Before(end); {
		for range 1000 {
			x = x*1.0000001 + 1e-9
		}
	}
	_ = x
}

func TestReadLive(t *testing.T) {
	testenv.SkipIfEmulated(t)
	if hz := ClockTicks(); hz <= 0 {
		t.Errorf("ClockTicks = %d", hz)
	}
	a, err := ReadCPUStat()
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Cores) == 0 || len(a.Cores) > runtime.NumCPU()*4 || NumCPU() != len(a.Cores) {
		t.Errorf("%d cores (runtime says %d)", len(a.Cores), runtime.NumCPU())
	}
	spin(100 * time.Millisecond)
	b, err := ReadCPUStat()
	if err != nil {
		t.Fatal(err)
	}
	all, cores := CoreUtilization(a, b)
	if all <= 0 || all > 100 || len(cores) != len(b.Cores) {
		t.Errorf("utilisation %v%% while spinning, cores %v", all, cores)
	}
	m, err := ReadMemInfo()
	if err != nil {
		t.Fatal(err)
	}
	if m.Total < 64<<20 || m.Available == 0 || m.Available > m.Total {
		t.Errorf("meminfo %+v", m)
	}
	p, err := ReadProc(0)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != os.Getpid() || p.Comm == "" || p.RSS < 1<<20 || p.PeakRSS < p.RSS || p.Threads < 1 {
		t.Errorf("self: %+v (pid %d)", p, os.Getpid())
	}
	// The kernel's CPU time for this process, as getrusage gives it, agrees
	// to within a few ticks (both count the same time; /proc rounds to ticks).
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	p2, err := ReadProc(0)
	if err != nil {
		t.Fatal(err)
	}
	rusage := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	tick := time.Second / time.Duration(ClockTicks())
	if d := rusage - p.CPUTime(); p.CPUTime() <= 0 || d < -5*tick || p2.CPUTime()-rusage > 5*tick {
		t.Errorf("CPU time from /proc %v then %v; getrusage between them %v", p.CPUTime(), p2.CPUTime(), rusage)
	}
	if _, err := ReadProc(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("ReadProc of no process: %v", err)
	}
	if ProcName(os.Getpid()) != p.Comm || ProcName(1<<30) != "" {
		t.Errorf("ProcName(self) = %q, want %q", ProcName(os.Getpid()), p.Comm)
	}
}

func TestFindProcesses(t *testing.T) {
	self := filepath.Base(os.Args[0])
	ps, err := FindProcesses(self)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		if p.PID == os.Getpid() {
			found = p.RSS > 0
		}
	}
	if !found {
		t.Errorf("FindProcesses(%q) = %+v: this process (%d) missing", self, ps, os.Getpid())
	}
	ps, err = FindProcesses("no-such-program-here")
	if err != nil || len(ps) != 0 {
		t.Errorf("FindProcesses of nothing = %+v, %v", ps, err)
	}
}

// The CPU sampler sees this process's CPU use and memory.
func TestCPUSampler(t *testing.T) {
	testenv.SkipIfEmulated(t)
	s, err := NewCPUSampler(0, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	keep := make([]byte, 64<<20)
	for i := range keep {
		keep[i] = byte(i)
	}
	spin(150 * time.Millisecond)
	st := s.Stop()
	if st.Samples < 2 || st.Errors != 0 {
		t.Fatalf("%+v", st)
	}
	if st.PeakProcCPU < 5 || st.PeakUtil <= 0 || st.PeakUtil > 100 {
		t.Errorf("process CPU peak %.0f%%, machine %.0f%%, while spinning", st.PeakProcCPU, st.PeakUtil)
	}
	if st.PeakUsed < 64<<20 || st.Total < st.PeakUsed {
		t.Errorf("peak memory %d of %d after touching 64 MiB", st.PeakUsed, st.Total)
	}
	t.Log(st)
	_ = keep[len(keep)-1]
}

// BenchmarkCPUSample is the cost of one CPU sample, the Sampler's per-tick
// work during training. cpu-ns/op is the process's user+system CPU time per
// sample (getrusage), which is what it takes from training.
func BenchmarkCPUSample(b *testing.B) {
	src, err := NewCPUSource(0)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	src.Read()
	b.ReportAllocs()
	var r0, r1 syscall.Rusage
	runtime.LockOSThread() // RUSAGE_THREAD: this thread's time
	defer runtime.UnlockOSThread()
	syscall.Getrusage(syscall.RUSAGE_THREAD, &r0)
	for b.Loop() {
		if _, err := src.Read(); err != nil {
			b.Fatal(err)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_THREAD, &r1)
	cpu := time.Duration(r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

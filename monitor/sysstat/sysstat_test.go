package sysstat

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func randTimes(r *rand.Rand) CPUTimes {
	n := func() uint64 { return r.Uint64N(1 << 40) }
	return CPUTimes{n(), n(), n(), n(), n(), n(), n(), n()}
}

func (t CPUTimes) line(name string, guest, guestNice uint64) string {
	return fmt.Sprintf("%s %d %d %d %d %d %d %d %d %d %d", name, t.User, t.Nice, t.System, t.Idle, t.IOWait, t.IRQ, t.SoftIRQ, t.Steal, guest, guestNice)
}

func TestParseCPUStat(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	all := randTimes(r)
	ids := []int{0, 1, 3, 12} // core 2 offline
	var b strings.Builder
	b.WriteString(all.line("cpu ", 5, 6) + "\n")
	var cores []CPUTimes
	for _, id := range ids {
		c := randTimes(r)
		cores = append(cores, c)
		b.WriteString(c.line(fmt.Sprintf("cpu%d", id), r.Uint64N(100), 0) + "\n")
	}
	b.WriteString("intr 1 2 3\nctxt 99\ncpu_not_a_core 1 2 3 4\nbtime 1700000000\n")
	var st CPUStat
	if err := parseCPUStat([]byte(b.String()), &st); err != nil {
		t.Fatal(err)
	}
	if st.All != all {
		t.Errorf("all = %+v, want %+v", st.All, all)
	}
	if len(st.Cores) != len(ids) {
		t.Fatalf("%d cores, want %d", len(st.Cores), len(ids))
	}
	for i, c := range st.Cores {
		if c.ID != ids[i] || c.CPUTimes != cores[i] {
			t.Errorf("core %d = %+v, want id %d %+v", i, c, ids[i], cores[i])
		}
	}
	// Reuse keeps the slice and replaces the contents.
	if err := parseCPUStat([]byte(all.line("cpu", 0, 0)+"\n"+cores[0].line("cpu5", 0, 0)+"\n"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Cores) != 1 || st.Cores[0].ID != 5 {
		t.Errorf("reparse: cores %+v", st.Cores)
	}
	// An old kernel's four columns.
	if err := parseCPUStat([]byte("cpu 1 2 3 4\ncpu0 1 2 3 4\n"), &st); err != nil || st.All.Idle != 4 || st.All.Steal != 0 {
		t.Errorf("four columns: %+v, %v", st.All, err)
	}
	for _, bad := range []string{"", "intr 1\n", "cpu 1 2 x 4\n", "cpu 1 2\n", "cpu 1 2 3 4\ncpuX 1 2 3 4\n"} {
		if err := parseCPUStat([]byte(bad), &st); err == nil {
			t.Errorf("parsed %q without error", bad)
		}
	}
}

func TestUtilization(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		prev := randTimes(r)
		busy, idle := r.Uint64N(1000), r.Uint64N(1000)+1
		cur := prev
		// Spread the busy time over the busy states and the idle time over idle and iowait.
		cur.User += busy / 3
		cur.System += busy / 3
		cur.SoftIRQ += busy - 2*(busy/3)
		cur.Idle += idle / 2
		cur.IOWait += idle - idle/2
		want := 100 * float64(busy) / float64(busy+idle)
		if got := Utilization(prev, cur); math.Abs(got-want) > 1e-9 {
			t.Fatalf("busy %d idle %d: %.6f%%, want %.6f%%", busy, idle, got, want)
		}
	}
	same := randTimes(r)
	if u := Utilization(same, same); u != 0 {
		t.Errorf("no time passed: %v", u)
	}
	// Core matching by ID, with a core missing from the previous reading.
	a, b := randTimes(r), randTimes(r)
	prev := CPUStat{Cores: []CoreTimes{{ID: 0, CPUTimes: a}, {ID: 1, CPUTimes: b}}}
	a2, b2 := a, b
	a2.User += 30
	a2.Idle += 70
	b2.User += 90
	b2.Idle += 10
	cur := CPUStat{Cores: []CoreTimes{{ID: 1, CPUTimes: b2}, {ID: 0, CPUTimes: a2}, {ID: 7, CPUTimes: a}}}
	_, cores := CoreUtilization(prev, cur)
	if len(cores) != 3 || math.Abs(cores[0]-90) > 1e-9 || math.Abs(cores[1]-30) > 1e-9 || cores[2] != 0 {
		t.Errorf("core utilisation %v, want [90 30 0]", cores)
	}
}

func TestParseMemInfo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	total := r.Uint64N(1<<30) + 1<<20
	avail := r.Uint64N(total)
	text := fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\nMemAvailable:   %d kB\nBuffers:          1234 kB\nCached:         99 kB\nHugePages_Total:       0\n", total, avail/2, avail)
	m, err := parseMemInfo([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.Total != total*1024 || m.Available != avail*1024 || m.Used() != (total-avail)*1024 {
		t.Errorf("got %+v used %d, want total %d available %d (kB)", m, m.Used(), total, avail)
	}
	// Without MemAvailable: free + buffers + cached.
	m, err = parseMemInfo([]byte("MemTotal: 1000 kB\nMemFree: 100 kB\nBuffers: 20 kB\nCached: 3 kB\n"))
	if err != nil || m.Available != 123*1024 {
		t.Errorf("old kernel: %+v, %v", m, err)
	}
	for _, bad := range []string{"MemFree: 1 kB\n", "MemTotal: x kB\n", "MemTotal: 1 MB\n"} {
		if _, err := parseMemInfo([]byte(bad)); err == nil {
			t.Errorf("parsed %q without error", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	pid, ut, st, threads, start := r.IntN(1<<22)+1, r.Uint64N(1<<40), r.Uint64N(1<<40), r.IntN(500)+1, r.Uint64N(1<<40)
	// A command name with spaces and parentheses: fields count from the last ')'.
	comm := "fleet (x) y"
	fields := []string{"S"}
	for f := 4; f <= 52; f++ {
		v := fmt.Sprint(r.IntN(1000))
		switch f {
		case 14:
			v = fmt.Sprint(ut)
		case 15:
			v = fmt.Sprint(st)
		case 20:
			v = fmt.Sprint(threads)
		case 22:
			v = fmt.Sprint(start)
		case 7:
			v = "-1"
		}
		fields = append(fields, v)
	}
	line := fmt.Sprintf("%d (%s) %s\n", pid, comm, strings.Join(fields, " "))
	var p ProcStat
	if err := parseProcStat([]byte(line), &p); err != nil {
		t.Fatal(err)
	}
	want := ProcStat{PID: pid, Comm: comm, State: 'S', UTime: ut, STime: st, StartTime: start, Threads: threads}
	if p != want {
		t.Errorf("got %+v\nwant %+v", p, want)
	}
	rss, hwm := r.Uint64N(1<<30), r.Uint64N(1<<30)
	status := fmt.Sprintf("Name:\tfleet\nVmPeak:\t 999999 kB\nVmHWM:\t%8d kB\nVmRSS:\t%8d kB\nVmSwap:\t0 kB\nThreads:\t%d\n", hwm, rss, threads)
	if err := parseProcStatus([]byte(status), &p); err != nil {
		t.Fatal(err)
	}
	if p.RSS != rss*1024 || p.PeakRSS != hwm*1024 {
		t.Errorf("RSS %d peak %d, want %d %d", p.RSS, p.PeakRSS, rss*1024, hwm*1024)
	}
	for _, bad := range []string{"", "12 (x", "x (a) S 1", "12 (a) S 1 2 3"} {
		if err := parseProcStat([]byte(bad), &p); err == nil {
			t.Errorf("parsed %q without error", bad)
		}
	}
}

func TestCPUPercent(t *testing.T) {
	hz := uint64(ClockTicks())
	prev := ProcStat{UTime: 1000, STime: 500}
	cur := ProcStat{UTime: 1000 + 3*hz, STime: 500 + hz} // 4 s of CPU
	if got := CPUPercent(prev, cur, 2*time.Second); math.Abs(got-200) > 1e-9 {
		t.Errorf("4 s of CPU in 2 s = %v%%, want 200", got)
	}
	if got := CPUPercent(cur, prev, time.Second); got != 0 {
		t.Errorf("going backwards: %v", got)
	}
	if d := cur.CPUTime(); d != time.Duration(1500+4*hz)*time.Second/time.Duration(hz) {
		t.Errorf("CPUTime = %v", d)
	}
}

func TestMatchesName(t *testing.T) {
	cases := []struct {
		comm, cmdline, name string
		want                bool
	}{
		{"fleet", "/usr/local/bin/fleet\x00train\x00", "fleet", true},
		{"fleet", "", "fleet", true},
		{"fleetd", "/bin/fleetd\x00", "fleet", false},
		{"python3", "python3\x00fleet\x00", "fleet", false},
		{"bash", "./fleet\x00smi\x00", "fleet", true}, // argv[0] matches though comm does not
		{"sysstat.test", "/tmp/go-build/b001/sysstat.test\x00-test.v\x00", "sysstat.test", true},
		{"averyveryverylo", "/x/averyveryverylongname\x00", "averyveryverylongname", true},
		{"averyveryverylo", "/x/averyveryverylongnameX\x00", "averyveryverylongname", false},
		{"averyveryverylo", "", "averyveryverylongname", true},
		{"averyveryverylo", "", "averyveryverylo", true},
	}
	for _, c := range cases {
		if got := matchesName(c.comm, []byte(c.cmdline), c.name); got != c.want {
			t.Errorf("matchesName(%q, %q, %q) = %v", c.comm, c.cmdline, c.name, got)
		}
	}
}

func TestParseAuxv(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	hz := r.Uint64N(1000) + 1
	for _, ws := range []int{4, 8} {
		var b []byte
		put := func(v uint64) {
			if ws == 4 {
				b = binary.NativeEndian.AppendUint32(b, uint32(v))
			} else {
				b = binary.NativeEndian.AppendUint64(b, v)
			}
		}
		put(6) // AT_PAGESZ
		put(4096)
		put(17) // AT_CLKTCK
		put(hz)
		put(0)
		put(0)
		if got := parseAuxvClockTicks(b, ws); got != hz {
			t.Errorf("word size %d: %d, want %d", ws, got, hz)
		}
		if got := parseAuxvClockTicks(b[:2*ws], ws); got != 0 {
			t.Errorf("word size %d without AT_CLKTCK: %d", ws, got)
		}
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1 KiB", 1536: "1.5 KiB", 3 << 30: "3 GiB", 141 << 30: "141 GiB"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}

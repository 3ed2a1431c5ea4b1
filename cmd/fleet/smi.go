package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/fleetml/fleet/internal/term"

	"github.com/fleetml/fleet/monitor/nvml"
	"github.com/fleetml/fleet/monitor/sysstat"
)

const smiUsage = `Usage: fleet smi [--watch INTERVAL [--count N]] [--cpu] [--name NAME]

Shows each GPU's utilisation, memory, temperature, power, clocks and compute
processes, read from NVIDIA's management library (NVML), like nvidia-smi.
Without a usable GPU it shows the CPU instead: each core's utilisation, the
machine's memory and the running fleet processes with their resident memory
and CPU use, and says why no GPU is shown.

Flags:
`

// smiCmd prints the state of the GPUs (or of the CPU when there are none),
// once or, with --watch, every interval until interrupted.
func smiCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("smi", flag.ContinueOnError)
	watch := fs.Duration("watch", 0, "print again every `INTERVAL` (e.g. 2s) until interrupted (ctrl-C); 0 prints once")
	count := fs.Int("count", 0, "with --watch, stop after `N` reports (0: until interrupted)")
	cpuOnly := fs.Bool("cpu", false, "show the CPU even where there are GPUs")
	name := fs.String("name", "fleet", "on the CPU, list the processes of the program `NAME` (by command name or argv[0]; smi itself is left out)")
	window := fs.Duration("sample", 500*time.Millisecond, "on the CPU, measure utilisation over this `DURATION` for the first report (later ones: since the previous report)")
	fs.Usage = func() {
		fmt.Fprint(stderr, smiUsage)
		fs.PrintDefaults()
	}
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	switch {
	case *watch < 0:
		return usageError(fs, stderr, "--watch must not be negative")
	case *count < 0:
		return usageError(fs, stderr, "--count must not be negative")
	case *count > 0 && *watch == 0:
		return usageError(fs, stderr, "--count needs --watch")
	case *window <= 0:
		return usageError(fs, stderr, "--sample must be positive")
	case *name == "":
		return usageError(fs, stderr, "--name must not be empty")
	}

	// Stop at ctrl-C or SIGTERM: between reports, or while sampling.
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	quit := make(chan struct{})
	defer close(quit)
	go func() {
		select {
		case <-sigs:
			close(stop)
		case <-quit:
		}
	}()

	gpus, noGPU := openGPUs(*cpuOnly)
	if noGPU == nil {
		defer nvml.Shutdown()
	}
	cpu := &cpuView{name: *name, self: os.Getpid()}
	tty := term.IsTerminal(stdout)
	for i := 0; ; i++ {
		var buf bytes.Buffer
		if noGPU == nil {
			writeGPUReport(&buf, gpus, time.Now())
		} else if err := cpu.report(&buf, noGPU, *window, stop); err != nil {
			if errors.Is(err, errStopped) {
				return nil
			}
			return err
		}
		switch {
		case *watch > 0 && tty:
			stdout.Write([]byte("\x1b[H\x1b[2J")) // a terminal shows the latest report in place
		case i > 0:
			fmt.Fprintln(stdout)
		}
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		if *watch == 0 || (*count > 0 && i+1 >= *count) {
			return nil
		}
		select {
		case <-stop:
			return nil
		case <-time.After(*watch):
		}
	}
}

// openGPUs initialises NVML and lists the GPUs, or says why there are none
// to show.
func openGPUs(cpuOnly bool) ([]nvml.Device, error) {
	if cpuOnly {
		return nil, errors.New("--cpu given")
	}
	if err := nvml.Init(); err != nil {
		return nil, err
	}
	n, err := nvml.DeviceCount()
	if err == nil && n == 0 {
		err = nvml.ErrNoDevices
	}
	var devs []nvml.Device
	for i := 0; err == nil && i < n; i++ {
		var d nvml.Device
		d, err = nvml.DeviceByIndex(i)
		devs = append(devs, d)
	}
	if err != nil {
		nvml.Shutdown()
		return nil, err
	}
	return devs, nil
}

// table lays out rows in columns two spaces apart; columns listed in right
// are right-aligned.
type table struct {
	rows  [][]string
	right map[int]bool
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer, indent string) {
	var widths []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	for _, r := range t.rows {
		var b strings.Builder
		b.WriteString(indent)
		for i, c := range r {
			pad := strings.Repeat(" ", widths[i]-len([]rune(c)))
			if i > 0 {
				b.WriteString("  ")
			}
			if t.right[i] {
				b.WriteString(pad + c)
			} else if i < len(r)-1 {
				b.WriteString(c + pad)
			} else {
				b.WriteString(c)
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// na is the text for a value NVML could not give (not supported, no
// permission): nvidia-smi's "N/A".
const na = "N/A"

func pct(v float64) string { return fmt.Sprintf("%.0f%%", v) }

// memPair is "used / total unit (pct)" in one unit, e.g. "71.2 / 140.4 GiB (51%)".
func memPair(used, total uint64) string {
	unit, div := "MiB", float64(1<<20)
	if total >= 10<<30 {
		unit, div = "GiB", 1<<30
	}
	s := fmt.Sprintf("%.1f / %.1f %s", float64(used)/div, float64(total)/div, unit)
	if total > 0 {
		s += fmt.Sprintf(" (%.0f%%)", 100*float64(used)/float64(total))
	}
	return s
}

// writeGPUReport prints each GPU and the processes using them.
func writeGPUReport(w io.Writer, gpus []nvml.Device, now time.Time) {
	driver, err := nvml.DriverVersion()
	if err != nil {
		driver = na
	}
	fmt.Fprintf(w, "fleet smi  %s  driver %s  %d GPU%s\n\n", now.Format("2006-01-02 15:04:05"), driver, len(gpus), plural(len(gpus)))
	t := &table{right: map[int]bool{0: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true}}
	t.add("GPU", "NAME", "UTIL", "MEM UTIL", "MEMORY USED / TOTAL", "TEMP", "POWER / LIMIT", "SM CLOCK", "MEM CLOCK")
	type proc struct {
		gpu int
		p   nvml.ProcessInfo
	}
	var procs []proc
	var procErrs []string
	for _, d := range gpus {
		name, err := d.Name()
		if err != nil {
			name = na
		}
		util, memUtil := na, na
		if u, err := d.Utilization(); err == nil {
			util, memUtil = fmt.Sprintf("%d%%", u.GPU), fmt.Sprintf("%d%%", u.Memory)
		}
		mem := na
		if m, err := d.Memory(); err == nil {
			mem = memPair(m.Used, m.Total)
		}
		temp := na
		if c, err := d.Temperature(); err == nil {
			temp = fmt.Sprintf("%d°C", c)
		}
		power := na
		p, errP := d.PowerUsage()
		l, errL := d.PowerLimit()
		switch {
		case errP == nil && errL == nil:
			power = fmt.Sprintf("%.0f / %.0f W", float64(p)/1000, float64(l)/1000)
		case errP == nil:
			power = fmt.Sprintf("%.0f W / %s", float64(p)/1000, na)
		}
		clock := func(c nvml.ClockType) string {
			if mhz, err := d.Clock(c); err == nil {
				return fmt.Sprintf("%d MHz", mhz)
			}
			return na
		}
		t.add(fmt.Sprint(d.Index), name, util, memUtil, mem, temp, power, clock(nvml.ClockSM), clock(nvml.ClockMem))
		ps, err := d.ComputeProcesses()
		if err != nil {
			procErrs = append(procErrs, fmt.Sprintf("GPU %d: %v", d.Index, err))
		}
		for _, p := range ps {
			procs = append(procs, proc{d.Index, p})
		}
	}
	t.write(w, "")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Processes:")
	if len(procs) == 0 && len(procErrs) == 0 {
		fmt.Fprintln(w, "  none running on the GPUs")
	}
	if len(procs) > 0 {
		pt := &table{right: map[int]bool{0: true, 1: true, 3: true}}
		pt.add("GPU", "PID", "NAME", "GPU MEMORY")
		for _, p := range procs {
			name := sysstat.ProcName(int(p.p.PID))
			if name == "" {
				name = "?" // exited, or outside this PID namespace
			}
			mem := na
			if p.p.UsedGPUMemory != nvml.ValueNotAvailable {
				mem = fmt.Sprintf("%d MiB", p.p.UsedGPUMemory>>20)
			}
			pt.add(fmt.Sprint(p.gpu), fmt.Sprint(p.p.PID), name, mem)
		}
		pt.write(w, "  ")
	}
	for _, e := range procErrs {
		fmt.Fprintf(w, "  cannot list processes: %s\n", e)
	}
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// errStopped says a report was interrupted.
var errStopped = errors.New("stopped")

// cpuSnapshot is one reading of the machine and the processes shown.
type cpuSnapshot struct {
	at    time.Time
	cpu   sysstat.CPUStat
	mem   sysstat.MemInfo
	procs []sysstat.ProcStat
}

// cpuView prints CPU reports, each measured against the previous one.
type cpuView struct {
	name string
	self int // left out of the process list
	prev *cpuSnapshot
}

func (v *cpuView) snapshot() (*cpuSnapshot, error) {
	s := &cpuSnapshot{at: time.Now()}
	var err error
	if s.cpu, err = sysstat.ReadCPUStat(); err != nil {
		return nil, err
	}
	if s.mem, err = sysstat.ReadMemInfo(); err != nil {
		return nil, err
	}
	procs, err := sysstat.FindProcesses(v.name)
	if err != nil {
		return nil, err
	}
	for _, p := range procs {
		if p.PID != v.self {
			s.procs = append(s.procs, p)
		}
	}
	return s, nil
}

// report prints the CPU report; the first one samples for window first.
func (v *cpuView) report(w io.Writer, noGPU error, window time.Duration, stop <-chan struct{}) error {
	if v.prev == nil {
		first, err := v.snapshot()
		if err != nil {
			return fmt.Errorf("no GPU (%v), and the CPU cannot be read: %w", noGPU, err)
		}
		v.prev = first
		select {
		case <-stop:
			return errStopped
		case <-time.After(window):
		}
	}
	cur, err := v.snapshot()
	if err != nil {
		return err
	}
	prev := v.prev
	v.prev = cur
	all, cores := sysstat.CoreUtilization(prev.cpu, cur.cpu)
	elapsed := cur.at.Sub(prev.at)

	fmt.Fprintf(w, "fleet smi  %s  CPU only\n", cur.at.Format("2006-01-02 15:04:05"))
	fmt.Fprintf(w, "No GPU shown: %v\n\n", noGPU)
	t := &table{right: map[int]bool{1: true, 2: true}}
	t.add("CPU", "CORES", "UTIL", "MEMORY USED / TOTAL")
	t.add("all", fmt.Sprint(len(cur.cpu.Cores)), pct(all), memPair(cur.mem.Used(), cur.mem.Total))
	t.write(w, "")
	fmt.Fprintf(w, "\nCores (utilisation over the last %s):\n", elapsed.Round(time.Millisecond))
	const perRow = 4
	ct := &table{right: map[int]bool{}}
	for c := 1; c < 2*perRow; c += 2 {
		ct.right[c] = true
	}
	for i := 0; i < len(cores); i += perRow {
		var row []string
		for j := i; j < min(i+perRow, len(cores)); j++ {
			row = append(row, fmt.Sprintf("cpu%d", cur.cpu.Cores[j].ID), pct(cores[j]))
		}
		ct.add(row...)
	}
	ct.write(w, "  ")

	fmt.Fprintf(w, "\nProcesses (%s):\n", v.name)
	if len(cur.procs) == 0 {
		fmt.Fprintf(w, "  none running\n")
		return nil
	}
	before := map[int]sysstat.ProcStat{}
	for _, p := range prev.procs {
		before[p.PID] = p
	}
	pt := &table{right: map[int]bool{0: true, 3: true, 4: true, 5: true, 6: true}}
	pt.add("PID", "NAME", "STATE", "THREADS", "CPU", "RSS", "PEAK RSS")
	for _, p := range cur.procs {
		cpu := "-" // started since the previous report
		if b, ok := before[p.PID]; ok && b.StartTime == p.StartTime {
			cpu = pct(sysstat.CPUPercent(b, p, elapsed))
		}
		pt.add(fmt.Sprint(p.PID), p.Comm, string(p.State), fmt.Sprint(p.Threads), cpu, sysstat.Bytes(p.RSS), sysstat.Bytes(p.PeakRSS))
	}
	pt.write(w, "  ")
	return nil
}

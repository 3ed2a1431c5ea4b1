// Package sysstat reads the host side of what fleet monitors: per-core CPU
// utilisation (/proc/stat), memory (/proc/meminfo), a process's CPU time
// and resident memory (/proc/PID/stat and /proc/PID/status) and the running
// fleet processes, and it runs a [Sampler] that samples a GPU (through
// monitor/nvml) or the CPU and a process in the background during training,
// keeping the latest, mean and peak.
//
// The /proc readers work on Linux only; elsewhere they return an error
// matching [ErrNotSupported]. The parsers are plain functions of the files'
// text and are tested on every OS.
package sysstat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// ErrNotSupported is matched (errors.Is) by the errors of the /proc readers
// on systems other than Linux.
var ErrNotSupported = errors.New("sysstat: CPU, memory and process statistics are read from /proc, on linux only, not " + runtime.GOOS)

// CPUTimes is one "cpu" line of /proc/stat: time spent in each state since
// boot, in clock ticks (USER_HZ, see [ClockTicks]). Guest time is already
// counted in User and Nice, so it is left out.
type CPUTimes struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is all the time counted.
func (t CPUTimes) Total() uint64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// Busy is the time not idle (idle and waiting for I/O count as idle).
func (t CPUTimes) Busy() uint64 { return t.Total() - t.Idle - t.IOWait }

// Utilization is the percentage (0 to 100) of time busy between two
// readings of the same CPU; 0 if no time passed between them.
func Utilization(prev, cur CPUTimes) float64 {
	total := int64(cur.Total() - prev.Total())
	busy := int64(cur.Busy() - prev.Busy())
	if total <= 0 || busy <= 0 {
		return 0
	}
	if busy > total {
		busy = total
	}
	return 100 * float64(busy) / float64(total)
}

// CoreTimes is one core's line, "cpuN".
type CoreTimes struct {
	ID int // N
	CPUTimes
}

// CPUStat is the CPU part of /proc/stat.
type CPUStat struct {
	All   CPUTimes    // the "cpu" line: all cores summed
	Cores []CoreTimes // the "cpuN" lines, in file order (offline cores are absent)
}

// CoreUtilization compares two readings: the utilisation of all cores
// together and of each core of cur (matched to prev by ID; a core missing
// from prev gets 0), in percent.
func CoreUtilization(prev, cur CPUStat) (all float64, cores []float64) {
	all = Utilization(prev.All, cur.All)
	cores = make([]float64, len(cur.Cores))
	for i, c := range cur.Cores {
		p, ok := CPUTimes{}, false
		if i < len(prev.Cores) && prev.Cores[i].ID == c.ID {
			p, ok = prev.Cores[i].CPUTimes, true
		} else {
			for _, q := range prev.Cores {
				if q.ID == c.ID {
					p, ok = q.CPUTimes, true
					break
				}
			}
		}
		if ok {
			cores[i] = Utilization(p, c.CPUTimes)
		}
	}
	return all, cores
}

// parseCPUStat parses /proc/stat's cpu lines into st, reusing st.Cores.
func parseCPUStat(data []byte, st *CPUStat) error {
	st.Cores = st.Cores[:0]
	seenAll := false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if !bytes.HasPrefix(line, []byte("cpu")) {
			if seenAll {
				break // the cpu lines come first, together
			}
			continue
		}
		name, rest := nextField(line)
		var t CPUTimes
		fields := [...]*uint64{&t.User, &t.Nice, &t.System, &t.Idle, &t.IOWait, &t.IRQ, &t.SoftIRQ, &t.Steal}
		n := 0
		for _, f := range fields {
			var tok []byte
			tok, rest = nextField(rest)
			if tok == nil {
				break // older kernels have fewer columns
			}
			v, ok := parseUint(tok)
			if !ok {
				return fmt.Errorf("sysstat: /proc/stat: bad number %q in %q", tok, line)
			}
			*f = v
			n++
		}
		if n < 4 {
			return fmt.Errorf("sysstat: /proc/stat: short line %q", line)
		}
		if len(name) == 3 {
			st.All, seenAll = t, true
			continue
		}
		id, ok := parseUint(name[3:])
		if !ok {
			return fmt.Errorf("sysstat: /proc/stat: bad cpu name %q", name)
		}
		st.Cores = append(st.Cores, CoreTimes{ID: int(id), CPUTimes: t})
	}
	if !seenAll {
		return errors.New("sysstat: /proc/stat has no cpu line")
	}
	return nil
}

// MemInfo is the machine's memory, in bytes, from /proc/meminfo.
type MemInfo struct {
	Total     uint64 // MemTotal
	Available uint64 // MemAvailable: what can be allocated without swapping
}

// Used is Total - Available: what the system counts as in use, the figure
// `free` and `top` show.
func (m MemInfo) Used() uint64 {
	if m.Available > m.Total {
		return 0
	}
	return m.Total - m.Available
}

// parseMemInfo reads MemTotal and MemAvailable (MemFree+Buffers+Cached on
// kernels older than 3.14, which lack MemAvailable).
func parseMemInfo(data []byte) (MemInfo, error) {
	var m MemInfo
	var free, buffers, cached uint64
	haveTotal, haveAvail := false, false
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		key, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		var dst *uint64
		switch string(key) {
		case "MemTotal":
			dst, haveTotal = &m.Total, true
		case "MemAvailable":
			dst, haveAvail = &m.Available, true
		case "MemFree":
			dst = &free
		case "Buffers":
			dst = &buffers
		case "Cached":
			dst = &cached
		default:
			continue
		}
		v, err := kB(rest)
		if err != nil {
			return MemInfo{}, fmt.Errorf("sysstat: /proc/meminfo: %s: %v", key, err)
		}
		*dst = v
	}
	if !haveTotal {
		return MemInfo{}, errors.New("sysstat: /proc/meminfo has no MemTotal")
	}
	if !haveAvail {
		m.Available = free + buffers + cached
	}
	return m, nil
}

// kB parses "   1234 kB" into bytes.
func kB(s []byte) (uint64, error) {
	tok, rest := nextField(s)
	v, ok := parseUint(tok)
	if !ok {
		return 0, fmt.Errorf("bad number %q", tok)
	}
	unit, _ := nextField(rest)
	switch string(unit) {
	case "kB":
		return v * 1024, nil
	case "":
		return v, nil
	}
	return 0, fmt.Errorf("unknown unit %q", unit)
}

// ProcStat is what fleet reads about one process.
type ProcStat struct {
	PID   int
	Comm  string // the command name, as /proc/PID/stat gives it (at most 15 bytes)
	State byte   // R running, S sleeping, D disk wait, Z zombie, ...
	// UTime and STime are the CPU time spent in user and kernel mode, in
	// clock ticks; StartTime is when the process started, in ticks after boot.
	UTime, STime, StartTime uint64
	Threads                 int
	RSS                     uint64 // resident memory now (VmRSS), bytes
	PeakRSS                 uint64 // the most it has been resident (VmHWM), bytes
}

// CPUTime is the CPU time the process has used, user and kernel.
func (p ProcStat) CPUTime() time.Duration { return ticks(p.UTime + p.STime) }

// CPUPercent is the CPU the process used between two readings taken
// elapsed apart, in percent of one core (a process busy on 4 cores gives
// 400).
func CPUPercent(prev, cur ProcStat, elapsed time.Duration) float64 {
	if elapsed <= 0 || cur.UTime+cur.STime < prev.UTime+prev.STime {
		return 0
	}
	return 100 * float64(cur.CPUTime()-prev.CPUTime()) / float64(elapsed)
}

// ticks converts clock ticks to a duration.
func ticks(n uint64) time.Duration {
	hz := uint64(ClockTicks())
	return time.Duration(n/hz)*time.Second + time.Duration(n%hz)*time.Second/time.Duration(hz)
}

// parseProcStat parses /proc/PID/stat. The command name is in parentheses
// and may itself hold spaces and parentheses, so fields are counted from
// the last ')'.
func parseProcStat(data []byte, p *ProcStat) error {
	open := bytes.IndexByte(data, '(')
	end := bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return fmt.Errorf("sysstat: bad /proc/PID/stat %q", truncate(data))
	}
	pid, ok := parseUint(bytes.TrimSpace(data[:open]))
	if !ok {
		return fmt.Errorf("sysstat: bad pid in /proc/PID/stat %q", truncate(data))
	}
	p.PID = int(pid)
	if comm := data[open+1 : end]; p.Comm != string(comm) {
		p.Comm = string(comm)
	}
	rest := data[end+1:]
	// Fields from 3 (state) on; see proc(5).
	for field := 3; field <= 22; field++ {
		var tok []byte
		tok, rest = nextField(rest)
		if tok == nil {
			return fmt.Errorf("sysstat: /proc/PID/stat of %d ends at field %d", pid, field)
		}
		switch field {
		case 3:
			p.State = tok[0]
		case 14, 15, 20, 22:
			v, ok := parseUint(tok)
			if !ok {
				return fmt.Errorf("sysstat: /proc/PID/stat of %d: bad field %d %q", pid, field, tok)
			}
			switch field {
			case 14:
				p.UTime = v
			case 15:
				p.STime = v
			case 20:
				p.Threads = int(v)
			case 22:
				p.StartTime = v
			}
		}
	}
	return nil
}

// parseProcStatus reads VmRSS and VmHWM from /proc/PID/status (kernel
// threads have neither: both stay 0).
func parseProcStatus(data []byte, p *ProcStat) error {
	p.RSS, p.PeakRSS = 0, 0
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		if len(line) < 6 || line[0] != 'V' || line[1] != 'm' {
			continue
		}
		var dst *uint64
		switch string(line[:6]) {
		case "VmRSS:":
			dst = &p.RSS
		case "VmHWM:":
			dst = &p.PeakRSS
		default:
			continue
		}
		v, err := kB(line[6:])
		if err != nil {
			return fmt.Errorf("sysstat: /proc/%d/status: %s %v", p.PID, line[:5], err)
		}
		*dst = v
	}
	return nil
}

// baseName is the last element of a slash-separated path.
func baseName(s []byte) []byte {
	if i := bytes.LastIndexByte(s, '/'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// commLen is the kernel's limit on a command name (TASK_COMM_LEN - 1).
const commLen = 15

// matchesName reports whether a process with command name comm and
// command line cmdline (NUL-separated) is the program name: its comm is
// name (cut to 15 bytes, as the kernel cuts it) or its argv[0]'s base name
// is name.
func matchesName(comm string, cmdline []byte, name string) bool {
	short := name
	if len(short) > commLen {
		short = short[:commLen]
	}
	if comm == short && len(name) <= commLen {
		return true
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	if string(baseName(argv0)) == name {
		return true
	}
	// A long name cut in comm, with a cmdline that cannot be read.
	return len(cmdline) == 0 && comm == short
}

// nextField splits off the first space-separated field of s; nil at the end.
func nextField(s []byte) (field, rest []byte) {
	i := 0
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	if i == len(s) {
		return nil, nil
	}
	j := i
	for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '\n' {
		j++
	}
	return s[i:j], s[j:]
}

// parseUint parses a decimal without allocating.
func parseUint(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (^uint64(0)-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

func truncate(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + "..."
	}
	return string(b)
}

// parseAuxvClockTicks finds AT_CLKTCK in an auxiliary vector of
// (key, value) pairs of native-endian words of wordSize bytes (4 or 8); 0
// if absent.
func parseAuxvClockTicks(auxv []byte, wordSize int) uint64 {
	const atNull, atClkTck = 0, 17
	word := func(b []byte) uint64 {
		if wordSize == 4 {
			return uint64(binary.NativeEndian.Uint32(b))
		}
		return binary.NativeEndian.Uint64(b)
	}
	for len(auxv) >= 2*wordSize {
		k, v := word(auxv), word(auxv[wordSize:])
		auxv = auxv[2*wordSize:]
		if k == atNull {
			break
		}
		if k == atClkTck {
			return v
		}
	}
	return 0
}

func sortByPID(ps []ProcStat) {
	slices.SortFunc(ps, func(a, b ProcStat) int { return a.PID - b.PID })
}

//go:build linux

package sysstat

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"unsafe"
)

// procRoot is where /proc is; tests point it at a fake tree.
var procRoot = "/proc"

var (
	hzOnce sync.Once
	hz     int
)

// ClockTicks is USER_HZ, the unit of the times in /proc/stat and
// /proc/PID/stat: AT_CLKTCK from this process's auxiliary vector, or 100
// (its value on every mainstream Linux) if that cannot be read.
func ClockTicks() int {
	hzOnce.Do(func() {
		hz = 100
		if b, err := os.ReadFile(procRoot + "/self/auxv"); err == nil {
			if v := parseAuxvClockTicks(b, int(unsafe.Sizeof(uintptr(0)))); v > 0 && v < 1e6 {
				hz = int(v)
			}
		}
	})
	return hz
}

// procFile is a /proc file kept open and read again from the start on each
// read, into a buffer kept between reads: reading it allocates nothing once
// the buffer has grown to the file's size.
type procFile struct {
	f   *os.File
	buf []byte
}

func openProcFile(path string) (*procFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &procFile{f: f, buf: make([]byte, 4096)}, nil
}

// read returns the file's whole current text (valid until the next read).
func (p *procFile) read() ([]byte, error) {
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	n := 0
	for {
		if n == len(p.buf) {
			p.buf = append(p.buf, make([]byte, len(p.buf))...)
		}
		m, err := p.f.Read(p.buf[n:])
		n += m
		if err == io.EOF || (err == nil && m == 0) {
			return p.buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *procFile) close() error { return p.f.Close() }

// ReadCPUStat reads /proc/stat's CPU lines.
func ReadCPUStat() (CPUStat, error) {
	var st CPUStat
	b, err := os.ReadFile(procRoot + "/stat")
	if err != nil {
		return st, fmt.Errorf("sysstat: %w", err)
	}
	err = parseCPUStat(b, &st)
	return st, err
}

// ReadMemInfo reads /proc/meminfo.
func ReadMemInfo() (MemInfo, error) {
	b, err := os.ReadFile(procRoot + "/meminfo")
	if err != nil {
		return MemInfo{}, fmt.Errorf("sysstat: %w", err)
	}
	return parseMemInfo(b)
}

// ErrNoProcess is matched (errors.Is) when the process asked about does
// not exist (or has just exited).
var ErrNoProcess = errors.New("no such process")

// ReadProc reads process pid's /proc/PID/stat and /proc/PID/status; pid 0
// is this process.
func ReadProc(pid int) (ProcStat, error) {
	dir := procDir(pid)
	var p ProcStat
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return p, procErr(pid, err)
	}
	if err := parseProcStat(b, &p); err != nil {
		return p, err
	}
	b, err = os.ReadFile(dir + "/status")
	if err != nil {
		return p, procErr(pid, err)
	}
	return p, parseProcStatus(b, &p)
}

func procDir(pid int) string {
	if pid == 0 {
		return procRoot + "/self"
	}
	return procRoot + "/" + strconv.Itoa(pid)
}

func procErr(pid int, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("sysstat: process %d: %w", pid, ErrNoProcess)
	}
	return fmt.Errorf("sysstat: %w", err)
}

// ProcName is the command name of process pid (/proc/PID/comm), or "" if it
// cannot be read: it has exited, or it lives outside this PID namespace (a
// GPU process NVML reports by its host PID, seen from a container).
func ProcName(pid int) string {
	if pid <= 0 {
		return ""
	}
	b, err := os.ReadFile(procDir(pid) + "/comm")
	if err != nil {
		return ""
	}
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
	}
	return string(b)
}

// FindProcesses lists the running processes whose program is name: their
// command name (/proc/PID/comm) is name, or the base name of their argv[0]
// is. The list is in PID order; processes that exit while it is read are
// left out.
func FindProcesses(name string) ([]ProcStat, error) {
	d, err := os.Open(procRoot)
	if err != nil {
		return nil, fmt.Errorf("sysstat: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil, fmt.Errorf("sysstat: %w", err)
	}
	var out []ProcStat
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid <= 0 {
			continue
		}
		comm := ProcName(pid)
		if comm == "" {
			continue
		}
		cmdline, _ := os.ReadFile(procDir(pid) + "/cmdline")
		if !matchesName(comm, cmdline, name) {
			continue
		}
		p, err := ReadProc(pid)
		if err != nil {
			continue // exited meanwhile
		}
		out = append(out, p)
	}
	sortByPID(out)
	return out, nil
}

// NumCPU is the number of cores /proc/stat lists (online cores), or 0.
func NumCPU() int {
	st, err := ReadCPUStat()
	if err != nil {
		return 0
	}
	return len(st.Cores)
}

// cpuReader reads the machine's CPU and memory and one process's figures
// from files kept open: the Sampler's CPU source.
type cpuReader struct {
	stat, meminfo, pstat, pstatus *procFile
	cpu                           CPUStat
	proc                          ProcStat
}

func newCPUReader(pid int) (*cpuReader, error) {
	r := &cpuReader{}
	dir := procDir(pid)
	for _, f := range []struct {
		dst  **procFile
		path string
	}{
		{&r.stat, procRoot + "/stat"},
		{&r.meminfo, procRoot + "/meminfo"},
		{&r.pstat, dir + "/stat"},
		{&r.pstatus, dir + "/status"},
	} {
		pf, err := openProcFile(f.path)
		if err != nil {
			r.close()
			if f.dst == &r.pstat || f.dst == &r.pstatus {
				return nil, procErr(pid, err)
			}
			return nil, fmt.Errorf("sysstat: %w", err)
		}
		*f.dst = pf
	}
	return r, nil
}

// read refreshes r.cpu and r.proc and returns the machine's memory.
func (r *cpuReader) read() (MemInfo, error) {
	b, err := r.stat.read()
	if err == nil {
		err = parseCPUStat(b, &r.cpu)
	}
	if err != nil {
		return MemInfo{}, err
	}
	b, err = r.pstat.read()
	if err == nil {
		err = parseProcStat(b, &r.proc)
	}
	if err != nil {
		return MemInfo{}, err
	}
	b, err = r.pstatus.read()
	if err == nil {
		err = parseProcStatus(b, &r.proc)
	}
	if err != nil {
		return MemInfo{}, err
	}
	b, err = r.meminfo.read()
	if err != nil {
		return MemInfo{}, err
	}
	return parseMemInfo(b)
}

func (r *cpuReader) close() error {
	for _, f := range []*procFile{r.stat, r.meminfo, r.pstat, r.pstatus} {
		if f != nil {
			f.close()
		}
	}
	return nil
}

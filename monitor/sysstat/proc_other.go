//go:build !linux

package sysstat

import "errors"

// ErrNoProcess is matched (errors.Is) when the process asked about does
// not exist.
var ErrNoProcess = errors.New("no such process")

// ClockTicks is USER_HZ on Linux; 100 here, where nothing uses it.
func ClockTicks() int { return 100 }

// ReadCPUStat needs Linux's /proc/stat.
func ReadCPUStat() (CPUStat, error) { return CPUStat{}, ErrNotSupported }

// ReadMemInfo needs Linux's /proc/meminfo.
func ReadMemInfo() (MemInfo, error) { return MemInfo{}, ErrNotSupported }

// ReadProc needs Linux's /proc/PID.
func ReadProc(pid int) (ProcStat, error) { return ProcStat{}, ErrNotSupported }

// ProcName needs Linux's /proc/PID/comm; it returns "".
func ProcName(pid int) string { return "" }

// FindProcesses needs Linux's /proc.
func FindProcesses(name string) ([]ProcStat, error) { return nil, ErrNotSupported }

// NumCPU needs Linux's /proc/stat; it returns 0.
func NumCPU() int { return 0 }

type cpuReader struct {
	cpu  CPUStat
	proc ProcStat
}

func newCPUReader(pid int) (*cpuReader, error) { return nil, ErrNotSupported }

func (r *cpuReader) read() (MemInfo, error) { return MemInfo{}, ErrNotSupported }

func (r *cpuReader) close() error { return nil }

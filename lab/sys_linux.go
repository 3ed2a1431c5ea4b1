package lab

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cacheSizes reads the CPU's level-2 and last-level data cache sizes, in
// bytes, from sysfs (0 where unknown).
func cacheSizes() (l2, llc int64) {
	const dir = "/sys/devices/system/cpu/cpu0/cache/"
	best := 0
	for i := 0; i < 8; i++ {
		idx := dir + "index" + strconv.Itoa(i) + "/"
		lv, err1 := os.ReadFile(idx + "level")
		ty, err2 := os.ReadFile(idx + "type")
		sz, err3 := os.ReadFile(idx + "size")
		if err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		if t := strings.TrimSpace(string(ty)); t != "Data" && t != "Unified" {
			continue
		}
		level, err := strconv.Atoi(strings.TrimSpace(string(lv)))
		if err != nil {
			continue
		}
		size := parseSize(strings.TrimSpace(string(sz)))
		if level == 2 {
			l2 = size
		}
		if level > best && size > 0 {
			best, llc = level, size
		}
	}
	if best < 3 {
		llc = 0 // no cache beyond L2
	}
	return l2, llc
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

// loadAvg is the machine's one-minute load average (-1 where unknown).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, err := strconv.ParseFloat(f, 64)
	if err != nil {
		return -1
	}
	return v
}

package lab

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuModel is the CPU's model name from /proc/cpuinfo.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "cpu"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "cpu"
}

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

// parseSize reads sysfs sizes such as "48K" or "260M".
func parseSize(s string) int64 {
	mul := int64(1)
	switch {
	case strings.HasSuffix(s, "K"):
		mul, s = 1<<10, s[:len(s)-1]
	case strings.HasSuffix(s, "M"):
		mul, s = 1<<20, s[:len(s)-1]
	case strings.HasSuffix(s, "G"):
		mul, s = 1<<30, s[:len(s)-1]
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0
	}
	return n * mul
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

//go:build !linux

package cpu

// physicalMemory is unknown off Linux.
func physicalMemory() int64 { return 0 }

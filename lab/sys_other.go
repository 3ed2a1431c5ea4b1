//go:build !linux

package lab

import "time"

func cacheSizes() (l2, llc int64) { return 0, 0 }

func cpuTime() (time.Duration, bool) { return 0, false }

func loadAvg() float64 { return -1 }

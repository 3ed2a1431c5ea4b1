//go:build !amd64

package cpu

func fmaWidth() int { return 1 }

func fmaLoop(n int) { fmaLoopGo(n) }

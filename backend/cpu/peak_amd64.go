package cpu

import "golang.org/x/sys/cpu"

func fmaWidth() int {
	switch {
	case cpu.X86.HasAVX512F:
		return 16
	case cpu.X86.HasAVX2 && cpu.X86.HasFMA:
		return 8
	}
	return 1
}

func fmaLoop(n int) {
	switch fmaWidth() {
	case 16:
		fmaLoopAVX512(n)
	case 8:
		fmaLoopAVX2(n)
	default:
		fmaLoopGo(n)
	}
}

//go:noescape
func fmaLoopAVX512(n int)

//go:noescape
func fmaLoopAVX2(n int)

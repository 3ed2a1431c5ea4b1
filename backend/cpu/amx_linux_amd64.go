package cpu

import (
	"fmt"
	"syscall"
)

// Linux's arch_prctl code that asks for an extended state component that
// needs the process's permission (arch/x86/include/uapi/asm/prctl.h), and
// AMX's tile data component (XFEATURE_XTILEDATA).
const (
	archReqXcompPerm  = 0x1023
	xfeatureXtiledata = 18
)

// amxPermission asks Linux to let this process use the AMX tiles: without
// it the first tile instruction raises SIGILL. The permission is the
// process's, for all its threads. Kernels before 5.16 do not know the
// request and refuse it.
func amxPermission() error {
	if _, _, errno := syscall.RawSyscall(syscall.SYS_ARCH_PRCTL, archReqXcompPerm, xfeatureXtiledata, 0); errno != 0 {
		return fmt.Errorf("the kernel refused permission for the tiles: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): %v", errno)
	}
	return nil
}

package cpu

import (
	"fmt"
	"sync"

	"golang.org/x/sys/cpu"
)

func init() {
	amxProduct.unavailable = amxUnavailable
}

var (
	amxOnce sync.Once
	amxWhy  string
)

// amxUnavailable says why this process cannot run the AMX kernel, or ""
// where it can: the CPU must have AMX-TILE and AMX-BF16 (CPUID leaf 7, EDX
// bits 24 and 22), the OS must enable the tile state in XCR0 (bits 17,
// TILECFG, and 18, TILEDATA), and Linux must grant this process the tile
// data state (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without
// it the first tile instruction kills the process). The first call asks,
// once; once granted, the kernel's tile configuration is loaded by each
// call on the thread that runs it (amx.go), and amxKernel becomes the
// assembly.
func amxUnavailable() string {
	amxOnce.Do(func() {
		switch {
		case !cpu.X86.HasAMXTile || !cpu.X86.HasAMXBF16:
			amxWhy = "no AMX on this CPU (CPUID leaf 7 EDX: AMX-TILE, AMX-BF16)"
			return
		case !cpu.X86.HasOSXSAVE:
			amxWhy = "the OS does not enable XSAVE, which AMX's state needs"
			return
		}
		if xcr0, _ := xgetbv0(); xcr0&(1<<17) == 0 || xcr0&(1<<18) == 0 {
			amxWhy = fmt.Sprintf("the OS does not enable the tile state (XCR0 = %#x: bits 17 and 18)", xcr0)
			return
		}
		if err := amxPermission(); err != nil {
			amxWhy = err.Error()
			return
		}
		amxKernel = amxKernelAsm
	})
	return amxWhy
}

// amxKernelAsm is amxKernel in assembly (amx_amd64.s, written by
// scripts/gen_cpu_asm.py), with its bounds checked here.
func amxKernelAsm(kb int, a []uint32, lda int, b []uint32, bstrip int, c []float32, ldc, nblk int, add bool) {
	if kb == 0 || nblk == 0 {
		amxKernelGo(kb, a, lda, b, bstrip, c, ldc, nblk, add)
		return
	}
	_, _ = a[(amxMR-1)*lda+kb*amxKP-1], b[(nblk-1)*bstrip+kb*amxKP*amxNR-1]
	_ = c[(amxMR-1)*ldc+nblk*amxNR-1]
	amxKernelAMX(kb, &a[0], 4*lda, &b[0], 4*bstrip, &c[0], 4*ldc, nblk, add)
}

// xgetbv0 returns XCR0 (amx_amd64.s).
func xgetbv0() (eax, edx uint32)

// amxKernelAMX is the tile kernel (amx_amd64.s); strides in bytes.
//
//go:noescape
func amxKernelAMX(kb int, a *uint32, lda int, b *uint32, bstrip int, c *float32, ldc, nblk int, add bool)

#include "textflag.h"

// func cpuVendorAMD() bool
// CPUID leaf 0 returns the vendor string in EBX, EDX, ECX; AuthenticAMD
// starts with "Auth" in EBX and ends with "cAMD" in ECX.
TEXT ·cpuVendorAMD(SB), NOSPLIT, $0-1
	XORL  AX, AX
	XORL  CX, CX
	CPUID
	CMPL  BX, $0x68747541
	JNE   no
	CMPL  CX, $0x444d4163
	JNE   no
	MOVB  $1, ret+0(FP)
	RET

no:
	MOVB $0, ret+0(FP)
	RET

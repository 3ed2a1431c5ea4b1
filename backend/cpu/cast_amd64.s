#include "textflag.h"

// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
// Per 16 floats b: r = (b + 0x7fff + (b>>16 & 1)) >> 16, or (b>>16) | 0x40
// where b is a NaN; the low halves of r are stored (VPMOVDW).
TEXT ·f32ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	MOVL $1, AX
	VPBROADCASTD AX, Z31
	MOVL $0x7fff, AX
	VPBROADCASTD AX, Z30
	MOVL $0x7fffffff, AX
	VPBROADCASTD AX, Z29
	MOVL $0x7f800000, AX
	VPBROADCASTD AX, Z28
	MOVL $0x40, AX
	VPBROADCASTD AX, Z27

loop:
	VMOVDQU32 (SI), Z0
	VPSRLD    $16, Z0, Z1
	VPANDD    Z31, Z1, Z2
	VPADDD    Z30, Z0, Z3
	VPADDD    Z2, Z3, Z3
	VPSRLD    $16, Z3, Z3
	VPANDD    Z29, Z0, Z4
	VPCMPUD   $6, Z28, Z4, K1
	VPORD     Z27, Z1, K1, Z3
	VPMOVDW   Z3, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
	RET

// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
TEXT ·bf16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX

wloop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       wloop
	VZEROUPPER
	RET

#include "textflag.h"

// func interleaveRows32AVX512(dst *uint32, b *uint16, ld int, pairs int)
// For each pair k: dst[k*32 + c] = b[2k*ld + c] | b[(2k+1)*ld + c]<<16,
// c < 32: both rows zero-extended to dwords, the odd one shifted up.
TEXT ·interleaveRows32AVX512(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ld+16(FP), BX
	SHLQ $1, BX
	MOVQ pairs+24(FP), CX

loop:
	VPMOVZXWD (SI), Z0
	VPMOVZXWD 32(SI), Z1
	VPMOVZXWD (SI)(BX*1), Z2
	VPMOVZXWD 32(SI)(BX*1), Z3
	VPSLLD    $16, Z2, Z2
	VPSLLD    $16, Z3, Z3
	VPORD     Z2, Z0, Z0
	VPORD     Z3, Z1, Z1
	VMOVDQU32 Z0, (DI)
	VMOVDQU32 Z1, 64(DI)
	LEAQ      (SI)(BX*2), SI
	ADDQ      $128, DI
	DECQ      CX
	JNZ       loop
	VZEROUPPER
	RET

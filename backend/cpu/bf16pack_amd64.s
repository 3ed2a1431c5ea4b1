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

// func interleaveRows8AVX2(dst *uint32, b *uint16, ld int, pairs int)
// interleaveRows32AVX512 for 8-value rows (a transposed A strip).
TEXT ·interleaveRows8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ b+8(FP), SI
	MOVQ ld+16(FP), BX
	SHLQ $1, BX
	MOVQ pairs+24(FP), CX

loop8:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD (SI)(BX*1), Y1
	VPSLLD    $16, Y1, Y1
	VPOR      Y1, Y0, Y0
	VMOVDQU   Y0, (DI)
	LEAQ      (SI)(BX*2), SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       loop8
	VZEROUPPER
	RET

// func transposePairs8AVX2(dst *uint32, dstK int, src *uint16, ld int, blocks int)
// Reads 8 rows of bf16 (row r at src + r*ld) as pairs, 8 pairs a block,
// and writes them transposed: dst[(8*blk + k)*dstK + r] = pair k of block
// blk of row r. Each block is an 8×8 dword transpose in YMM registers
// (unpack dwords, unpack qwords, swap 128-bit halves).
TEXT ·transposePairs8AVX2(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ dstK+8(FP), DX
	SHLQ $2, DX
	MOVQ src+16(FP), SI
	MOVQ ld+24(FP), BX
	SHLQ $1, BX
	MOVQ blocks+32(FP), CX
	LEAQ (BX)(BX*2), R10
	LEAQ (SI)(BX*4), R9
	LEAQ (DX)(DX*2), R11

tloop:
	VMOVDQU (SI), Y0
	VMOVDQU (SI)(BX*1), Y1
	VMOVDQU (SI)(BX*2), Y2
	VMOVDQU (SI)(R10*1), Y3
	VMOVDQU (R9), Y4
	VMOVDQU (R9)(BX*1), Y5
	VMOVDQU (R9)(BX*2), Y6
	VMOVDQU (R9)(R10*1), Y7
	VPUNPCKLDQ  Y1, Y0, Y8
	VPUNPCKHDQ  Y1, Y0, Y9
	VPUNPCKLDQ  Y3, Y2, Y10
	VPUNPCKHDQ  Y3, Y2, Y11
	VPUNPCKLDQ  Y5, Y4, Y12
	VPUNPCKHDQ  Y5, Y4, Y13
	VPUNPCKLDQ  Y7, Y6, Y14
	VPUNPCKHDQ  Y7, Y6, Y15
	VPUNPCKLQDQ Y10, Y8, Y0
	VPUNPCKHQDQ Y10, Y8, Y1
	VPUNPCKLQDQ Y11, Y9, Y2
	VPUNPCKHQDQ Y11, Y9, Y3
	VPUNPCKLQDQ Y14, Y12, Y4
	VPUNPCKHQDQ Y14, Y12, Y5
	VPUNPCKLQDQ Y15, Y13, Y6
	VPUNPCKHQDQ Y15, Y13, Y7
	LEAQ        (DI)(DX*4), R12
	VPERM2I128  $0x20, Y4, Y0, Y8
	VPERM2I128  $0x31, Y4, Y0, Y12
	VPERM2I128  $0x20, Y5, Y1, Y9
	VPERM2I128  $0x31, Y5, Y1, Y13
	VPERM2I128  $0x20, Y6, Y2, Y10
	VPERM2I128  $0x31, Y6, Y2, Y14
	VPERM2I128  $0x20, Y7, Y3, Y11
	VPERM2I128  $0x31, Y7, Y3, Y15
	VMOVDQU     Y8, (DI)
	VMOVDQU     Y9, (DI)(DX*1)
	VMOVDQU     Y10, (DI)(DX*2)
	VMOVDQU     Y11, (DI)(R11*1)
	VMOVDQU     Y12, (R12)
	VMOVDQU     Y13, (R12)(DX*1)
	VMOVDQU     Y14, (R12)(DX*2)
	VMOVDQU     Y15, (R12)(R11*1)
	LEAQ        (DI)(DX*8), DI
	ADDQ        $32, SI
	ADDQ        $32, R9
	DECQ        CX
	JNZ         tloop
	VZEROUPPER
	RET

// func dpbf16LoopAVX512(n int)
// 12 independent VDPBF16PS chains, n iterations: the issue rate of the
// BF16 dot product, to set against fmaLoopAVX512's.
TEXT ·dpbf16LoopAVX512(SB), NOSPLIT, $0-8
	MOVQ n+0(FP), CX
	VPXORD Z0, Z0, Z0
	VPXORD Z1, Z1, Z1
	VPXORD Z2, Z2, Z2
	VPXORD Z3, Z3, Z3
	VPXORD Z4, Z4, Z4
	VPXORD Z5, Z5, Z5
	VPXORD Z6, Z6, Z6
	VPXORD Z7, Z7, Z7
	VPXORD Z8, Z8, Z8
	VPXORD Z9, Z9, Z9
	VPXORD Z10, Z10, Z10
	VPXORD Z11, Z11, Z11
	VPXORD Z12, Z12, Z12
	VPXORD Z13, Z13, Z13

dploop:
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc5 // VDPBF16PS Z13, Z12, Z0
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z13, Z12, Z1
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xd5 // VDPBF16PS Z13, Z12, Z2
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xdd // VDPBF16PS Z13, Z12, Z3
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xe5 // VDPBF16PS Z13, Z12, Z4
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xed // VDPBF16PS Z13, Z12, Z5
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xf5 // VDPBF16PS Z13, Z12, Z6
	BYTE $0x62; BYTE $0xd2; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xfd // VDPBF16PS Z13, Z12, Z7
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xc5 // VDPBF16PS Z13, Z12, Z8
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xcd // VDPBF16PS Z13, Z12, Z9
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xd5 // VDPBF16PS Z13, Z12, Z10
	BYTE $0x62; BYTE $0x52; BYTE $0x1e; BYTE $0x48; BYTE $0x52; BYTE $0xdd // VDPBF16PS Z13, Z12, Z11
	DECQ CX
	JNZ  dploop
	VZEROUPPER
	RET

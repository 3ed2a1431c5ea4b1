#include "textflag.h"

// func transpose8x8AVX2(dst *float32, ldd int, src *float32, lds int)
// dst[i*ldd + j] = src[j*lds + i] for i, j < 8; strides in floats. Eight
// rows are loaded, transposed in registers (unpack, shuffle, lane
// permute) and stored as eight rows: a transposed B panel packed for the
// GEMM without a scalar store per element.
TEXT ·transpose8x8AVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ ldd+8(FP), R8
	MOVQ src+16(FP), SI
	MOVQ lds+24(FP), R9
	SHLQ $2, R8
	SHLQ $2, R9
	VMOVUPS (SI), Y0
	ADDQ    R9, SI
	VMOVUPS (SI), Y1
	ADDQ    R9, SI
	VMOVUPS (SI), Y2
	ADDQ    R9, SI
	VMOVUPS (SI), Y3
	ADDQ    R9, SI
	VMOVUPS (SI), Y4
	ADDQ    R9, SI
	VMOVUPS (SI), Y5
	ADDQ    R9, SI
	VMOVUPS (SI), Y6
	ADDQ    R9, SI
	VMOVUPS (SI), Y7
	VUNPCKLPS Y1, Y0, Y8
	VUNPCKHPS Y1, Y0, Y9
	VUNPCKLPS Y3, Y2, Y10
	VUNPCKHPS Y3, Y2, Y11
	VUNPCKLPS Y5, Y4, Y12
	VUNPCKHPS Y5, Y4, Y13
	VUNPCKLPS Y7, Y6, Y14
	VUNPCKHPS Y7, Y6, Y15
	VSHUFPS $0x44, Y10, Y8, Y0
	VSHUFPS $0xEE, Y10, Y8, Y1
	VSHUFPS $0x44, Y11, Y9, Y2
	VSHUFPS $0xEE, Y11, Y9, Y3
	VSHUFPS $0x44, Y14, Y12, Y4
	VSHUFPS $0xEE, Y14, Y12, Y5
	VSHUFPS $0x44, Y15, Y13, Y6
	VSHUFPS $0xEE, Y15, Y13, Y7
	VPERM2F128 $0x20, Y4, Y0, Y8
	VPERM2F128 $0x20, Y5, Y1, Y9
	VPERM2F128 $0x20, Y6, Y2, Y10
	VPERM2F128 $0x20, Y7, Y3, Y11
	VPERM2F128 $0x31, Y4, Y0, Y12
	VPERM2F128 $0x31, Y5, Y1, Y13
	VPERM2F128 $0x31, Y6, Y2, Y14
	VPERM2F128 $0x31, Y7, Y3, Y15
	VMOVUPS Y8, (DI)
	ADDQ    R8, DI
	VMOVUPS Y9, (DI)
	ADDQ    R8, DI
	VMOVUPS Y10, (DI)
	ADDQ    R8, DI
	VMOVUPS Y11, (DI)
	ADDQ    R8, DI
	VMOVUPS Y12, (DI)
	ADDQ    R8, DI
	VMOVUPS Y13, (DI)
	ADDQ    R8, DI
	VMOVUPS Y14, (DI)
	ADDQ    R8, DI
	VMOVUPS Y15, (DI)
	VZEROUPPER
	RET

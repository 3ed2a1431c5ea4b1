#include "textflag.h"

// func adamwAVX2(w, grad, m, v *float32, n int, k *adamConsts)
// k: b1, c1, b2, c2, invBC2Sqrt, eps, decay, stepSize (float32 each).
// The same operations, in the same order, as adamwGo, so both give
// identical results (no fused multiply-adds here).
TEXT ·adamwAVX2(SB), NOSPLIT, $0-48
	MOVQ w+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), BX
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), AX
	VBROADCASTSS 0(AX), Y8
	VBROADCASTSS 4(AX), Y9
	VBROADCASTSS 8(AX), Y10
	VBROADCASTSS 12(AX), Y11
	VBROADCASTSS 16(AX), Y12
	VBROADCASTSS 20(AX), Y13
	VBROADCASTSS 24(AX), Y14
	VBROADCASTSS 28(AX), Y15
	SHRQ $3, CX
	JZ   adamdone
adamloop:
	VMOVUPS (SI), Y0
	VMULPS  (DX), Y8, Y1
	VMULPS  Y0, Y9, Y2
	VADDPS  Y2, Y1, Y1
	VMOVUPS Y1, (DX)
	VMULPS  (BX), Y10, Y3
	VMULPS  Y0, Y11, Y4
	VMULPS  Y0, Y4, Y4
	VADDPS  Y4, Y3, Y3
	VMOVUPS Y3, (BX)
	VSQRTPS Y3, Y3
	VMULPS  Y12, Y3, Y3
	VADDPS  Y13, Y3, Y3
	VDIVPS  Y3, Y1, Y1
	VMULPS  Y15, Y1, Y1
	VMULPS  (DI), Y14, Y5
	VSUBPS  Y1, Y5, Y5
	VMOVUPS Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  adamloop
adamdone:
	VZEROUPPER
	RET

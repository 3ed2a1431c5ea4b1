#include "textflag.h"

// LayerNorm row kernels for AVX2 + FMA, eight floats per iteration; n must
// be a multiple of 8 (callers finish ragged rows in Go). Reductions keep
// eight lanes and add them in a fixed order at the end.

// HSUM leaves the sum of the eight lanes of Y in the low lane of X (X is
// the low half of Y), using T as scratch.
#define HSUM(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS T, X, X \
	VHADDPS X, X, X \
	VHADDPS X, X, X

// func lnSumAVX2(x *float32, n int) float32
TEXT ·lnSumAVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
	JZ   sumdone
sumloop:
	VADDPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ  sumloop
sumdone:
	HSUM(Y0, X0, X1)
	MOVSS X0, ret+16(FP)
	VZEROUPPER
	RET

// func lnSqDevAVX2(x *float32, n int, m float32) float32
// Σ (x - m)².
TEXT ·lnSqDevAVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSS m+16(FP), Y2
	VXORPS Y0, Y0, Y0
	SHRQ $3, CX
	JZ   sqdone
sqloop:
	VMOVUPS (SI), Y1
	VSUBPS Y2, Y1, Y1
	VFMADD231PS Y1, Y1, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ  sqloop
sqdone:
	HSUM(Y0, X0, X1)
	MOVSS X0, ret+24(FP)
	VZEROUPPER
	RET

// func lnApplyAVX2(out, x, w, b *float32, n int, m, rsd float32)
// out = (x - m) * rsd * w (+ b when b is not nil).
TEXT ·lnApplyAVX2(SB), NOSPLIT, $0-48
	MOVQ out+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ w+16(FP), DX
	MOVQ b+24(FP), BX
	MOVQ n+32(FP), CX
	VBROADCASTSS m+40(FP), Y2
	VBROADCASTSS rsd+44(FP), Y3
	SHRQ $3, CX
	JZ   applydone
	TESTQ BX, BX
	JZ   applynobias
applyloop:
	VMOVUPS (SI), Y0
	VSUBPS Y2, Y0, Y0
	VMULPS Y3, Y0, Y0
	VMULPS (DX), Y0, Y0
	VADDPS (BX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  applyloop
	JMP  applydone
applynobias:
	VMOVUPS (SI), Y0
	VSUBPS Y2, Y0, Y0
	VMULPS Y3, Y0, Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ  applynobias
applydone:
	VZEROUPPER
	RET

// func lnBackRowAVX2(dx, x, dy, w, pw, pb *float32, n int, m, rsd, invN float32)
// Pass 1: xhat = (x-m)·rsd, gw = g·w; s1 = Σgw, s2 = Σgw·xhat; pw += g·xhat, pb += g.
// Pass 2: dx = rsd·(gw − s1/n − xhat·s2/n).
TEXT ·lnBackRowAVX2(SB), NOSPLIT, $0-68
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ w+24(FP), BX
	MOVQ pw+32(FP), R8
	MOVQ pb+40(FP), R9
	MOVQ n+48(FP), CX
	VBROADCASTSS m+56(FP), Y6
	VBROADCASTSS rsd+60(FP), Y7
	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	SHRQ $3, CX
	JZ   backdone
	MOVQ CX, R10
pass1:
	VMOVUPS (SI), Y2
	VSUBPS Y6, Y2, Y2
	VMULPS Y7, Y2, Y2
	VMOVUPS (DX), Y3
	VMULPS (BX), Y3, Y4
	VADDPS Y4, Y0, Y0
	VFMADD231PS Y4, Y2, Y1
	VMOVUPS (R8), Y5
	VFMADD231PS Y3, Y2, Y5
	VMOVUPS Y5, (R8)
	VADDPS (R9), Y3, Y5
	VMOVUPS Y5, (R9)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, R8
	ADDQ $32, R9
	DECQ CX
	JNZ  pass1
	HSUM(Y0, X0, X8)
	HSUM(Y1, X1, X8)
	VBROADCASTSS invN+64(FP), Y8
	VMULPS X8, X0, X0
	VMULPS X8, X1, X1
	VBROADCASTSS X0, Y0
	VBROADCASTSS X1, Y1
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ w+24(FP), BX
pass2:
	VMOVUPS (SI), Y2
	VSUBPS Y6, Y2, Y2
	VMULPS Y7, Y2, Y2
	VMOVUPS (DX), Y3
	VMULPS (BX), Y3, Y4
	VSUBPS Y0, Y4, Y4
	VFNMADD231PS Y1, Y2, Y4
	VMULPS Y7, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ R10
	JNZ  pass2
backdone:
	VZEROUPPER
	RET

#include "textflag.h"

// Row kernels of the Llama-style blocks for AVX2 + FMA, eight floats per
// iteration; n and half must be multiples of 8 (llama_amd64.go falls back
// to the portable rows otherwise). RMSNorm's forward reuses LayerNorm's
// lnSqDevAVX2 and lnApplyAVX2 with a zero mean.

// HSUM leaves the sum of the eight lanes of Y in the low lane of X (X is
// the low half of Y), using T as scratch.
#define HSUM(Y, X, T) \
	VEXTRACTF128 $1, Y, T \
	VADDPS T, X, X \
	VHADDPS X, X, X \
	VHADDPS X, X, X

// func rmsBackRowAVX2(dx, x, dy, w, pw *float32, n int, rsd, invN float32)
// Pass 1: x̂ = x·rsd, gw = g·w; s = Σ gw·x̂; pw += g·x̂.
// Pass 2: dx = rsd·(gw − x̂·s/n).
TEXT ·rmsBackRowAVX2(SB), NOSPLIT, $0-56
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ w+24(FP), BX
	MOVQ pw+32(FP), R8
	MOVQ n+40(FP), CX
	VBROADCASTSS rsd+48(FP), Y7
	VXORPS Y1, Y1, Y1
	SHRQ $3, CX
	JZ   rbackdone
	MOVQ CX, R10
rpass1:
	VMULPS (SI), Y7, Y2
	VMOVUPS (DX), Y3
	VMULPS (BX), Y3, Y4
	VFMADD231PS Y4, Y2, Y1
	VMOVUPS (R8), Y5
	VFMADD231PS Y3, Y2, Y5
	VMOVUPS Y5, (R8)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, R8
	DECQ CX
	JNZ  rpass1
	HSUM(Y1, X1, X8)
	VBROADCASTSS invN+52(FP), Y8
	VMULPS X8, X1, X1
	VBROADCASTSS X1, Y1
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ w+24(FP), BX
rpass2:
	VMULPS (SI), Y7, Y2
	VMOVUPS (DX), Y3
	VMULPS (BX), Y3, Y4
	VFNMADD231PS Y1, Y2, Y4
	VMULPS Y7, Y4, Y4
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ R10
	JNZ  rpass2
rbackdone:
	VZEROUPPER
	RET

// func rotateAVX2(o, x, cos, sin *float32, half int, sign float32)
// For j < half: a = x[j], b = x[j+half], s = sign·sin[j];
// o[j] = a·cos[j] − b·s, o[j+half] = b·cos[j] + a·s. o may be x: each
// block of eight pairs is read whole before it is written.
TEXT ·rotateAVX2(SB), NOSPLIT, $0-44
	MOVQ o+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ cos+16(FP), DX
	MOVQ sin+24(FP), BX
	MOVQ half+32(FP), CX
	VBROADCASTSS sign+40(FP), Y7
	MOVQ CX, AX
	SHLQ $2, AX // half in bytes: the offset of the second halves
	SHRQ $3, CX
	JZ   rotdone
rotloop:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(AX*1), Y1
	VMOVUPS (DX), Y2
	VMULPS (BX), Y7, Y3
	VMULPS Y2, Y0, Y4
	VFNMADD231PS Y3, Y1, Y4
	VMULPS Y2, Y1, Y5
	VFMADD231PS Y3, Y0, Y5
	VMOVUPS Y4, (DI)
	VMOVUPS Y5, (DI)(AX*1)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, BX
	ADDQ $32, DI
	DECQ CX
	JNZ  rotloop
rotdone:
	VZEROUPPER
	RET

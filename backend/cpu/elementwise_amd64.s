#include "textflag.h"

// Elementwise kernels for AVX2, 16 floats per iteration; n must be a
// multiple of 16 (callers finish the tail in Go). They do exactly the
// operations of the Go loops (a multiply and an add, never a fused
// multiply-add), so results match the portable code bit for bit.

// func binaryAVX2(op int, d, x, y *float32, n int)
// op: 0 add, 1 sub, 2 mul, 3 div.
TEXT ·binaryAVX2(SB), NOSPLIT, $0-40
	MOVQ op+0(FP), AX
	MOVQ d+8(FP), DI
	MOVQ x+16(FP), SI
	MOVQ y+24(FP), DX
	MOVQ n+32(FP), CX
	SHRQ $4, CX
	JZ   bdone
	CMPQ AX, $1
	JEQ  bsub
	CMPQ AX, $2
	JEQ  bmul
	CMPQ AX, $3
	JEQ  bdiv
badd:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VADDPS  (DX), Y0, Y0
	VADDPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  badd
	JMP  bdone
bsub:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VSUBPS  (DX), Y0, Y0
	VSUBPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  bsub
	JMP  bdone
bmul:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMULPS  (DX), Y0, Y0
	VMULPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  bmul
	JMP  bdone
bdiv:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VDIVPS  (DX), Y0, Y0
	VDIVPS  32(DX), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	DECQ CX
	JNZ  bdiv
bdone:
	VZEROUPPER
	RET

// func axpyAVX2(d, s *float32, n int, alpha float32)
// d += alpha * s.
TEXT ·axpyAVX2(SB), NOSPLIT, $0-28
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS alpha+24(FP), Y2
	SHRQ $4, CX
	JZ   adone
aloop:
	VMULPS  (SI), Y2, Y0
	VMULPS  32(SI), Y2, Y1
	VADDPS  (DI), Y0, Y0
	VADDPS  32(DI), Y1, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  aloop
adone:
	VZEROUPPER
	RET

// func scaleAVX2(d, s *float32, n int, alpha float32)
// d = alpha * s.
TEXT ·scaleAVX2(SB), NOSPLIT, $0-28
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS alpha+24(FP), Y2
	SHRQ $4, CX
	JZ   sdone
sloop:
	VMULPS  (SI), Y2, Y0
	VMULPS  32(SI), Y2, Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	ADDQ $64, SI
	ADDQ $64, DI
	DECQ CX
	JNZ  sloop
sdone:
	VZEROUPPER
	RET

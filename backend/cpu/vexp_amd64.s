#include "textflag.h"

// Vectorised exp and GELU for AVX2 + FMA, eight floats per iteration.
// exp(x) = 2^n * p(r) with n = round(x*log2(e)), r = x - n*ln2 (ln2 split
// in two for accuracy) and p the degree-6 Taylor polynomial, accurate to
// about 2 ulp on [-87.3, 88.4], where inputs are clamped. The same exp
// sequence is written out inline in each function. Each constant is a
// 32-byte vector of eight copies, so it can be a memory operand.

DATA exp_hi<>+0(SB)/4, $0x42b0c0a5
DATA exp_hi<>+4(SB)/4, $0x42b0c0a5
DATA exp_hi<>+8(SB)/4, $0x42b0c0a5
DATA exp_hi<>+12(SB)/4, $0x42b0c0a5
DATA exp_hi<>+16(SB)/4, $0x42b0c0a5
DATA exp_hi<>+20(SB)/4, $0x42b0c0a5
DATA exp_hi<>+24(SB)/4, $0x42b0c0a5
DATA exp_hi<>+28(SB)/4, $0x42b0c0a5
GLOBL exp_hi<>(SB), RODATA|NOPTR, $32
DATA exp_lo<>+0(SB)/4, $0xc2aeac4f
DATA exp_lo<>+4(SB)/4, $0xc2aeac4f
DATA exp_lo<>+8(SB)/4, $0xc2aeac4f
DATA exp_lo<>+12(SB)/4, $0xc2aeac4f
DATA exp_lo<>+16(SB)/4, $0xc2aeac4f
DATA exp_lo<>+20(SB)/4, $0xc2aeac4f
DATA exp_lo<>+24(SB)/4, $0xc2aeac4f
DATA exp_lo<>+28(SB)/4, $0xc2aeac4f
GLOBL exp_lo<>(SB), RODATA|NOPTR, $32
DATA exp_log2e<>+0(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+4(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+8(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+12(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+16(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+20(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+24(SB)/4, $0x3fb8aa3b
DATA exp_log2e<>+28(SB)/4, $0x3fb8aa3b
GLOBL exp_log2e<>(SB), RODATA|NOPTR, $32
DATA exp_ln2hi<>+0(SB)/4, $0x3f318000
DATA exp_ln2hi<>+4(SB)/4, $0x3f318000
DATA exp_ln2hi<>+8(SB)/4, $0x3f318000
DATA exp_ln2hi<>+12(SB)/4, $0x3f318000
DATA exp_ln2hi<>+16(SB)/4, $0x3f318000
DATA exp_ln2hi<>+20(SB)/4, $0x3f318000
DATA exp_ln2hi<>+24(SB)/4, $0x3f318000
DATA exp_ln2hi<>+28(SB)/4, $0x3f318000
GLOBL exp_ln2hi<>(SB), RODATA|NOPTR, $32
DATA exp_ln2lo<>+0(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+4(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+8(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+12(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+16(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+20(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+24(SB)/4, $0xb95e8083
DATA exp_ln2lo<>+28(SB)/4, $0xb95e8083
GLOBL exp_ln2lo<>(SB), RODATA|NOPTR, $32
DATA exp_c6<>+0(SB)/4, $0x3ab60b61
DATA exp_c6<>+4(SB)/4, $0x3ab60b61
DATA exp_c6<>+8(SB)/4, $0x3ab60b61
DATA exp_c6<>+12(SB)/4, $0x3ab60b61
DATA exp_c6<>+16(SB)/4, $0x3ab60b61
DATA exp_c6<>+20(SB)/4, $0x3ab60b61
DATA exp_c6<>+24(SB)/4, $0x3ab60b61
DATA exp_c6<>+28(SB)/4, $0x3ab60b61
GLOBL exp_c6<>(SB), RODATA|NOPTR, $32
DATA exp_c5<>+0(SB)/4, $0x3c088889
DATA exp_c5<>+4(SB)/4, $0x3c088889
DATA exp_c5<>+8(SB)/4, $0x3c088889
DATA exp_c5<>+12(SB)/4, $0x3c088889
DATA exp_c5<>+16(SB)/4, $0x3c088889
DATA exp_c5<>+20(SB)/4, $0x3c088889
DATA exp_c5<>+24(SB)/4, $0x3c088889
DATA exp_c5<>+28(SB)/4, $0x3c088889
GLOBL exp_c5<>(SB), RODATA|NOPTR, $32
DATA exp_c4<>+0(SB)/4, $0x3d2aaaab
DATA exp_c4<>+4(SB)/4, $0x3d2aaaab
DATA exp_c4<>+8(SB)/4, $0x3d2aaaab
DATA exp_c4<>+12(SB)/4, $0x3d2aaaab
DATA exp_c4<>+16(SB)/4, $0x3d2aaaab
DATA exp_c4<>+20(SB)/4, $0x3d2aaaab
DATA exp_c4<>+24(SB)/4, $0x3d2aaaab
DATA exp_c4<>+28(SB)/4, $0x3d2aaaab
GLOBL exp_c4<>(SB), RODATA|NOPTR, $32
DATA exp_c3<>+0(SB)/4, $0x3e2aaaab
DATA exp_c3<>+4(SB)/4, $0x3e2aaaab
DATA exp_c3<>+8(SB)/4, $0x3e2aaaab
DATA exp_c3<>+12(SB)/4, $0x3e2aaaab
DATA exp_c3<>+16(SB)/4, $0x3e2aaaab
DATA exp_c3<>+20(SB)/4, $0x3e2aaaab
DATA exp_c3<>+24(SB)/4, $0x3e2aaaab
DATA exp_c3<>+28(SB)/4, $0x3e2aaaab
GLOBL exp_c3<>(SB), RODATA|NOPTR, $32
DATA exp_c2<>+0(SB)/4, $0x3f000000
DATA exp_c2<>+4(SB)/4, $0x3f000000
DATA exp_c2<>+8(SB)/4, $0x3f000000
DATA exp_c2<>+12(SB)/4, $0x3f000000
DATA exp_c2<>+16(SB)/4, $0x3f000000
DATA exp_c2<>+20(SB)/4, $0x3f000000
DATA exp_c2<>+24(SB)/4, $0x3f000000
DATA exp_c2<>+28(SB)/4, $0x3f000000
GLOBL exp_c2<>(SB), RODATA|NOPTR, $32
DATA exp_one<>+0(SB)/4, $0x3f800000
DATA exp_one<>+4(SB)/4, $0x3f800000
DATA exp_one<>+8(SB)/4, $0x3f800000
DATA exp_one<>+12(SB)/4, $0x3f800000
DATA exp_one<>+16(SB)/4, $0x3f800000
DATA exp_one<>+20(SB)/4, $0x3f800000
DATA exp_one<>+24(SB)/4, $0x3f800000
DATA exp_one<>+28(SB)/4, $0x3f800000
GLOBL exp_one<>(SB), RODATA|NOPTR, $32
DATA exp_gc<>+0(SB)/4, $0x3f4c422a
DATA exp_gc<>+4(SB)/4, $0x3f4c422a
DATA exp_gc<>+8(SB)/4, $0x3f4c422a
DATA exp_gc<>+12(SB)/4, $0x3f4c422a
DATA exp_gc<>+16(SB)/4, $0x3f4c422a
DATA exp_gc<>+20(SB)/4, $0x3f4c422a
DATA exp_gc<>+24(SB)/4, $0x3f4c422a
DATA exp_gc<>+28(SB)/4, $0x3f4c422a
GLOBL exp_gc<>(SB), RODATA|NOPTR, $32
DATA exp_gk<>+0(SB)/4, $0x3d372713
DATA exp_gk<>+4(SB)/4, $0x3d372713
DATA exp_gk<>+8(SB)/4, $0x3d372713
DATA exp_gk<>+12(SB)/4, $0x3d372713
DATA exp_gk<>+16(SB)/4, $0x3d372713
DATA exp_gk<>+20(SB)/4, $0x3d372713
DATA exp_gk<>+24(SB)/4, $0x3d372713
DATA exp_gk<>+28(SB)/4, $0x3d372713
GLOBL exp_gk<>(SB), RODATA|NOPTR, $32
DATA exp_g3k<>+0(SB)/4, $0x3e095d4f
DATA exp_g3k<>+4(SB)/4, $0x3e095d4f
DATA exp_g3k<>+8(SB)/4, $0x3e095d4f
DATA exp_g3k<>+12(SB)/4, $0x3e095d4f
DATA exp_g3k<>+16(SB)/4, $0x3e095d4f
DATA exp_g3k<>+20(SB)/4, $0x3e095d4f
DATA exp_g3k<>+24(SB)/4, $0x3e095d4f
DATA exp_g3k<>+28(SB)/4, $0x3e095d4f
GLOBL exp_g3k<>(SB), RODATA|NOPTR, $32
DATA exp_mtwo<>+0(SB)/4, $0xc0000000
DATA exp_mtwo<>+4(SB)/4, $0xc0000000
DATA exp_mtwo<>+8(SB)/4, $0xc0000000
DATA exp_mtwo<>+12(SB)/4, $0xc0000000
DATA exp_mtwo<>+16(SB)/4, $0xc0000000
DATA exp_mtwo<>+20(SB)/4, $0xc0000000
DATA exp_mtwo<>+24(SB)/4, $0xc0000000
DATA exp_mtwo<>+28(SB)/4, $0xc0000000
GLOBL exp_mtwo<>(SB), RODATA|NOPTR, $32
DATA exp_two<>+0(SB)/4, $0x40000000
DATA exp_two<>+4(SB)/4, $0x40000000
DATA exp_two<>+8(SB)/4, $0x40000000
DATA exp_two<>+12(SB)/4, $0x40000000
DATA exp_two<>+16(SB)/4, $0x40000000
DATA exp_two<>+20(SB)/4, $0x40000000
DATA exp_two<>+24(SB)/4, $0x40000000
DATA exp_two<>+28(SB)/4, $0x40000000
GLOBL exp_two<>(SB), RODATA|NOPTR, $32
DATA exp_bias<>+0(SB)/4, $127
DATA exp_bias<>+4(SB)/4, $127
DATA exp_bias<>+8(SB)/4, $127
DATA exp_bias<>+12(SB)/4, $127
DATA exp_bias<>+16(SB)/4, $127
DATA exp_bias<>+20(SB)/4, $127
DATA exp_bias<>+24(SB)/4, $127
DATA exp_bias<>+28(SB)/4, $127
GLOBL exp_bias<>(SB), RODATA|NOPTR, $32

// func expAVX2(dst, src *float32, n int)   n % 8 == 0
TEXT ·expAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   expdone
exploop:
	VMOVUPS (SI), Y0
	VMINPS exp_hi<>(SB), Y0, Y0
	VMAXPS exp_lo<>(SB), Y0, Y0
	VMULPS exp_log2e<>(SB), Y0, Y1
	VROUNDPS $0, Y1, Y1
	VFNMADD231PS exp_ln2hi<>(SB), Y1, Y0
	VFNMADD231PS exp_ln2lo<>(SB), Y1, Y0
	VMOVUPS exp_c6<>(SB), Y2
	VFMADD213PS exp_c5<>(SB), Y0, Y2
	VFMADD213PS exp_c4<>(SB), Y0, Y2
	VFMADD213PS exp_c3<>(SB), Y0, Y2
	VFMADD213PS exp_c2<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VCVTPS2DQ Y1, Y1
	VPADDD exp_bias<>(SB), Y1, Y1
	VPSLLD $23, Y1, Y1
	VMULPS Y1, Y2, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  exploop
expdone:
	VZEROUPPER
	RET

// func geluAVX2(dst, src *float32, n int)   n % 8 == 0
// gelu(x) = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3).
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	JZ   geludone
geluloop:
	VMOVUPS (SI), Y3
	VMULPS Y3, Y3, Y4
	VMULPS exp_gk<>(SB), Y4, Y4
	VFMADD213PS Y3, Y3, Y4
	VMULPS exp_gc<>(SB), Y4, Y4
	VMULPS exp_mtwo<>(SB), Y4, Y0
	VMINPS exp_hi<>(SB), Y0, Y0
	VMAXPS exp_lo<>(SB), Y0, Y0
	VMULPS exp_log2e<>(SB), Y0, Y1
	VROUNDPS $0, Y1, Y1
	VFNMADD231PS exp_ln2hi<>(SB), Y1, Y0
	VFNMADD231PS exp_ln2lo<>(SB), Y1, Y0
	VMOVUPS exp_c6<>(SB), Y2
	VFMADD213PS exp_c5<>(SB), Y0, Y2
	VFMADD213PS exp_c4<>(SB), Y0, Y2
	VFMADD213PS exp_c3<>(SB), Y0, Y2
	VFMADD213PS exp_c2<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VCVTPS2DQ Y1, Y1
	VPADDD exp_bias<>(SB), Y1, Y1
	VPSLLD $23, Y1, Y1
	VMULPS Y1, Y2, Y0
	VADDPS exp_one<>(SB), Y0, Y0
	VDIVPS Y0, Y3, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ  geluloop
geludone:
	VZEROUPPER
	RET

// func geluBackwardAVX2(dx, x, dy *float32, n int)   n % 8 == 0
// gelu'(x) = s + 2 x s (1 - s) u', s = sigmoid(2u), u' = sqrt(2/pi) (1 + 3*0.044715 x^2).
TEXT ·geluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   gelubdone
gelubloop:
	VMOVUPS (SI), Y3
	VMULPS Y3, Y3, Y4
	VMULPS exp_gk<>(SB), Y4, Y5
	VFMADD213PS Y3, Y3, Y5
	VMULPS exp_gc<>(SB), Y5, Y5
	VMULPS exp_mtwo<>(SB), Y5, Y0
	VMINPS exp_hi<>(SB), Y0, Y0
	VMAXPS exp_lo<>(SB), Y0, Y0
	VMULPS exp_log2e<>(SB), Y0, Y1
	VROUNDPS $0, Y1, Y1
	VFNMADD231PS exp_ln2hi<>(SB), Y1, Y0
	VFNMADD231PS exp_ln2lo<>(SB), Y1, Y0
	VMOVUPS exp_c6<>(SB), Y2
	VFMADD213PS exp_c5<>(SB), Y0, Y2
	VFMADD213PS exp_c4<>(SB), Y0, Y2
	VFMADD213PS exp_c3<>(SB), Y0, Y2
	VFMADD213PS exp_c2<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VFMADD213PS exp_one<>(SB), Y0, Y2
	VCVTPS2DQ Y1, Y1
	VPADDD exp_bias<>(SB), Y1, Y1
	VPSLLD $23, Y1, Y1
	VMULPS Y1, Y2, Y0
	VADDPS exp_one<>(SB), Y0, Y0
	VMOVUPS exp_one<>(SB), Y6
	VDIVPS Y0, Y6, Y6
	VMOVUPS exp_one<>(SB), Y7
	VSUBPS Y6, Y7, Y7
	VMULPS Y6, Y7, Y7
	VMULPS Y3, Y7, Y7
	VMULPS exp_g3k<>(SB), Y4, Y4
	VADDPS exp_one<>(SB), Y4, Y4
	VMULPS exp_gc<>(SB), Y4, Y4
	VMULPS exp_two<>(SB), Y4, Y4
	VFMADD213PS Y6, Y4, Y7
	VMULPS (DX), Y7, Y7
	VMOVUPS Y7, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	DECQ CX
	JNZ  gelubloop
gelubdone:
	VZEROUPPER
	RET

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

//go:build !purego

#include "textflag.h"

// func cpuidECX7() uint32
TEXT ·cpuidECX7(SB), NOSPLIT, $0-4
	MOVL $7, AX
	XORL CX, CX
	CPUID
	MOVL CX, ret+0(FP)
	RET

// One fold step of an accumulator: acc = lo(acc)*k.lo ^ hi(acc)*k.hi ^ next,
// lane by lane.
#define FOLD(keys, acc, tmp, next) \
	VPCLMULQDQ $0x00, keys, acc, tmp \
	VPCLMULQDQ $0x11, keys, acc, acc \
	VPXOR      next, tmp, tmp \
	VPXOR      tmp, acc, acc

// func fold256(crc uint32, p []byte, keys *[4]uint64, v *[16]byte)
TEXT ·fold256(SB), NOSPLIT, $0-48
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ keys+32(FP), DX
	MOVQ v+40(FP), DI

	// Eight 16-byte lanes in four accumulators; the CRC goes into the
	// first four bytes.
	VBROADCASTI128 (DX), Y0
	VMOVD          AX, X6
	VMOVDQU        (SI), Y1
	VPXOR          Y6, Y1, Y1
	VMOVDQU        32(SI), Y2
	VMOVDQU        64(SI), Y3
	VMOVDQU        96(SI), Y4
	ADDQ           $128, SI
	SUBQ           $128, CX
	JZ             merge

loop:
	FOLD(Y0, Y1, Y5, (SI))
	FOLD(Y0, Y2, Y6, 32(SI))
	FOLD(Y0, Y3, Y7, 64(SI))
	FOLD(Y0, Y4, Y8, 96(SI))
	ADDQ $128, SI
	SUBQ $128, CX
	JNZ  loop

merge:
	// Fold the eight lanes, in order, into one, 128 bits at a time. The
	// high lanes come out first: writing an X register clears the upper
	// half of its Y register.
	VEXTRACTI128 $1, Y1, X8
	VEXTRACTI128 $1, Y2, X9
	VEXTRACTI128 $1, Y3, X10
	VEXTRACTI128 $1, Y4, X11
	VMOVDQU      16(DX), X0
	FOLD(X0, X1, X5, X8)
	FOLD(X0, X1, X5, X2)
	FOLD(X0, X1, X5, X9)
	FOLD(X0, X1, X5, X3)
	FOLD(X0, X1, X5, X10)
	FOLD(X0, X1, X5, X4)
	FOLD(X0, X1, X5, X11)
	VMOVDQU      X1, (DI)
	VZEROUPPER
	RET

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

// MERGE_AND_STORE folds the eight lanes in Y1-Y4, in order, into one,
// 128 bits at a time, with the keys at 16(DX), stores it at (DI) and
// returns. The high lanes come out first: writing an X register clears
// the upper half of its Y register.
#define MERGE_AND_STORE \
	VEXTRACTI128 $1, Y1, X8 \
	VEXTRACTI128 $1, Y2, X9 \
	VEXTRACTI128 $1, Y3, X10 \
	VEXTRACTI128 $1, Y4, X11 \
	VMOVDQU      16(DX), X0 \
	FOLD(X0, X1, X5, X8) \
	FOLD(X0, X1, X5, X2) \
	FOLD(X0, X1, X5, X9) \
	FOLD(X0, X1, X5, X3) \
	FOLD(X0, X1, X5, X10) \
	FOLD(X0, X1, X5, X4) \
	FOLD(X0, X1, X5, X11) \
	VMOVDQU      X1, (DI) \
	VZEROUPPER \
	RET

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
	MERGE_AND_STORE

// FOLD128 is FOLD on one 16-byte lane with SSE: acc = lo(acc)*k.lo ^
// hi(acc)*k.hi ^ next.
#define FOLD128(keys, acc, tmp, next) \
	MOVO      acc, tmp \
	PCLMULQDQ $0x00, keys, tmp \
	PCLMULQDQ $0x11, keys, acc \
	PXOR      next, tmp \
	PXOR      tmp, acc

// SHRINK takes 32 bits off the front of the message in x (bit-reflected,
// x^64 mod P in k's low half) without changing its CRC: the front 32
// bits, times x^64 mod P, are added to the rest, shifted 32 bits to the
// front.
#define SHRINK(k, mask, x, tmp) \
	MOVO      x, tmp \
	PAND      mask, tmp \
	PCLMULQDQ $0x00, k, tmp \
	PSRLDQ    $4, x \
	PXOR      tmp, x

// REDUCE is the CRC (crc32.Update's, from a zero register) of the 16
// bytes in X1, in AX, with the constants at DX (shortKeys): 128 bits to
// 96 (the front 64 bits times x^64 mod P, added to the back 64 moved up
// 32), 96 to 64 and then to the 64-bit T = M*x^32 (mod P) with SHRINK,
// and Barrett: q = (T's front 32 bits * mu) / x^32; the CRC is the back
// 32 bits of T + q*P. It uses X0, X2 and X3.
#define REDUCE \
	MOVQ      16(DX), X0 \
	MOVO      X1, X2 \
	PCLMULQDQ $0x00, X0, X2 \
	PSRLDQ    $8, X1 \
	PSLLDQ    $4, X1 \
	PXOR      X2, X1 \
	PCMPEQB X3, X3 \
	PSRLQ   $32, X3 \
	SHRINK(X0, X3, X1, X2) \
	SHRINK(X0, X3, X1, X2) \
	MOVQ      24(DX), X0 \
	MOVO      X1, X2 \
	PAND      X3, X2 \
	PCLMULQDQ $0x00, X0, X2 \
	PAND      X3, X2 \
	MOVQ      32(DX), X0 \
	PCLMULQDQ $0x00, X0, X2 \
	PXOR      X2, X1 \
	PSRLQ     $32, X1 \
	MOVQ      X1, AX \
	NOTL      AX

// func shortCRC(p []byte, d uint64, z int, k *shortKeys) uint32
TEXT ·shortCRC(SB), NOSPLIT, $0-52
	MOVQ p_base+0(FP), SI
	MOVQ p_len+8(FP), CX
	MOVQ d+24(FP), AX
	MOVQ z+32(FP), BX
	MOVQ k+40(FP), DX

	// The message with z zero bytes in front, so that it ends on a lane
	// boundary; d (the register, and the BTH's mask) is XORed into its
	// first bytes. The first lane is the message's first 16 bytes moved
	// up z bytes; the second starts 16-z bytes in and takes what of d
	// the first pushed out.
	MOVQ   AX, X4
	MOVOU  (SI), X1
	PXOR   X4, X1
	MOVQ   $16, R9
	SUBQ   BX, R9
	LEAQ   40(DX)(R9*1), R8
	MOVOU  (R8), X6
	PSHUFB X6, X1
	MOVOU  16(R8), X7
	PSHUFB X7, X4
	MOVOU  (SI)(R9*1), X2
	PXOR   X4, X2
	MOVOU  (DX), X0
	FOLD128(X0, X1, X5, X2)
	LEAQ   16(SI)(R9*1), SI
	ADDQ   BX, CX
	SUBQ   $32, CX
	JZ     reduce

loop:
	MOVOU (SI), X2
	FOLD128(X0, X1, X5, X2)
	ADDQ  $16, SI
	SUBQ  $16, CX
	JNZ   loop

reduce:
	REDUCE
	MOVL      AX, ret+48(FP)
	RET

// func fold256Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte)
// is fold256 that also stores p into dst, each block as it is folded.
TEXT ·fold256Copy(SB), NOSPLIT, $0-72
	MOVL crc+0(FP), AX
	MOVQ dst_base+8(FP), BX
	MOVQ p_base+32(FP), SI
	MOVQ p_len+40(FP), CX
	MOVQ keys+56(FP), DX
	MOVQ v+64(FP), DI

	VBROADCASTI128 (DX), Y0
	VMOVD          AX, X6
	VMOVDQU        (SI), Y1
	VMOVDQU        32(SI), Y2
	VMOVDQU        64(SI), Y3
	VMOVDQU        96(SI), Y4
	VMOVDQU        Y1, (BX)
	VMOVDQU        Y2, 32(BX)
	VMOVDQU        Y3, 64(BX)
	VMOVDQU        Y4, 96(BX)
	VPXOR          Y6, Y1, Y1
	ADDQ           $128, SI
	ADDQ           $128, BX
	SUBQ           $128, CX
	JZ             mergecopy

loopcopy:
	VMOVDQU (SI), Y9
	VMOVDQU 32(SI), Y10
	VMOVDQU 64(SI), Y11
	VMOVDQU 96(SI), Y12
	VMOVDQU Y9, (BX)
	VMOVDQU Y10, 32(BX)
	VMOVDQU Y11, 64(BX)
	VMOVDQU Y12, 96(BX)
	FOLD(Y0, Y1, Y5, Y9)
	FOLD(Y0, Y2, Y6, Y10)
	FOLD(Y0, Y3, Y7, Y11)
	FOLD(Y0, Y4, Y8, Y12)
	ADDQ $128, SI
	ADDQ $128, BX
	SUBQ $128, CX
	JNZ  loopcopy

mergecopy:
	MERGE_AND_STORE

// MERGE4_AND_STORE folds the four lanes in X1-X4, in order, into one
// with the keys at 16(DX), stores it at (DI) and returns.
#define MERGE4_AND_STORE \
	VMOVDQU 16(DX), X0 \
	FOLD(X0, X1, X9, X2) \
	FOLD(X0, X1, X9, X3) \
	FOLD(X0, X1, X9, X4) \
	VMOVDQU X1, (DI) \
	RET

// func fold128Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte)
// is fold256Copy with 128-bit carry-less multiplies (AVX's VEX encoding
// of PCLMULQDQ): four 16-byte lanes, 64 bytes a step (fold128Block), with
// keys for that distance (foldKeys128). The multiplies' throughput bounds
// it, not their latency, so more lanes would not be faster, and a 1,344-
// or 1,024-byte payload folds whole.
TEXT ·fold128Copy(SB), NOSPLIT, $0-72
	MOVL crc+0(FP), AX
	MOVQ dst_base+8(FP), BX
	MOVQ p_base+32(FP), SI
	MOVQ p_len+40(FP), CX
	MOVQ keys+56(FP), DX
	MOVQ v+64(FP), DI

	VMOVDQU (DX), X0
	VMOVDQU (SI), X1
	VMOVDQU 16(SI), X2
	VMOVDQU 32(SI), X3
	VMOVDQU 48(SI), X4
	VMOVDQU X1, (BX)
	VMOVDQU X2, 16(BX)
	VMOVDQU X3, 32(BX)
	VMOVDQU X4, 48(BX)
	VMOVD   AX, X9
	VPXOR   X9, X1, X1
	ADDQ    $64, SI
	ADDQ    $64, BX
	SUBQ    $64, CX
	JZ      mergecopy128

loopcopy128:
	VMOVDQU (SI), X5
	VMOVDQU 16(SI), X6
	VMOVDQU 32(SI), X7
	VMOVDQU 48(SI), X8
	VMOVDQU X5, (BX)
	VMOVDQU X6, 16(BX)
	VMOVDQU X7, 32(BX)
	VMOVDQU X8, 48(BX)
	FOLD(X0, X1, X9, X5)
	FOLD(X0, X2, X10, X6)
	FOLD(X0, X3, X11, X7)
	FOLD(X0, X4, X12, X8)
	ADDQ $64, SI
	ADDQ $64, BX
	SUBQ $64, CX
	JNZ  loopcopy128

mergecopy128:
	MERGE4_AND_STORE

// func laneCRC(lane *[16]byte, k *shortKeys) uint32
TEXT ·laneCRC(SB), NOSPLIT, $0-20
	MOVQ  lane+0(FP), SI
	MOVQ  k+8(FP), DX
	MOVOU (SI), X1
	REDUCE
	MOVL  AX, ret+16(FP)
	RET

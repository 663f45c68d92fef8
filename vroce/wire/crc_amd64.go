//go:build !purego

package wire

import "golang.org/x/sys/cpu"

// haveFold256: AVX2 (which also says the OS saves the YMM registers) and
// VPCLMULQDQ (CPUID leaf 7, ECX bit 10), which golang.org/x/sys/cpu
// reports only together with AVX-512.
var haveFold256 = cpu.X86.HasAVX2 && cpu.X86.HasPCLMULQDQ && cpuidECX7()&(1<<10) != 0

// haveFold128: AVX (which also says the OS saves the vector registers)
// and PCLMULQDQ, whose VEX encoding fold128Copy uses.
var haveFold128 = cpu.X86.HasAVX && cpu.X86.HasPCLMULQDQ

// haveStdlib512: hash/crc32 folds 512 bits at a time from stdlib512Min
// bytes on (AVX-512 VPCLMULQDQ).
var haveStdlib512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ

const stdlib512Min = 1024

// haveShortCRC: PCLMULQDQ, and SSSE3 for PSHUFB.
var haveShortCRC = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSSE3

// cpuidECX7 returns ECX of CPUID leaf 7, subleaf 0.
func cpuidECX7() uint32

// fold256 folds p (a non-zero multiple of foldBlock bytes long), with
// crc XORed into its first four bytes, into the 16 bytes v that have the
// same CRC remainder. keys is foldKeys.
//
//go:noescape
func fold256(crc uint32, p []byte, keys *[4]uint64, v *[16]byte)

// fold256Copy is fold256 that also copies p into dst (as long as p, not
// overlapping it) on the way.
//
//go:noescape
func fold256Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte)

// fold128Copy is fold256Copy on 128-bit registers: four lanes and 64
// bytes a step, with foldKeys128.
//
//go:noescape
func fold128Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte)

// shortCRC is crc32.Update's result for p (more than 16 bytes) with d
// XORed into its first eight bytes: the inverted register, and the
// BTH's mask. z is -len(p) mod 16.
//
//go:noescape
func shortCRC(p []byte, d uint64, z int, k *shortKeys) uint32

// laneCRC is crc32.Update's result, from a zero register, for the 16
// bytes of lane: shortCRC's reduction alone.
//
//go:noescape
func laneCRC(lane *[16]byte, k *shortKeys) uint32

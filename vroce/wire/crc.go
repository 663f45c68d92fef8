package wire

import (
	"hash/crc32"
	"math/bits"
)

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p). Where the CPU
// multiplies carry-less 256 bits at a time (VPCLMULQDQ with AVX2, as on
// AMD Zen 3 and later, where the standard library's 512-bit path needs
// AVX-512), long inputs are folded eight 16-byte lanes at once, twice
// the standard library's pace: the ICRC reads every byte of every packet
// on both ends, so this is a fifth of a bulk transfer's CPU.
//
// The fold (Intel's "Fast CRC Computation for Generic Polynomials Using
// PCLMULQDQ") turns the bulk into 16 bytes that leave the same CRC
// remainder; the standard library finishes from there.
func updateIEEE(crc uint32, p []byte) uint32 {
	if len(p) < slicingMax {
		return updateSlicing8(crc, p) // no dispatch: most of a short input's cost
	}
	if !haveFold256 || len(p) < foldMin {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	n := len(p) &^ (foldBlock - 1)
	var v [16]byte
	// The register before the bulk is ^crc (crc32.Update inverts on the
	// way in and out); folding it into the first bytes and finishing from
	// a zero register is the same sum.
	fold256(^crc, p[:n], &foldKeys, &v)
	crc = updateSlicing8(0xffffffff, v[:]) // v stays on the stack
	return crc32.Update(crc, crc32.IEEETable, p[n:])
}

const (
	slicingMax = 96  // below this slicing-by-8 beats hash/crc32's call
	foldBlock  = 128 // bytes folded per step: four 256-bit accumulators
	foldMin    = 512 // below this the standard library is as fast
)

// foldKeys are the multipliers that move a 16-byte lane forward: the low
// half by x^(d+32), the high half by x^(d-32), modulo the CRC polynomial,
// bit-reflected; d is 1,024 bits in the main loop, 128 when the lanes
// are merged.
var foldKeys = [4]uint64{
	foldKey(1024 + 32), foldKey(1024 - 32),
	foldKey(128 + 32), foldKey(128 - 32),
}

// foldKey is x^n mod P (P the CRC-32 polynomial 0x104C11DB7), bit-reflected
// and shifted left one, as the carry-less multiply of reflected data wants.
func foldKey(n int) uint64 {
	const poly = 0x04C11DB7
	r := uint32(1)
	for range n {
		carry := r & 0x80000000
		r <<= 1
		if carry != 0 {
			r ^= poly
		}
	}
	return uint64(bits.Reverse32(r)) << 1
}

package wire

import (
	"encoding/binary"
	"hash/crc32"
	"math/bits"
)

// updateIEEE is crc32.Update(crc, crc32.IEEETable, p). Where the CPU
// multiplies carry-less 256 bits at a time (VPCLMULQDQ with AVX2, as on
// AMD Zen 3 and later, where the standard library's 512-bit path needs
// AVX-512), long inputs are folded eight 16-byte lanes at once, twice
// the standard library's pace: the ICRC reads every byte of every packet
// on both ends, so this is a fifth of a bulk transfer's CPU. Where the
// standard library has its 512-bit path, it takes what that serves
// faster (stdlibFaster).
func updateIEEE(crc uint32, p []byte) uint32 {
	if shortPath(len(p)) {
		return updateShort(crc, p, false)
	}
	if len(p) < slicingMax {
		return updateSlicing8(crc, p) // no dispatch: most of a short input's cost
	}
	if !haveFold256 || len(p) < foldMin || stdlibFaster(len(p)) {
		return crc32.Update(crc, crc32.IEEETable, p)
	}
	return updateFold256(crc, p)
}

// updateFold256 is updateIEEE by the 256-bit fold, for p of at least
// foldBlock bytes on a CPU that has it. The fold (Intel's "Fast CRC
// Computation for Generic Polynomials Using PCLMULQDQ") turns the bulk
// into 16 bytes that leave the same CRC remainder; the standard library
// finishes from there.
func updateFold256(crc uint32, p []byte) uint32 {
	n := len(p) &^ (foldBlock - 1)
	var v [16]byte
	// The register before the bulk is ^crc (crc32.Update inverts on the
	// way in and out); folding it into the first bytes and finishing from
	// a zero register is the same sum.
	fold256(^crc, p[:n], &foldKeys, &v)
	return finishFold(&v, p[n:])
}

// finishFold is the CRC, from a zero register, of the 16 bytes a fold
// left (v, kept on the caller's stack) followed by the input's rest
// after the folded blocks. Where the CPU has the short path it reduces
// them with carry-less multiplies: table lookups here missed the cache,
// which the fold's stream of stores had just filled with the packet.
func finishFold(v *[16]byte, rest []byte) uint32 {
	if !haveShortCRC {
		crc := updateSlicing8(0xffffffff, v[:])
		return crc32.Update(crc, crc32.IEEETable, rest)
	}
	if len(rest) == 0 {
		return laneCRC(v, &shortKeysIEEE)
	}
	var b [16 + foldBlock]byte // v, then rest: shortCRC reads one message
	copy(b[:], v[:])
	n := 16 + copy(b[16:], rest)
	return shortCRC(b[:n], 0, -n&15, &shortKeysIEEE)
}

// copyUpdateIEEE copies src into dst (at least as long, not overlapping
// it) and returns updateIEEE(crc, src). Where a fold serves, one pass
// stores each block as it folds it: a payload copied into a packet is
// read once for the copy and the ICRC, not twice (with the 256-bit fold
// a bulk sender's copy and CRC fell from 16% of its CPU to 11%). With
// 128-bit multiplies only (first-generation AMD Zen), a fold alone is
// no faster than the standard library's (236-265 against 215-344 ns for
// 1,344 bytes), which updateIEEE keeps, but copying as fold128Copy reads
// saves most of the copy: 1,344-byte packets cut from a
// 64 KiB buffer took 304-347 ns against 371-442 copied then summed
// (BenchmarkCopyAndCRC, 2026-12-05, with eight lanes; four were a tenth
// faster again).
func copyUpdateIEEE(crc uint32, dst, src []byte) uint32 {
	switch {
	case len(src) < foldMin || stdlibFaster(len(src)):
	case haveFold256:
		return copyFold256(crc, dst, src)
	case haveFold128:
		return copyFold128(crc, dst, src)
	}
	n := copy(dst, src)
	return updateIEEE(crc, dst[:n]) // fresh in the cache
}

// copyFold256 is copyUpdateIEEE by the 256-bit fold, for src of at
// least foldBlock bytes on a CPU that has it.
func copyFold256(crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	n := len(src) &^ (foldBlock - 1)
	var v [16]byte
	fold256Copy(^crc, dst[:n], src[:n], &foldKeys, &v)
	copy(dst[n:], src[n:])
	return finishFold(&v, src[n:])
}

// copyFold128 is copyFold256 by the 128-bit fold, for src of at least
// fold128Block bytes on a CPU that has it.
func copyFold128(crc uint32, dst, src []byte) uint32 {
	dst = dst[:len(src)]
	n := len(src) &^ (fold128Block - 1)
	var v [16]byte
	fold128Copy(^crc, dst[:n], src[:n], &foldKeys128, &v)
	copy(dst[n:], src[n:])
	return finishFold(&v, src[n:])
}

// stdlibFaster reports whether the standard library's CRC is the faster
// for n bytes: from 1 KiB on where the CPU has 512-bit carry-less
// multiplies (AVX-512 VPCLMULQDQ, as on AMD Zen 4), which it uses there.
// On such a CPU (2026-12-03) it took 36-43 ns for 1,024-1,344 bytes
// against the 256-bit fold's 47-88, and copying first then running it
// cost what copying as the fold reads did (74 against 63-97 ns).
func stdlibFaster(n int) bool { return haveStdlib512 && n >= stdlib512Min }

const (
	shortMin     = 17  // shortCRC's least: it reads its second lane from p
	slicingMax   = 96  // below this slicing-by-8 beats hash/crc32's call
	foldBlock    = 128 // bytes folded per step: four 256-bit accumulators
	fold128Block = 64  // fold128Copy's: four 128-bit accumulators
	foldMin      = 512 // below this the standard library (or shortCRC) is as fast
)

// foldKeys are the multipliers that move a 16-byte lane forward: the low
// half by x^(d+32), the high half by x^(d-32), modulo the CRC polynomial,
// bit-reflected; d is 1,024 bits in the main loop, 128 when the lanes
// are merged.
var foldKeys = [4]uint64{
	foldKey(1024 + 32), foldKey(1024 - 32),
	foldKey(128 + 32), foldKey(128 - 32),
}

// foldKeys128 are foldKeys for fold128Copy, whose main loop moves a lane
// 512 bits.
var foldKeys128 = [4]uint64{
	foldKey(512 + 32), foldKey(512 - 32),
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

// shortPath reports whether n bytes go through updateShort: where the
// CPU has it, from its least to where folding 256 bits at a time wins.
func shortPath(n int) bool { return haveShortCRC && n >= shortMin && n < foldMin }

// updateShort is updateIEEE for p of 17 bytes or more, read in 16-byte
// lanes and reduced with carry-less multiplies (Barrett), without the
// tables slicing-by-8 reads: a short packet's ICRC otherwise costs eight
// table reads per eight bytes, from tables the kernel's copies keep
// evicting. With bth, p begins with a BTH whose resv8a the ICRC counts
// as ones.
func updateShort(crc uint32, p []byte, bth bool) uint32 {
	d := uint64(^crc) // the register, XORed into the first bytes, is the same sum
	if bth {
		d |= uint64(p[4]^0xff) << 32
	}
	return shortCRC(p, d, -len(p)&15, &shortKeysIEEE)
}

// updateLane is updateIEEE for p of 4 to 16 bytes on a CPU with the short
// path; with bth, p begins with a BTH (12 bytes or more) whose resv8a
// counts as ones. It reduces one lane: p after as many zero bytes as
// fill it, with the register XORed into p's first four bytes (from a
// zero register, zeros in front leave the CRC as it is). A BTH's CRC by
// tables missed the cache on most packets of a bulk send.
func updateLane(crc uint32, p []byte, bth bool) uint32 {
	var lane [16]byte
	z := len(lane) - len(p)
	copy(lane[z:], p)
	if bth {
		lane[z+4] = 0xff
	}
	binary.LittleEndian.PutUint32(lane[z:], binary.LittleEndian.Uint32(lane[z:])^^crc)
	return laneCRC(&lane, &shortKeysIEEE)
}

// shortKeys are shortCRC's constants.
type shortKeys struct {
	fold    [2]uint64 // a lane forward 128 bits: foldKeys' last two
	k64     uint64    // x^64 mod P, as foldKey
	mu      uint64    // x^64 / P, bit-reflected over its 33 bits
	poly    uint64    // P, bit-reflected over its 33 bits
	shuffle [48]byte  // PSHUFB masks that move a lane up z bytes: 16-z and 32-z in
}

var shortKeysIEEE = func() (k shortKeys) {
	k.fold = [2]uint64{foldKeys[2], foldKeys[3]}
	k.k64 = foldKey(64)
	k.mu = bits.Reverse64(barrettMu()) >> 31
	k.poly = bits.Reverse64(crcPoly) >> 31
	for i := range k.shuffle {
		k.shuffle[i] = 0x80 // PSHUFB writes a zero
	}
	for i := range 16 {
		k.shuffle[16+i] = byte(i)
	}
	return k
}()

// crcPoly is the CRC-32 polynomial with its x^32 term.
const crcPoly = 1<<32 | 0x04C11DB7

// barrettMu is the quotient of x^64 divided by crcPoly (degree 32), by
// long division.
func barrettMu() uint64 {
	w, q := uint64(1)<<32, uint64(0) // w: the dividend's 33 coefficients in view
	for range 33 {
		q <<= 1
		if w&(1<<32) != 0 {
			q |= 1
			w ^= crcPoly
		}
		w <<= 1
	}
	return q
}

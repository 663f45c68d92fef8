package secrand

import (
	"crypto/rand"
	"encoding/binary"
)

// Uint32 returns a uniformly random 32-bit value.
func Uint32() uint32 {
	var b [4]byte
	rand.Read(b[:]) // never fails: crypto/rand crashes the program rather than return short
	return binary.LittleEndian.Uint32(b[:])
}

// Uint64 returns a uniformly random 64-bit value.
func Uint64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

package secrand

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A hundred draws of each width are all different and use every bit.
func TestDrawsDifferAndCoverTheBits(t *testing.T) {
	seen32, seen64 := map[uint32]bool{}, map[uint64]bool{}
	var or32 uint32
	var or64 uint64
	for range 100 {
		a, b := Uint32(), Uint64()
		seen32[a], seen64[b] = true, true
		or32, or64 = or32|a, or64|b
	}
	assert.Len(t, seen32, 100)
	assert.Len(t, seen64, 100)
	assert.Equal(t, ^uint32(0), or32)
	assert.Equal(t, ^uint64(0), or64)
}

package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHeldPoolSizesToWhatArrived: a buffer is the packet's size class, not
// the device's largest packet, and what a device holds stops at
// maxHeldPerDevice, then resumes as buffers come back.
func TestHeldPoolSizesToWhatArrived(t *testing.T) {
	var h heldPool
	for _, c := range []struct{ n, cost int }{{1, 256}, {16, 256}, {256, 256}, {257, 512}, {4150, 8192}, {32896, 65536}} {
		buf, cost, ok := h.take(make([]byte, c.n))
		require.True(t, ok)
		assert.Equal(t, c.cost, cost, "a %d-byte packet", c.n)
		assert.Equal(t, c.n, len(*buf))
		h.give(buf)
	}
	require.Zero(t, h.total.Load())
	var kept []*[]byte
	for {
		buf, _, ok := h.take(make([]byte, 60000))
		if !ok {
			break
		}
		kept = append(kept, buf)
	}
	assert.Equal(t, maxHeldPerDevice/65536, len(kept))
	assert.LessOrEqual(t, h.total.Load(), int64(maxHeldPerDevice))
	h.give(kept[0])
	_, _, ok := h.take(make([]byte, 60000))
	assert.True(t, ok, "room again once a buffer came back")
}

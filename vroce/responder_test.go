package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"vroce.dev/vroce/wire"
)

// respondingWith is a responder expecting ePSN that holds the PSNs
// listed, as it holds requests that came ahead of ePSN.
func respondingWith(ePSN uint32, held ...uint32) *responder {
	r := &responder{ePSN: ePSN, sr: true, held: make([]heldPacket, maxWindow)}
	buf := make([]byte, 1)
	for _, p := range held {
		r.held[p&(maxWindow-1)] = heldPacket{psn: p, buf: &buf}
		r.heldN++
		if psnDiff(p, r.heldHigh) > 0 || r.heldN == 1 {
			r.heldHigh = p
		}
	}
	return r
}

// The SACK the responder's owed ACK carries: one block per run of held
// PSNs above the one it waits for, in order, across the 24-bit wrap, as
// many as the trailer holds.
func TestResponderSACKBlocksAreTheRunsItHolds(t *testing.T) {
	for _, c := range []struct {
		name string
		ePSN uint32
		held []uint32
		high uint32 // the highest PSN held, when a stale slot stands higher
		want []wire.SACKBlock
	}{
		{"one run", 100, []uint32{101, 102, 103}, 0, []wire.SACKBlock{{First: 101, Count: 3}}},
		{"runs and gaps", 100, []uint32{101, 102, 105, 107, 108, 109}, 0, []wire.SACKBlock{{First: 101, Count: 2}, {First: 105, Count: 1}, {First: 107, Count: 3}}},
		{"across the wrap", 0xfffffd, []uint32{0xfffffe, 0xffffff, 0, 1, 3}, 0, []wire.SACKBlock{{First: 0xfffffe, Count: 4}, {First: 3, Count: 1}}},
		{"a slot left by another PSN is not 102's", 100, []uint32{101, 102 + maxWindow, 103}, 103, []wire.SACKBlock{{First: 101, Count: 1}, {First: 103, Count: 1}}},
	} {
		var s wire.SACK
		r := respondingWith(c.ePSN, c.held...)
		if c.high != 0 {
			r.heldHigh = c.high
		}
		r.sack(&s)
		assert.Equal(t, c.want, s.Blocks[:s.N], c.name)
	}

	// More runs than a trailer holds: the lowest ones, which the
	// requester needs first.
	var held []uint32
	for i := range uint32(wire.MaxSACKBlocks + 3) {
		held = append(held, 101+2*i)
	}
	var s wire.SACK
	respondingWith(100, held...).sack(&s)
	assert.Equal(t, wire.MaxSACKBlocks, s.N)
	assert.Equal(t, wire.SACKBlock{First: 101, Count: 1}, s.Blocks[0])
	assert.Equal(t, wire.SACKBlock{First: 101 + 2*uint32(wire.MaxSACKBlocks-1), Count: 1}, s.Blocks[s.N-1])
}

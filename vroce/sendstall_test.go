package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A send in flight is stuck from the last time the send path was seen to
// move: a send beginning on an idle path, or the start of one that has
// returned. An idle path is never stuck, however long ago it moved.
func TestSendStallCountsFromTheLastSendSeenToMove(t *testing.T) {
	const us = 1_000
	var s sendStall
	assert.False(t, s.stalled(t0), "nothing sent yet")

	s.begin(t0)
	assert.False(t, s.stalled(t0+sendStallMin-1))
	assert.True(t, s.stalled(t0+sendStallMin), "in flight for sendStallMin")
	s.end(t0)
	assert.False(t, s.stalled(t0+10*sendStallMin), "returned: an idle path is not stuck")

	// Four sends overlap. A's return, the earliest to begin, must not
	// take the stamp back from B's, which returned first.
	a, d, b := t0+20*sendStallMin, t0+20*sendStallMin+200*us, t0+20*sendStallMin+300*us
	s.begin(a)
	s.begin(d)
	s.begin(b)
	s.end(b)
	s.end(a)
	assert.False(t, s.stalled(b+sendStallMin-1), "D in flight, but B began and returned since")
	assert.True(t, s.stalled(b+sendStallMin), "D in flight, and nothing moved for sendStallMin")
	s.end(d)
	assert.False(t, s.stalled(b+10*sendStallMin))

	// A send beginning behind a stuck one (waiting for the same socket)
	// does not hide it.
	e := t0 + 50*sendStallMin
	s.begin(e)
	s.begin(e + 500*us)
	assert.True(t, s.stalled(e+sendStallMin), "the first stuck for sendStallMin")
	s.end(e)
	s.end(e + 500*us)

	// A send beginning on a path idle since long ago starts afresh.
	c := t0 + 100*sendStallMin
	s.begin(c)
	assert.False(t, s.stalled(c+sendStallMin-1))
}

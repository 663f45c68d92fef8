package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A QP whose last packet is acknowledged drops its pending deadline (its
// probe would fire stale); a wake another goroutine owes it (the peer
// budget's) stands, even when the QP's own pump, finding nothing in
// flight, would drop it: without the wake the QP waited for nothing and
// its stream stalled (two proxies at 3,000 streams, every reader waiting).
func TestIdleQPDropsItsDeadlineButKeepsAWakeOwed(t *testing.T) {
	rb := newRequesterBench(t)
	qp := rb.qp
	rb.write(t, 1024, t0)
	rb.sink.take()
	require.NotZero(t, qp.timerAt.Load(), "a packet in flight: its probe is pending")

	rb.ack(ackThrough(benchSQPSN), t0+50_000)
	assert.Zero(t, qp.timerAt.Load(), "acknowledged: no deadline left, the probe's entry is dropped")

	qp.dev.wake(qp, t0+60_000) // room in the peer budget, from another QP's goroutine
	qp.mu.Lock()
	qp.req.schedule(qp) // the QP's own pump ends with nothing to do
	qp.mu.Unlock()
	assert.Equal(t, t0+60_000, qp.timerAt.Load(), "the wake stands")

	qp.onTimer() // the timer runs it: the wake is served
	assert.False(t, qp.wakeOwed.Load())
	assert.Zero(t, qp.timerAt.Load(), "served, and idle again: dropped")
}

package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/minheap"
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

// A QP in a ping-pong leaves a dropped probe entry per message, a message
// apart. The timer goroutine arms its clock past them, for the next live
// deadline, instead of waking for each in turn.
func TestTimerArmsPastDroppedEntries(t *testing.T) {
	q := timerQueue{h: minheap.New(earlier, nil)} // no clock: entries are pushed as scheduleLocked does
	a, b := &QP{}, &QP{}
	live := func(qp *QP, at int64) {
		q.h.Push(timerEntry{at: at, qp: qp})
		qp.timerAt.Store(at)
	}
	for i := range int64(10) { // a's entries, each dropped by the next message's ACK
		live(a, 1000+i*80)
	}
	live(b, 1500)
	q.dropStaleLocked()
	require.Positive(t, q.h.Len())
	assert.Equal(t, int64(1500), q.h.Min().at, "b's deadline comes before a's live one (1720)")
	q.h.Pop()
	q.dropStaleLocked()
	assert.Equal(t, int64(1720), q.h.Min().at, "a's last entry is its live one")

	// The positive control: a live entry at the top stays.
	live(a, 1100)
	q.dropStaleLocked()
	assert.Equal(t, int64(1100), q.h.Min().at)
}

// A ping-pong's probe entries, each dropped by its message's ACK, are
// popped as the next message arms its own: the heap holds the live
// deadline and no backlog of dead ones for the timer goroutine to sift
// (on the bench's clean path those fire a millisecond apart, fifty
// messages or more).
func TestAPingPongLeavesNoDeadProbesInTheHeap(t *testing.T) {
	rb := newRequesterBench(t)
	qp, d := rb.qp, rb.qp.dev
	psn := uint32(benchSQPSN)
	for i := range int64(100) {
		rb.write(t, 64, t0+i*20_000)
		require.Len(t, rb.sink.take(), 1)
		rb.ack(ackThrough(psn), t0+i*20_000+10_000)
		psn = psnAdd(psn, 1)
	}
	rb.write(t, 64, t0+100*20_000)
	d.timers.mu.Lock()
	held := d.timers.h.Len()
	d.timers.mu.Unlock()
	assert.LessOrEqual(t, held, 2, "the live probe (and the turn's lease, if armed), not a hundred dead ones")
	assert.NotZero(t, qp.timerAt.Load(), "the last message's probe is live")
}

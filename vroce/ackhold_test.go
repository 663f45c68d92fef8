package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// ackHoldBench is a QP on a sink provider that has received nothing yet;
// each request it is handed finds a receive posted for it.
type ackHoldBench struct {
	*requesterBench
	psn uint32 // the next request's PSN
}

func newAckHoldBench(t *testing.T) *ackHoldBench {
	t.Helper()
	return &ackHoldBench{requesterBench: newBench(t, true), psn: benchRQPSN}
}

// request delivers one SEND asking for an ACK in a receive batch of its
// own that began at now, settles the batch as a holder keeping the turn
// does, and returns the batch (with any ACK it holds) and the packets
// the batch sent.
func (b *ackHoldBench) request(t *testing.T, now int64) (*rxBatch, []wire.Packet) {
	t.Helper()
	d := b.qp.dev
	rx := &rxBatch{out: d.getBatch(), now: now}
	t.Cleanup(func() { d.putBatch(rx.out) })
	b.deliverOne(t, true, rx)
	d.settle(rx, false)
	return rx, b.sink.take()
}

// deliverOne hands the QP the next SEND into a freshly posted receive,
// drained from the CQ, asking for an ACK if ask is set.
func (b *ackHoldBench) deliverOne(t *testing.T, ask bool, rx *rxBatch) {
	t.Helper()
	require.NoError(t, b.qp.PostRecv(RecvWR{SGL: []SGE{b.mr.SGE(0, 64)}}))
	b.deliver(t, wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: b.psn, AckReq: ask}, Payload: []byte("request")}, rx)
	b.psn++
	wc := make([]WorkCompletion, 4)
	n, _ := b.qp.recvCQ.Poll(wc)
	for _, c := range wc[:n] {
		require.Equal(t, WCSuccess, c.Status)
	}
}

// answer posts a one-packet SEND and returns what left, then
// acknowledges it as the peer would: left in flight, it would draw the
// QP's loss probe after a few ms of real time, and a probe leaving just after
// an ACK went alone would teach the QP that its program answers.
func (b *ackHoldBench) answer(t *testing.T) []wire.Packet {
	t.Helper()
	require.NoError(t, b.qp.PostSend(SendWR{Opcode: WRSend, SGL: []SGE{b.mr.SGE(4096, 64)}}))
	sent := b.sink.take()
	require.NotEmpty(t, sent)
	b.ack(ackThrough(sent[len(sent)-1].BTH.PSN), b.qp.dev.now())
	return sent
}

func (b *ackHoldBench) replies() bool {
	b.qp.mu.Lock()
	defer b.qp.mu.Unlock()
	return b.qp.resp.replies
}

func acksIn(pkts []wire.Packet) int {
	n := 0
	for _, p := range pkts {
		if p.BTH.Opcode == wire.RCAcknowledge {
			n++
		}
	}
	return n
}

// An ACK owed to a peer whose requests the QP's program answers waits for
// the answer to carry it, even while the holder of the receive turn keeps
// receiving, for up to ackHold; then it leaves on its own and the QP
// stops expecting answers. The positive control: before the QP has seen
// its program answer, the same request is acknowledged at once.
func TestHeldACKRidesOnTheAnswerOrLeavesWhenDue(t *testing.T) {
	b := newAckHoldBench(t)
	d := b.qp.dev

	// Not yet known to answer: the ACK leaves with the batch.
	rx, sent := b.request(t, t0)
	assert.Equal(t, 1, acksIn(sent), "the ACK of a QP not known to answer")
	assert.Empty(t, rx.acks)
	assert.False(t, b.replies())
	// An answer right behind an ACK that went alone teaches it.
	sent = b.answer(t)
	require.Len(t, sent, 1)
	assert.False(t, sent[0].BTH.PiggyACK, "nothing was owed")
	assert.True(t, b.replies(), "an ACK went alone just before an answer")

	// Known to answer: the ACK waits, and the answer carries it.
	rx, sent = b.request(t, t0+1e6)
	assert.Zero(t, acksIn(sent), "the ACK waits for the answer")
	assert.Len(t, rx.acks, 1)
	assert.Equal(t, t0+1e6+int64(ackHold), d.turn.ackDue.Load(), "the timer goroutine watches for it")
	sent = b.answer(t)
	require.Len(t, sent, 1)
	assert.True(t, sent[0].BTH.PiggyACK, "the answer carries the ACK")
	assert.Equal(t, b.psn-1, sent[0].Piggy.PSN)
	d.holdAcks(rx, t0+1e6+int64(ackHold), true)
	d.transmit(rx.out)
	assert.Zero(t, acksIn(b.sink.take()), "nothing left to send")
	assert.Empty(t, rx.acks)
	assert.Zero(t, d.turn.ackDue.Load())

	// No answer: it leaves once due, not before.
	start := t0 + 2e6
	rx, sent = b.request(t, start)
	assert.Zero(t, acksIn(sent))
	d.holdAcks(rx, start+int64(ackHold)-1, true)
	d.transmit(rx.out)
	assert.Zero(t, acksIn(b.sink.take()), "not due yet")
	d.holdAcks(rx, start+int64(ackHold), true)
	d.transmit(rx.out)
	assert.Equal(t, 1, acksIn(b.sink.take()), "due: it leaves alone")
	assert.Empty(t, rx.acks)
	assert.False(t, b.replies(), "an ACK held until due: the program does not answer in time")

	// And the next is not held.
	_, sent = b.request(t, t0+3e6)
	assert.Equal(t, 1, acksIn(sent))
}

// An ACK that would acknowledge more than holdMaxPackets leaves with its
// batch even from a QP known to answer: a bulk sender is clocked by it.
func TestHeldACKNotForMoreThanTwoPackets(t *testing.T) {
	b := newAckHoldBench(t)
	d := b.qp.dev
	b.request(t, t0)
	b.answer(t)
	require.True(t, b.replies())

	for _, n := range []int{2, 3} {
		rx := &rxBatch{out: d.getBatch(), now: t0 + 1e6}
		for i := range n {
			b.deliverOne(t, i == n-1, rx)
		}
		d.settle(rx, false)
		if n <= holdMaxPackets {
			assert.Zero(t, acksIn(b.sink.take()), "%d packets: held", n)
			// The answer takes it, as above.
			sent := b.answer(t)
			require.Len(t, sent, 1)
			require.True(t, sent[0].BTH.PiggyACK)
		} else {
			assert.Equal(t, 1, acksIn(b.sink.take()), "%d packets: sent at once", n)
		}
		d.holdAcks(rx, t0+1e6, true)
		d.putBatch(rx.out)
	}
}

// A holder that waits again (sendDueAcks) reads the clock for an ACK it
// still owes: one whose hold has run out by the clock leaves. The
// control: a batch's own time, before the hold ran out, kept it.
func TestAnOwedACKLeavesByTheClockWhenTheHolderWaitsAgain(t *testing.T) {
	b := newAckHoldBench(t)
	d := b.qp.dev
	b.request(t, t0)
	b.answer(t) // an ACK alone, then an answer: the QP learns its program answers
	require.True(t, b.replies())

	rx, sent := b.request(t, d.now()-int64(ackHold)-1)
	assert.Zero(t, acksIn(sent), "held at the batch's time, for the answer")
	require.Len(t, rx.acks, 1)
	d.sendDueAcks(rx)
	assert.Equal(t, 1, acksIn(b.sink.take()), "due by the clock: it leaves")
	assert.Empty(t, rx.acks)
}

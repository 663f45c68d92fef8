package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// The completer, driven on a requesterBench (requester_test.go) at times
// the test sets.

// A cumulative ACK slides the window, gives an RTT sample and sends what
// the window now holds, at once.
func TestCompleterAckSlidesTheWindow(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 64<<10, t0)
	rb.sink.take()
	rb.ack(ackThrough(psnAdd(benchSQPSN, 7)), t0+60_000)

	r := &rb.qp.req
	assert.Equal(t, psnAdd(benchSQPSN, 8), r.sb.sndUna)
	assert.Equal(t, int64(60_000), r.rec.rtt.Latest, "the newest PSN acknowledged left at t0")
	assert.Equal(t, psnRange(psnAdd(benchSQPSN, 16), 8), psns(rb.sink.take()), "eight more: the window slid by eight")
	assert.Equal(t, t0+60_000+minRTO, r.rec.rtoAt, "the deadlines restart from the progress")
}

// A SACK past a hole marks the hole lost by sequence, and the resend goes
// out before anything new.
func TestCompleterSACKResendsTheHoleFirst(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 64<<10, t0)
	rb.sink.take()
	hole := psnAdd(benchSQPSN, 8)
	rb.ack(ackThrough(psnAdd(benchSQPSN, 7), wire.SACKBlock{First: psnAdd(hole, 1), Count: 7}), t0+60_000)

	sent := rb.sink.take()
	require.NotEmpty(t, sent)
	assert.Equal(t, hole, sent[0].BTH.PSN, "the hole first")
	assert.Equal(t, psnRange(psnAdd(benchSQPSN, 16), len(sent)-1), psns(sent[1:]), "then new PSNs, none of the held ones")
	st := rb.qp.Stats()
	assert.Equal(t, uint64(1), st.FastRetransmits)
	assert.Equal(t, uint64(1), st.Retransmits)
	assert.Equal(t, uint64(1), st.SACKsRecv)
}

// An ACK or NAK that names nothing in flight is counted and dropped.
func TestCompleterDropsAckForNothingSent(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 4<<10, t0)
	rb.sink.take()
	rb.ack(ackThrough(psnAdd(benchSQPSN, 100)), t0+1000)
	rb.ack(ack{psn: psnAdd(benchSQPSN, -5), aeth: wire.AETH{Syndrome: wire.NAK(wire.NAKRemoteAccessError)}}, t0+2000)
	assert.Equal(t, uint64(2), rb.qp.Stats().ForgedResponses)
	assert.Equal(t, uint32(benchSQPSN), rb.qp.req.sb.sndUna)
	assert.Equal(t, QPSRTS, rb.qp.State())
}

// A READ response naming a READ already done is counted stale (the second
// answer to a READ sent again), one naming a PSN never sent forged; both
// are dropped. The positive control: the first answer completes the READ.
func TestCompleterTellsStaleResponsesFromForgedOnes(t *testing.T) {
	rb := newRequesterBench(t)
	qp, d := rb.qp, rb.qp.dev
	require.NoError(t, qp.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{rb.mr.SGE(0, 64)}, RemoteAddr: 0x1000, RKey: 7}))
	sent := rb.sink.take() // the READ, and on a loaded host perhaps its loss probe
	require.NotEmpty(t, sent)
	psn := sent[0].BTH.PSN
	answer := func(psn uint32) {
		rx := &rxBatch{out: d.getBatch()}
		rb.deliver(t, wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadResponseOnly, PSN: psn},
			AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: 1}, Payload: make([]byte, 64)}, rx)
		d.settle(rx, false)
		d.putBatch(rx.out)
	}
	answer(psn)
	assert.Equal(t, WCSuccess, nextCompletion(t, qp.sendCQ).Status, "the READ done by its answer")
	answer(psn)
	answer(psnAdd(psn, 50))
	s := qp.Stats()
	assert.Equal(t, uint64(1), s.StaleResponses, "the answer again")
	assert.Equal(t, uint64(1), s.ForgedResponses, "an answer to nothing sent")
}

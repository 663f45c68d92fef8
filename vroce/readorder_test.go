package vroce

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// TestPacedReadAnswersWaitForTheBatchHoldingTheFirst: a paced READ's
// first answers leave in the receive batch that brought the request.
// The pacer's timer, when it fires before that batch has left (its
// goroutine descheduled, or busy with the rest of a large batch), must
// not send the next answers ahead of them: a requester takes READ
// responses out of order as lost, and rxe asks for the whole READ again
// (beside two CPU hogs, PSNs 16-39 arrived before 0-15 in 9 runs of
// 60 of TestLargeReadsPaceAfterALoss). The batch's
// leaving lets the pacer go on.
func TestPacedReadAnswersWaitForTheBatchHoldingTheFirst(t *testing.T) {
	bench := newRequesterBench(t)
	qp, d := bench.qp, bench.qp.dev
	const packets = 64
	mr, err := qp.pd.RegMR(make([]byte, packets*1024), AccessRemoteRead)
	require.NoError(t, err)
	qp.mu.Lock()
	qp.resp.pace.rate = maxPacedReadRate / 2 // paced after a loss, as TestLargeReadsPaceAfterALoss's READs are
	qp.resp.pace.gainAt = math.MaxInt64 / 2  // and not raised past pacing by this READ
	// Its bucket full, as a QP's is after a moment idle: it filled from
	// the device's opening, and the time since then is not the test's.
	qp.resp.pace.pace.fill(d.now(), readBurst)
	qp.mu.Unlock()

	rx := &rxBatch{out: d.getBatch()}
	bench.deliver(t, wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: benchRQPSN},
		RETH: wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: packets * 1024}}, rx)
	require.Equal(t, readBurst, len(rx.out.pkts), "the first burst of answers, in the receive batch")

	// The pacer's timer, a second later (the device's own may fire too):
	// the pace allows the rest by then.
	later := d.now() + int64(time.Second)
	pace := func(now int64) {
		qp.mu.Lock()
		defer qp.mu.Unlock()
		b := d.getBatch()
		qp.resp.onReadTimer(qp, now, b)
		d.transmit(b)
		d.putBatch(b)
	}
	pace(later)
	assert.Empty(t, psns(bench.sink.take()), "answers sent while the receive batch held the first ones")
	// The device's timer, run while held, leaves the pacer to the
	// batch's release: with its deadline passed, it would fire again at
	// once, over and over, until the batch left.
	qp.onTimer()
	assert.Empty(t, psns(bench.sink.take()), "answers the device's timer sent while the batch held the first ones")
	assert.Zero(t, qp.timerAt.Load(), "the QP's timer, armed while held (nothing else is due)")

	d.settle(rx, false) // the batch leaves
	for i := range packets {
		pace(later + int64(i+1)*int64(time.Second))
	}
	sent := bench.sink.take()
	assert.Equal(t, psnRange(benchRQPSN, packets), psns(sent), "the answers' PSNs, in the order they left")
}

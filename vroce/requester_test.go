package vroce

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// requesterBench is an RC QP in RTS whose peer is a sinkProvider's void,
// driven under its lock at times the test sets: t0 is far in the device's
// future, so the device's own timer never fires during a test, and the
// scheduler allowance is pinned at 0.
type requesterBench struct {
	qp   *QP
	sink *sinkProvider
	mr   *MR
}

const (
	benchSQPSN = 0xfffff8 // every test crosses the 24-bit wrap
	benchRQPSN = 1        // the PSN the QP expects first from its peer
	t0         = int64(1000e9)
)

// benchPeer is where the bench QP's peer would be.
var benchPeer = netip.MustParseAddrPort("127.0.0.2:4791")

func newRequesterBench(t *testing.T) *requesterBench {
	t.Helper()
	return newBench(t, false)
}

// newBench is newRequesterBench, its QP reading piggybacked ACKs when
// piggyback is set (as if negotiated with a vRoCE peer).
func newBench(t *testing.T, piggyback bool) *requesterBench {
	t.Helper()
	sink := &sinkProvider{done: make(chan struct{})}
	qp, _, mr := rtsQP(t, sink, MTU1024, piggyback)
	d := qp.dev
	qp.mu.Lock()
	defer qp.mu.Unlock()
	d.sched.at.Store(t0)
	d.sched.p99.Store(0)
	// A window of 16, out of slow start, on a 100 us path.
	qp.req.cc.cwnd, qp.req.cc.slowStart = 16, false
	qp.req.rec.rtt = rttEstimator{}
	qp.req.rec.sample(100_000)
	qp.req.rec.freshSample = false
	return &requesterBench{qp: qp, sink: sink, mr: mr}
}

// rtsQP opens a device on p and brings an RC QP on it to RTS towards
// benchPeer (selective repeat, the given path MTU, piggybacked ACKs read
// when piggyback is set), with a 1 MiB MR and one CQ for both queues.
func rtsQP(tb testing.TB, p Provider, mtu MTU, piggyback bool) (*QP, *CQ, *MR) {
	tb.Helper()
	d, err := OpenWithProvider(p, Config{})
	require.NoError(tb, err)
	tb.Cleanup(func() { d.Close() })
	return rtsQPOn(tb, d, mtu, piggyback)
}

// rtsQPOn is rtsQP on a device already open.
func rtsQPOn(tb testing.TB, d *Device, mtu MTU, piggyback bool) (*QP, *CQ, *MR) {
	tb.Helper()
	pd, err := d.AllocPD()
	require.NoError(tb, err)
	cq, err := d.CreateCQ(1024)
	require.NoError(tb, err)
	mr, err := pd.RegMR(make([]byte, 1<<20), AccessLocalWrite)
	require.NoError(tb, err)
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(tb, err)
	for _, s := range []struct {
		a QPAttr
		m QPAttrMask
	}{
		{QPAttr{State: QPSInit, AccessFlags: accessAll}, QPAttrState | QPAttrAccessFlags},
		{QPAttr{State: QPSRTR, Dest: benchPeer, PathMTU: mtu, DestQPN: 0x42, RQPSN: benchRQPSN, MaxDestRdAtomic: 1, MinRNRTimer: 1, SelectiveRepeat: true, PiggybackACK: piggyback},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer | QPAttrSelectiveRepeat | QPAttrPiggybackACK},
		{QPAttr{State: QPSRTS, SQPSN: benchSQPSN, Timeout: 20, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
	} {
		require.NoError(tb, qp.Modify(&s.a, s.m))
	}
	return qp, cq, mr
}

// write posts an RDMA WRITE of n bytes and pumps at now.
func (rb *requesterBench) write(t *testing.T, n int, now int64) {
	t.Helper()
	qp := rb.qp
	qp.mu.Lock()
	defer qp.mu.Unlock()
	wr := SendWR{ID: uint64(qp.sq.tail), Opcode: WRRDMAWrite, Flags: SendSignaled, SGL: []SGE{rb.mr.SGE(0, n)}, RemoteAddr: 0x1000, RKey: 7}
	require.NoError(t, qp.postOne(&wr))
	qp.kickAt(now)
}

// deliver hands p, from the peer to the bench QP, to the device as a
// packet of the receive batch rx.
func (rb *requesterBench) deliver(t *testing.T, p wire.Packet, rx *rxBatch) {
	t.Helper()
	d := rb.qp.dev
	p.BTH.PKey, p.BTH.DestQP = wire.DefaultPKey, rb.qp.QPN()
	b := make([]byte, wire.Len(p.BTH.Opcode, len(p.Payload))+wire.PiggyACKLen)
	n, err := p.Encode(b)
	require.NoError(t, err)
	require.True(t, (wire.Flow{Src: benchPeer, Dst: d.local}).Seal(b[:n]))
	if rx.now == 0 {
		rx.now = d.now() // a batch that arrives now, as handleBatch says
	}
	d.receive(&Packet{Data: b[:n], Addr: benchPeer}, rx)
}

// ack hands the completer an ack at now.
func (rb *requesterBench) ack(a ack, now int64) {
	rb.qp.mu.Lock()
	defer rb.qp.mu.Unlock()
	rb.qp.req.onAck(rb.qp, a, now)
}

// timer runs the requester's timers at now.
func (rb *requesterBench) timer(now int64) {
	qp := rb.qp
	qp.mu.Lock()
	defer qp.mu.Unlock()
	b := qp.dev.getBatch()
	qp.req.onTimer(qp, now, b)
	qp.dev.transmit(b)
	qp.dev.putBatch(b)
}

func psns(pkts []wire.Packet) []uint32 {
	out := make([]uint32, len(pkts))
	for i := range pkts {
		out[i] = pkts[i].BTH.PSN
	}
	return out
}

func psnRange(first uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = psnAdd(first, i)
	}
	return out
}

func ackThrough(psn uint32, sack ...wire.SACKBlock) ack {
	a := ack{psn: psn, aeth: wire.AETH{Syndrome: wire.AckSyndromeNoCredits}}
	if len(sack) > 0 {
		var s wire.SACK
		for _, b := range sack {
			s.AppendBlock(b.First, b.Count)
		}
		a.sack = make([]byte, s.Len())
		s.Encode(a.sack)
	}
	return a
}

// The requester sends a window's worth of a long WRITE, asking for an ACK
// four times a window, and arms the probe and the RTO from the send.
func TestRequesterSendsAWindowAndArmsItsDeadlines(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 64<<10, t0)
	sent := rb.sink.take()
	require.Equal(t, psnRange(benchSQPSN, 16), psns(sent), "a window of 16 of the 64 packets")
	for i, p := range sent {
		assert.Equal(t, i%4 == 3, p.BTH.AckReq, "packet %d: an ACK asked for every fourth", i)
	}
	assert.Equal(t, wire.RCWriteFirst, sent[0].BTH.Opcode)
	assert.Equal(t, uint32(64<<10), sent[0].RETH.DMALen)

	r := &rb.qp.req
	assert.Equal(t, 16, r.sb.inFlight())
	assert.Equal(t, t0+minRTO, r.rec.rtoAt, "SRTT + 4 RTTVAR is under the 5 ms floor")
	assert.Equal(t, t0+quietProbeFloor, r.rec.probeAt, "a clean path probes after 1 ms")
}

// A request small enough that a peer reading piggybacked ACKs may hold
// its ACK for the answer (responder.mayHoldAck) probes only once the hold
// has passed, and times out later still, so that the probe can wait the
// hold out; a larger flight, or a peer that holds nothing (no
// piggybacked ACKs: rdma_rxe), probes after the quiet floor and times
// out at minRTO as before, and a path that lost packets lately probes
// fast and times out at minRTO whatever the flight.
func TestAProbeWaitsOutTheACKAPeerMayHold(t *testing.T) {
	for _, c := range []struct {
		piggyback          bool
		size               int
		wantProbe, wantRTO int64
	}{
		{true, 2 << 10, t0 + heldAckProbeFloor, t0 + heldAckRTO}, // two packets: the peer may hold
		{true, 3 << 10, t0 + quietProbeFloor, t0 + minRTO},       // three: it never holds
		{false, 1 << 10, t0 + quietProbeFloor, t0 + minRTO},      // no piggybacked ACKs: nothing held
	} {
		rb := newBench(t, c.piggyback)
		rb.write(t, c.size, t0)
		r := &rb.qp.req
		assert.Equal(t, c.size>>10, r.sb.inFlight())
		assert.Equal(t, c.wantProbe, r.rec.probeAt, "piggybacked ACKs %v, %d bytes in flight", c.piggyback, c.size)
		assert.Equal(t, c.wantRTO, r.rec.rtoAt, "piggybacked ACKs %v, %d bytes in flight", c.piggyback, c.size)
		assert.Less(t, r.rec.probeAt, r.rec.rtoAt, "the probe comes ahead of the RTO")
	}
	// A path that lost a packet lately keeps its fast probe, hold or not.
	rb := newBench(t, true)
	rb.qp.req.rec.lossProven(t0)
	rb.write(t, 1<<10, t0)
	assert.Equal(t, t0+100_000+4*50_000+rttNoise, rb.qp.req.rec.probeAt, "SRTT + 4 RTTVAR on a 100 us path")
	assert.Equal(t, t0+minRTO, rb.qp.req.rec.rtoAt, "and its RTO the floor of any flight")
}

// With no answer the probe fires a PTO after the send and resends the
// oldest unconfirmed PSN; the RTO fires next and backs off, and a second
// one presumes everything in flight lost and collapses the window. The
// resends are not held to the window (they are in flight already), only
// to the pacer, whose burst lets these 16 go at once.
func TestRequesterTimersProbeThenTimeOut(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 16<<10, t0)
	rb.sink.take()
	r := &rb.qp.req

	rb.timer(t0 + quietProbeFloor - 1)
	assert.Empty(t, rb.sink.take(), "before the probe's deadline")
	rb.timer(t0 + quietProbeFloor)
	assert.Equal(t, []uint32{benchSQPSN}, psns(rb.sink.take()), "the probe resends the oldest")
	assert.Equal(t, uint64(1), rb.qp.Stats().TailProbes)

	rb.timer(t0 + minRTO)
	assert.Equal(t, []uint32{benchSQPSN}, psns(rb.sink.take()), "the first timeout resends the oldest again")
	assert.Equal(t, 1, r.rec.backoff)
	rto := r.rec.rtoAt
	assert.Equal(t, t0+minRTO+2*minRTO, rto, "backed off: twice the RTO")

	rb.timer(rto)
	assert.Equal(t, psnRange(benchSQPSN, 16), psns(rb.sink.take()), "everything in flight, again")
	assert.Equal(t, float64(minWindow), r.cc.cwnd)
	assert.True(t, r.cc.slowStart)
	assert.Equal(t, 0, r.sb.lostCount)
	assert.Equal(t, uint64(2), rb.qp.Stats().Timeouts)
	assert.Equal(t, 2, r.rec.backoff)
}

// collapseAfterAStall sends a flight of n 1 KiB packets in a window of
// n, lets no ACK come until the second timeout collapses the window, and
// returns when that timeout fired; the collapse resends what its pacer
// lets go at once (a burst).
func collapseAfterAStall(t *testing.T, rb *requesterBench, n int) (at int64) {
	t.Helper()
	r := &rb.qp.req
	rb.qp.mu.Lock()
	r.cc.cwnd = float64(n)
	rb.qp.mu.Unlock()
	rb.write(t, n<<10, t0)
	require.Equal(t, psnRange(benchSQPSN, n), psns(rb.sink.take()))
	rb.timer(t0 + quietProbeFloor)
	rb.timer(t0 + minRTO)
	rb.sink.take()
	at = r.rec.rtoAt
	rb.timer(at)
	resent := psns(rb.sink.take())
	require.Equal(t, psnRange(benchSQPSN, len(resent)), resent, "the collapse resends from the oldest")
	require.LessOrEqual(t, len(resent), paceBurst+1, "a burst: the pacer holds the rest")
	require.Equal(t, float64(minWindow), r.cc.cwnd)
	require.Equal(t, uint64(2), rb.qp.Stats().Timeouts)
	return at
}

// A receiver that stalls through two timeouts, then reads the whole
// flight from its socket, sends its first ACK after a batch of it: that
// ACK covers PSNs the collapse had not sent again yet, so their first
// copies arrived, the timeout was spurious, and the window it collapsed
// comes back (F-RTO's proof; too late after the resends for Eifel's).
func TestAStallsCollapseIsUndoneWhenTheFlightHadArrived(t *testing.T) {
	rb := newRequesterBench(t)
	at := collapseAfterAStall(t, rb, 64)
	r := &rb.qp.req

	rb.ack(ackThrough(psnAdd(benchSQPSN, 40)), at+200_000)
	assert.Equal(t, uint64(1), rb.qp.Stats().SpuriousTimeouts)
	assert.GreaterOrEqual(t, r.cc.cwnd, 64.0, "the window before the collapse")
	assert.False(t, r.cc.slowStart)
	assert.Zero(t, r.rec.backoff)
	assert.True(t, r.cc.timeoutJudged())
}

// When the first ACK after the stall covers only resent PSNs it decides
// nothing: the window it opens sends the rest again, and the receiver,
// still reading its backlog, acknowledges them sooner than they could
// have arrived (Eifel's proof).
func TestAStallsCollapseWaitsForAProof(t *testing.T) {
	rb := newRequesterBench(t)
	at := collapseAfterAStall(t, rb, 64)
	r := &rb.qp.req

	rb.ack(ackThrough(psnAdd(benchSQPSN, paceBurst-2)), at+200_000)
	assert.Zero(t, rb.qp.Stats().SpuriousTimeouts, "an ACK of resent PSNs alone")
	assert.False(t, r.cc.timeoutJudged(), "still open to proof")
	assert.NotEmpty(t, rb.sink.take(), "the rest sent again")

	rb.ack(ackThrough(psnAdd(benchSQPSN, 63)), at+210_000)
	assert.Equal(t, uint64(1), rb.qp.Stats().SpuriousTimeouts)
	assert.GreaterOrEqual(t, r.cc.cwnd, 64.0)
}

// Only PSNs of the collapsed flight prove it arrived: one sent after the
// collapse and delivered while queued to be resent (a reordering taken
// for a loss) says nothing of it.
func TestOnlyTheCollapsedFlightProvesTheCollapseSpurious(t *testing.T) {
	for _, c := range []struct {
		name     string
		beyond   int // how far past the collapsed flight the arrived PSN is
		spurious bool
	}{{"a PSN of the flight", 0, true}, {"a PSN sent after it", 3, false}} {
		t.Run(c.name, func(t *testing.T) {
			rb := newRequesterBench(t)
			at := collapseAfterAStall(t, rb, paceBurst)
			r := &rb.qp.req
			rb.qp.mu.Lock()
			last := psnAdd(r.rec.collapsedThrough, c.beyond)
			r.judgeTimeout(rb.qp, last, ackResult{lostArrived: true, firstLostArrived: last}, at+200_000)
			rb.qp.mu.Unlock()
			assert.True(t, r.cc.timeoutJudged())
			if c.spurious {
				assert.Equal(t, uint64(1), rb.qp.Stats().SpuriousTimeouts)
				assert.GreaterOrEqual(t, r.cc.cwnd, float64(paceBurst))
			} else {
				assert.Zero(t, rb.qp.Stats().SpuriousTimeouts)
				assert.Equal(t, float64(minWindow), r.cc.cwnd)
			}
		})
	}
}

// The control: a flight the path did lose is resent whole before an ACK
// passes it, and that ACK keeps the collapse.
func TestACollapseStandsWhenTheFlightWasResent(t *testing.T) {
	rb := newRequesterBench(t)
	at := collapseAfterAStall(t, rb, paceBurst) // all of it resent at once
	r := &rb.qp.req

	rb.ack(ackThrough(psnAdd(benchSQPSN, paceBurst-1)), at+200_000)
	assert.Zero(t, rb.qp.Stats().SpuriousTimeouts)
	assert.True(t, r.cc.timeoutJudged(), "passing the collapsed flight judges it")
	assert.Less(t, r.cc.cwnd, float64(paceBurst), "still regrowing from the collapse")
}

// A SACK before the collapse already said the PSNs after a lost head
// had arrived; the collapse queues them again (the responder may have
// dropped what it held), and an ACK covering them is no news of the
// timeout.
func TestPSNsSACKedBeforeACollapseProveNothing(t *testing.T) {
	rb := newRequesterBench(t)
	r := &rb.qp.req
	rb.qp.mu.Lock()
	r.cc.cwnd = 64
	rb.qp.mu.Unlock()
	rb.write(t, 64<<10, t0)
	rb.sink.take()
	// Everything but the head arrived; the head's copies are all lost.
	rb.ack(ackThrough(psnAdd(benchSQPSN, -1), wire.SACKBlock{First: psnAdd(benchSQPSN, 1), Count: 63}), t0+100_000)
	for i := 0; i < 100 && r.cc.timeoutJudged(); i++ { // probes (of the head), then two timeouts
		rb.timer(r.rec.lossDetectionTimeout())
	}
	require.False(t, r.cc.timeoutJudged(), "collapsed")
	rb.sink.take()
	rb.ack(ackThrough(psnAdd(benchSQPSN, 63)), r.rec.lossDetectionTimeout())
	assert.Zero(t, rb.qp.Stats().SpuriousTimeouts)
	assert.True(t, r.cc.timeoutJudged())
}

// deferState is a requester with a window of 200 packets, 1 KiB
// packets, and messages of 64 packets posted: the first being sent.
type deferState struct {
	r *requester
	q *sendQueue
}

func newDeferState(inFlight, queuedMessages int) deferState {
	s := deferState{r: &requester{}, q: &sendQueue{ring: make([]sendWQE, 8)}}
	s.r.cc.init()
	s.r.cc.cwnd = 200
	s.r.sb.start(1000)
	for i := range inFlight {
		s.r.sb.sent(psnAdd(1000, i), 0, false)
	}
	s.r.nextPSN = psnAdd(1000, inFlight)
	for i := range queuedMessages {
		w := s.q.slot(uint64(i))
		w.op, w.length = WRRDMAWrite, 64<<10
		if i == 0 {
			w.assigned, w.psn, w.npsn = true, 1000, inFlight+8 // 8 packets of it left to send
		}
	}
	s.q.tail = uint64(queuedMessages)
	return s
}

func (s deferState) defersSend(mtu int) bool { return s.r.defersSend(s.q, mtu) }

// A window-limited sender waits until a burst's worth of the window is
// open, while what is queued would fill one; otherwise it sends at once.
func TestSendDefersUntilABurstFits(t *testing.T) {
	const mtu = 1024
	assert.True(t, newDeferState(195, 2).defersSend(mtu), "5 packets of room, 72 queued: wait for the ACKs on their way")
	assert.False(t, newDeferState(200-sendBurst, 2).defersSend(mtu), "a burst of room: send")
	assert.False(t, newDeferState(195, 1).defersSend(mtu), "only 8 packets queued: send them now, nothing would fill a burst")
	assert.False(t, newDeferState(0, 2).defersSend(mtu), "nothing in flight: no ACK is coming to wake the sender")

	small := newDeferState(3, 2)
	small.r.cc.cwnd = 4 // a burst would be a whole window
	assert.False(t, small.defersSend(mtu), "a tiny window sends packet by packet")
}

// A resent READ request asks again only for responses of PSNs already
// requested. Sized by the window as it is now, a probe's resend of the
// first PSN of a READ sent under a window of 4, after the window grew to
// 100, asked for 64 responses: PSNs never requested were taken for
// resends, the sender's next PSN fell behind, and once the responses
// came the requester sent below sndUna (an index out of range on its
// emptied scoreboard, seen twice in the race suite).
func TestReadResendAsksOnlyForWhatWasRequested(t *testing.T) {
	rb := newRequesterBench(t)
	qp := rb.qp
	qp.mu.Lock()
	qp.req.cc.cwnd = 4
	wr := SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{rb.mr.SGE(0, 128<<10)}, RemoteAddr: 0x1000, RKey: 7}
	require.NoError(t, qp.postOne(&wr))
	qp.kickAt(t0)
	qp.req.cc.cwnd = 100 // grown since, by other traffic's ACKs
	qp.mu.Unlock()

	type request struct {
		psn     uint32
		packets uint32
	}
	requests := func() []request {
		var out []request
		for _, p := range rb.sink.take() {
			require.Equal(t, wire.RCReadRequest, p.BTH.Opcode)
			out = append(out, request{p.BTH.PSN, p.RETH.DMALen / 1024})
		}
		return out
	}
	assert.Equal(t, []request{{benchSQPSN, 4}}, requests(), "a window of 4")

	rb.timer(t0 + quietProbeFloor) // the probe resends the oldest, then the window opens
	assert.Equal(t, []request{
		{benchSQPSN, 4},              // the probe: the four requested
		{psnAdd(benchSQPSN, 4), 60},  // new: the rest of the first chunk
		{psnAdd(benchSQPSN, 64), 36}, // and of the window
	}, requests())
	r := &qp.req
	assert.Equal(t, psnAdd(benchSQPSN, 100), r.sb.sndMax)
	assert.Equal(t, psnAdd(benchSQPSN, 100), r.nextPSN)
	assert.Equal(t, uint64(1), qp.Stats().Retransmits)
}

// The retry_cnt clock starts when a packet leaves, not when its work
// request is given PSNs: time spent waiting for the peer budget (or the
// window, or the pacer) is not time without an answer. A QP that waited
// longer than retry_cnt timeouts for its turn failed at once with
// WCRetryExcErr once it sent (seen under load in
// TestAQPJoiningBusyOnesGetsItsTurn).
func TestRetryClockStartsWhenThePacketLeaves(t *testing.T) {
	rb := newRequesterBench(t)
	qp := rb.qp
	r := &qp.req
	qp.mu.Lock()
	limit := peerLimit(qp.mtu)
	r.peer.charged.Store(limit) // another QP holds the whole budget
	qp.mu.Unlock()
	rb.write(t, 4096, t0)
	require.Empty(t, rb.sink.take(), "the budget is spent: nothing leaves")

	const waited = 100e9 // far longer than retry_cnt + 1 timeouts
	qp.mu.Lock()
	r.peer.charged.Store(0)
	r.peerTicket.Store(0)
	qp.kickAt(t0 + waited)
	failAt := r.failAt(qp)
	qp.mu.Unlock()
	require.Len(t, rb.sink.take(), 4, "the budget given back: the WRITE leaves")
	assert.Equal(t, t0+waited+qp.ackTimeout()*8, failAt, "retry_cnt 7: eight timeouts from the send")
	rb.timer(t0 + waited + 1)
	assert.Equal(t, QPSRTS, qp.State(), "no timeout has passed since the send")
}

// The window bounds the pipe, not the span from sndUna: a hole at sndUna,
// whose resend takes an RTT, does not stop new packets while the
// responder holds what followed it; the span stops at four windows.
func TestWindowCountsThePipeNotTheSpan(t *testing.T) {
	const mtu = 1024
	s := newDeferState(32, 2)
	s.r.cc.cwnd = 32
	assert.Equal(t, 0, s.r.room(s.r.nextPSN, mtu), "32 packets in the network fill a window of 32")
	s.r.sb.onSACK(sackOf(wire.SACKBlock{First: 1001, Count: 31}), 1_000_000, 0, func(int64) {})
	assert.Equal(t, 31, s.r.room(s.r.nextPSN, mtu), "1000 is missing; the 31 held after it left the network")
	for i := range 95 {
		s.r.sb.sent(psnAdd(1032, i), 2_000_000, false)
	}
	s.r.nextPSN = psnAdd(1032, 95)
	s.r.sb.onSACK(sackOf(wire.SACKBlock{First: 1001, Count: 126}), 3_000_000, 0, func(int64) {})
	assert.Equal(t, 1, s.r.room(s.r.nextPSN, mtu), "the span reaches four windows (128) before the pipe fills")
}

// The sends an ACK clocks out join the receive batch that brought it and
// leave when the batch ends, with its ACKs and other QPs' sends, in one
// provider call. A pump on another goroutine meanwhile waits for the
// batch, or its packets would leave before the held ones.
func TestSendsClockedByAReceiveBatchLeaveWithIt(t *testing.T) {
	rb := newRequesterBench(t)
	qp, d := rb.qp, rb.qp.dev
	rb.write(t, 32<<10, t0) // 32 packets, a window of 16
	require.Equal(t, psnRange(benchSQPSN, 16), psns(rb.sink.take()))

	rxb := &rxBatch{out: d.getBatch()}
	qp.mu.Lock()
	qp.rx = rxb
	qp.req.onAck(qp, ackThrough(psnAdd(benchSQPSN, 7)), t0+100_000)
	qp.rx = nil
	qp.mu.Unlock()
	assert.Empty(t, rb.sink.take(), "the eight sends the ACK allowed wait in the batch")
	require.Len(t, rxb.out.pkts, 8)
	for _, p := range rxb.out.pkts {
		// They leave after the QP's lock is let go, when the work
		// request may be complete and its memory the program's again.
		assert.Empty(t, p.Body, "a packet waiting in the batch carries a copy of its payload, not a loan")
	}

	qp.mu.Lock()
	qp.req.cc.cwnd = 64 // room for everything: the post below could send at once
	qp.mu.Unlock()
	rb.write(t, 1024, t0+100_000) // another goroutine posts, and pumps
	assert.Empty(t, rb.sink.take(), "its pump waits for the batch")

	d.settle(rxb, false)
	d.putBatch(rxb.out)
	assert.Equal(t, psnRange(psnAdd(benchSQPSN, 16), 17), psns(rb.sink.take()),
		"the batch's sends, then the rest of the first WRITE and the second, in PSN order")
}

// TestAStalledTimerRetriesBeforeGivingUp: a timer that first runs after
// the whole retry budget has passed (the host did not run it: a VM's
// stolen time, a stall) sends a probe and gives the path a local ACK
// timeout more before the QP fails; only then does the work request
// complete with WCRetryExcErr.
func TestAStalledTimerRetriesBeforeGivingUp(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 1024, t0)
	require.Len(t, rb.sink.take(), 1)
	timeout := rb.qp.ackTimeout()
	stalled := t0 + 9*timeout // past retry_cnt 7 + 1 timeouts, the timer's first run

	rb.timer(stalled)
	assert.Equal(t, []uint32{benchSQPSN}, psns(rb.sink.take()), "the probe")
	assert.Equal(t, QPSRTS, rb.qp.State(), "not given up at the first run")

	rb.timer(stalled + timeout - 1)
	assert.Equal(t, QPSRTS, rb.qp.State(), "within a local ACK timeout of the probe")

	rb.timer(stalled + timeout)
	assert.Equal(t, QPSErr, rb.qp.State(), "given up a local ACK timeout after the probe")
	s := rb.qp.Stats()
	assert.GreaterOrEqual(t, s.Retransmits, uint64(1))
}

// TestTimersWaitOutAStuckSend: while a send of this device's has not
// returned for over sendStallMin (the kernel stalled copying it, or a
// full socket or ring), a passed RTO or probe is held, not acted on: the
// packet it would resend may not have left. The positive control: once
// the send returns, the deadline acts and resends the packet.
func TestTimersWaitOutAStuckSend(t *testing.T) {
	rb := newRequesterBench(t)
	rb.write(t, 1024, t0)
	require.Len(t, rb.sink.take(), 1)
	rb.qp.mu.Lock()
	rto := rb.qp.req.rec.armedRTO
	rb.qp.mu.Unlock()
	require.NotZero(t, rto)
	stuck := &rb.qp.dev.sending
	stuck.begin(t0) // a send since t0 that has not returned

	for i, at := range []int64{t0 + 2*rto, t0 + 4*rto} {
		rb.timer(at)
		assert.Empty(t, rb.sink.take(), "nothing resent while the send is stuck (run %d)", i)
		s := rb.qp.Stats()
		assert.Zero(t, s.Timeouts+s.TailProbes+s.Retransmits)
		assert.Equal(t, uint64(i+1), s.SendStallHolds)
	}
	stuck.end(t0 + 4*rto)
	rb.timer(t0 + 8*rto)
	assert.Equal(t, []uint32{benchSQPSN}, psns(rb.sink.take()), "resent once the send returned")
	s := rb.qp.Stats()
	assert.Equal(t, uint64(1), s.Timeouts)
	assert.Equal(t, uint64(1), s.Retransmits)
}

// The congestion controller hears each RTT sample once: an ACK that
// brings none (here, one covering only a resent PSN: Karn) leaves the
// standing RTT as the samples made it, not fed the last one again in an
// RTT it was not measured in.
func TestTheControllerHearsEachSampleOnce(t *testing.T) {
	rb := newRequesterBench(t)
	r := &rb.qp.req
	rb.write(t, 1024, t0)
	rb.sink.take()
	rb.ack(ackThrough(benchSQPSN), t0+60_000)
	want := standingRTT{start: t0 + 60_000, cur: 60_000}
	require.Equal(t, want, r.cc.standing, "the bench's 100 us sample and the ACK's 60 us: the least")

	rb.write(t, 1024, t0+1_000_000)
	rb.sink.take()
	rb.timer(r.rec.probeAt)
	require.Equal(t, []uint32{psnAdd(benchSQPSN, 1)}, psns(rb.sink.take()), "probed")
	rb.ack(ackThrough(psnAdd(benchSQPSN, 1)), r.rec.rtt.SRTT*10+t0+1_000_000)
	assert.Equal(t, want, r.cc.standing, "an ACK of a resend alone adds nothing")
	assert.Zero(t, r.rec.takeSample())
}

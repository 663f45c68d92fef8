package vroce

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/internal/secrand"
	"vroce.dev/vroce/wire"
)

// QPType is a queue pair's transport service.
type QPType uint8

// QP types.
const (
	RC QPType = iota + 1 // reliable connected
	UD                   // unreliable datagram
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair's state (ibv_qp_state).
type QPState uint8

// QP states.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPCap sizes a QP's queues (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // receives come from the SRQ; MaxRecvWR must be 0
	Cap    QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
}

// QP is a queue pair (ibv_qp). All of its state is guarded by mu; the
// device's receive and timer goroutines and the application's posting
// goroutines meet here. Requests are built and sent under mu so that they
// leave in PSN order.
type QP struct {
	dev    *Device
	pd     *PD
	typ    QPType
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	cap    QPCap
	sigAll bool

	mu    sync.Mutex
	state QPState
	attr  QPAttr
	flow  wire.Flow // RC: this device to the peer
	// RC: the ICRC of packets to and from the peer, with the headers'
	// CRC kept per packet size (under mu).
	txSeal, rxSeal wire.Sealer
	mtu            int // RC path MTU, UD active MTU
	rq             recvRing
	sq             sendQueue // the posted send work requests, RC's and UD's
	req            requester // RC's send side
	udPSN          uint32    // UD: the PSN of the next datagram
	resp           responder
	stats          QPStats
	// queuedEvents counts the device's undelivered async events about
	// this QP (guarded by the device's events.mu, not mu).
	queuedEvents int

	// Sends that the ACKs of a receive batch clock out join the batch's
	// own (its ACKs, other QPs' sends), leaving in one provider call when
	// it ends, not one call per QP per ACK (32 QPs over veth sent 1.25
	// packets a system call). Under mu: rx is the receive batch whose
	// packet the QP is handling, while receive runs; txHeld the batch
	// holding packets of ours not yet sent, until it is; kickOwed that a
	// pump on another goroutine waited for it, since its packets would
	// have overtaken ours (Device.releaseHeld runs it).
	rx       *rxBatch
	txHeld   *txBatch
	kickOwed bool

	// timerAt is the deadline of the QP's entry in the device's timer
	// queue (0: none); written under the queue's lock, read without it
	// by unschedule's first look. wakeOwed: another goroutine woke the QP
	// (Device.wake), and its entry must stand until the timer runs it.
	timerAt  atomic.Int64
	wakeOwed atomic.Bool
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	d := pd.dev
	const op = "create QP"
	if init.Type != RC && init.Type != UD {
		return nil, invalidf("%s: QP type %v is not RC or UD", op, init.Type)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, invalidf("%s: send and receive CQs are required", op)
	}
	c := init.Cap
	if c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, invalidf("%s: negative capability in %+v", op, c)
	}
	for _, l := range []struct {
		name       string
		value, max int
	}{
		{"max_send_wr", c.MaxSendWR, d.attr.MaxQPWR},
		{"max_recv_wr", c.MaxRecvWR, d.attr.MaxQPWR},
		{"max_send_sge", c.MaxSendSGE, d.attr.MaxSendSGE},
		{"max_recv_sge", c.MaxRecvSGE, d.attr.MaxRecvSGE},
		{"max_inline_data", c.MaxInlineData, d.attr.MaxInline},
	} {
		if err := checkLimit(op, l.name, l.value, l.max); err != nil {
			return nil, err
		}
	}
	if init.SRQ != nil && c.MaxRecvWR != 0 {
		return nil, invalidf("%s: max_recv_wr must be 0 with an SRQ", op)
	}
	if init.SRQ != nil && init.SRQ.pd != pd {
		return nil, invalidf("%s: the SRQ belongs to another PD", op)
	}
	if err := pd.use(); err != nil {
		return nil, err
	}
	if err := d.reserve(op, "max_qp", &d.count.qp, d.attr.MaxQP); err != nil {
		pd.refs.Add(-1)
		return nil, err
	}
	qp := &QP{
		dev: d, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, cap: c, sigAll: init.SigAll,
		rq: recvRing{max: c.MaxRecvWR},
	}
	undo := func() {
		d.release(&d.count.qp)
		pd.refs.Add(-1)
	}
	if err := qp.sendCQ.attach(); err != nil {
		undo()
		return nil, err
	}
	if err := qp.recvCQ.attach(); err != nil {
		qp.sendCQ.detach()
		undo()
		return nil, err
	}
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users++
		qp.srq.mu.Unlock()
	}
	qp.sq.init(c.MaxSendWR)
	qp.req.init()
	d.qpTable.insert(qp, func() bool {
		// QPN 0 and 1 are the special QPs; the rest are random, so a
		// stranger cannot guess them.
		qp.qpn = secrand.Uint32() & 0xffffff
		return qp.qpn > 1
	})
	return qp, nil
}

// Device is the device the QP belongs to.
func (qp *QP) Device() *Device { return qp.dev }

// QPN is the queue pair number peers address.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type is the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// State is the QP's current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Attr returns the QP's current attributes.
func (qp *QP) Attr() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State = qp.state
	return a
}

// Stats returns the QP's counters.
func (qp *QP) Stats() QPStats {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	s := qp.stats
	s.CWnd = qp.req.window()
	s.HeldBytes = qp.resp.heldBytes
	s.ReadPace = int(qp.resp.pace.rate)
	s.SRTT, s.MinRTT = time.Duration(qp.req.rec.rtt.SRTT), time.Duration(qp.req.rec.rtt.MinRTT)
	// The floor a packet sent now would be timed by (the flight it
	// joins, the path's recent losses), as lossRecovery.arm takes it.
	r := &qp.req
	_, floor := r.rec.floors(qp.dev.now(), r.peerMayHold(qp, r.sb.inFlight()+1))
	est := r.rec.estimate()
	s.RTO = time.Duration(est.rto(0, floor, qp.ackTimeout()))
	return s
}

// reset returns the QP to RESET: queues emptied without completions.
func (qp *QP) reset() {
	qp.rq = recvRing{max: qp.cap.MaxRecvWR}
	qp.req.leavePeer(qp)
	qp.sq.init(qp.cap.MaxSendWR)
	qp.req.init()
	qp.resp.reset(qp, 0, false)
	qp.attr = QPAttr{}
	qp.flow = wire.Flow{}
	qp.txSeal, qp.rxSeal = wire.Sealer{}, wire.Sealer{}
}

// lastAckLocked puts into out, under qp.mu, the ACK for the requests the
// responder executed, owed or not, as the QP leaves the connected states
// (to ERR, to RESET, or destroyed): their completions may have been acted
// on (a disconnect, whose DREQ would otherwise overtake the ACK owed to
// the end of the receive batch; a device's close, which would otherwise
// lose the ACK a receive batch has queued but not yet sent; a QP
// destroyed while it held its ACK for an answer), and a requester that
// never hears of them flushes or retries work the peer did. A hardware
// responder's ACK leaves before the completion is seen. An ACK the peer
// had already is a duplicate it ignores.
func (qp *QP) lastAckLocked(out *txBatch) {
	r := &qp.resp
	if qp.typ != RC || !r.ackPending && !r.acked || qp.state == QPSErr || qp.state == QPSReset {
		return
	}
	r.ackPending = true
	qp.sendOwedAckLocked(out)
}

// sendLastAckLocked sends the QP's last ACK (lastAckLocked) at once.
func (qp *QP) sendLastAckLocked() {
	b := qp.dev.getBatch()
	qp.lastAckLocked(b)
	qp.dev.transmit(b)
	qp.dev.putBatch(b)
}

// toErrorLocked moves the QP to ERR and flushes every outstanding work
// request with WCWRFlushErr; its last ACK leaves at once.
func (qp *QP) toErrorLocked() {
	b := qp.dev.getBatch()
	qp.toErrorInto(b)
	qp.dev.transmit(b)
	qp.dev.putBatch(b)
}

// toErrorInto is toErrorLocked with the last ACK put into out, for a
// caller that moves many QPs at once (Device.failQPs): their ACKs leave
// in batches, not a system call each.
func (qp *QP) toErrorInto(out *txBatch) {
	if qp.state == QPSErr {
		return
	}
	wasReset := qp.state == QPSReset
	qp.lastAckLocked(out)
	qp.state = QPSErr
	qp.req.flush(qp)
	qp.resp.release(qp)
	for {
		w, ok := qp.rq.pop()
		if !ok {
			break
		}
		qp.complete(qp.recvCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
	}
	if qp.srq != nil && !wasReset {
		qp.dev.events.push(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
}

// fail moves the QP to ERR after a transport error and reports it.
func (qp *QP) fail(ev EventType) {
	if qp.state == QPSErr {
		return
	}
	qp.toErrorLocked()
	qp.dev.events.push(AsyncEvent{Type: ev, QP: qp})
}

func (qp *QP) complete(cq *CQ, wc *WorkCompletion) { cq.push(wc) }

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work is discarded
// without completions, and so are the QP's async events not yet taken
// (AsyncEvent), as a CQ's and an SRQ's are when they are destroyed.
func (qp *QP) Destroy() error {
	d := qp.dev
	if !d.qpTable.delete(qp) {
		return ErrClosed
	}
	qp.mu.Lock()
	qp.sendLastAckLocked()
	qp.state = QPSReset
	qp.reset()
	qp.mu.Unlock()
	qp.sendCQ.detach()
	qp.recvCQ.detach()
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users--
		qp.srq.mu.Unlock()
	}
	d.events.drop(qp, func(ev AsyncEvent) bool { return ev.QP == qp })
	d.release(&d.count.qp)
	qp.pd.refs.Add(-1)
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv). On error the
// requests before the bad one are posted and the error names the bad one.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	if qp.srq != nil {
		return invalidf("post recv: QP %#x receives from an SRQ", qp.qpn)
	}
	for i := range wrs {
		w, err := resolveRecv(qp.dev, qp.pd, &wrs[i], qp.cap.MaxRecvSGE, "post recv")
		if err != nil {
			return fmt.Errorf("work request %d: %w", i, err)
		}
		qp.mu.Lock()
		switch {
		case qp.state == QPSReset:
			qp.mu.Unlock()
			return statef("post recv: QP %#x is in RESET", qp.qpn)
		case qp.state == QPSErr:
			qp.complete(qp.recvCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
		case !qp.rq.push(w):
			qp.mu.Unlock()
			return fmt.Errorf("vroce: post recv: work request %d: %d outstanding: %w", i, qp.rq.max, ErrQueueFull)
		}
		qp.mu.Unlock()
	}
	return nil
}

// popRecv takes the next receive WQE from the SRQ or the QP's own queue.
func (qp *QP) popRecv() (recvWQE, bool) {
	if qp.srq != nil {
		return qp.srq.pop()
	}
	return qp.rq.pop()
}

// receive handles one packet addressed to the QP, from src; raw is the
// packet's bytes, kept if it must wait for its turn.
func (qp *QP) receive(p *wire.Packet, raw []byte, src netip.AddrPort, rb *rxBatch) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	switch qp.state {
	case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
	default:
		return
	}
	if qp.typ == UD {
		if p.BTH.Opcode.IsUD() {
			qp.receiveUD(p, src)
		}
		return
	}
	if !p.BTH.Opcode.IsRC() {
		return
	}
	if !qp.fromPeer(src) {
		qp.stats.WrongSource++
		return
	}
	if p.BTH.PiggyACK && !qp.attr.PiggybackACK {
		// Not negotiated: the trailer Parse took off may be payload.
		qp.dev.stats.rxMalformed.Add(1)
		return
	}
	placed, ok := qp.checkICRC(p, raw)
	if !ok {
		qp.dev.stats.rxBadICRC.Add(1)
		return
	}
	qp.stats.RxPackets++
	qp.rx = rb
	defer func() { qp.rx = nil }()
	if p.BTH.Opcode.Flags()&wire.IsResponse != 0 {
		if qp.state != QPSRTR {
			qp.req.onResponse(qp, p, rb.now, placed)
		}
		return
	}
	if p.BTH.PiggyACK {
		qp.onPiggyACK(p, rb.now)
	}
	sent := qp.stats.TxPackets
	qp.resp.onRequest(qp, p, raw, rb, placed)
	qp.holdUntilSent(rb, sent) // a READ's first answers, say: the pacer's rest must not pass them
}

// fromPeer reports whether a packet from src may be the connected
// peer's: its address always, its device port only where the peer said
// it sends from there (StrictSourcePort). Otherwise the ICRC check is
// aimed at the port the peer chose, which stays the same for a flow.
func (qp *QP) fromPeer(src netip.AddrPort) bool {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	peer := qp.flow.Dst
	if qp.attr.StrictSourcePort || src.Addr() != peer.Addr() {
		return src == peer
	}
	if qp.rxSeal.Flow.Src.Port() != src.Port() {
		qp.rxSeal = wire.Sealer{Flow: wire.Flow{Src: src, Dst: qp.flow.Src}, UDPChecksum: qp.attr.UDPChecksum}
	}
	return true
}

// checkICRC checks an RC packet's ICRC: in full from a vRoCE peer,
// solving for the IPv4 ID from any other (see StrictSourcePort). The
// payload of the SEND or WRITE packet the responder waits for next, or
// of a READ response the requester awaits, goes into its place as the
// ICRC reads it (placed; responder.placeAhead, requester.placeAhead).
func (qp *QP) checkICRC(p *wire.Packet, raw []byte) (placed, ok bool) {
	unknownID := !qp.attr.StrictSourcePort
	if dst, ahead := qp.placeAhead(p); ahead {
		ok = qp.rxSeal.CheckCopy(raw, p.BTH.Opcode.HeaderLen(), dst, unknownID)
		return ok, ok
	}
	if unknownID {
		_, ok = qp.rxSeal.CheckUnknownID(raw)
		return false, ok
	}
	return false, qp.rxSeal.Check(raw)
}

// placeAhead is where p's payload goes, if the ICRC check may put it
// there: a response's is the requester's to say, a request's the
// responder's.
func (qp *QP) placeAhead(p *wire.Packet) ([]byte, bool) {
	if p.BTH.Opcode.Flags()&wire.IsResponse != 0 {
		return qp.req.placeAhead(qp, p)
	}
	return qp.resp.placeAhead(qp, p)
}

// onPiggyACK hands the completer the ACK that rode on a request, which
// arrived in the receive batch of time now.
func (qp *QP) onPiggyACK(p *wire.Packet, now int64) {
	if qp.state == QPSRTR { // the requester has not started
		return
	}
	qp.stats.PiggyACKsRecv++
	qp.req.onAck(qp, ack{psn: p.Piggy.PSN, aeth: p.Piggy.AETH}, now)
}

// pumpInto sends what the send queue can send now into the receive
// batch rb, under qp.mu; the batch sends it when it ends.
func (qp *QP) pumpInto(rb *rxBatch, now int64) {
	sent := qp.stats.TxPackets
	qp.req.pump(qp, rb.out, now)
	qp.holdUntilSent(rb, sent)
}

// holdUntilSent, when rb's batch has taken packets of the QP's since
// its TxPackets were sent, stops any other goroutine sending for the QP
// (a timer's pump, the READ pacer) until the batch has left: its
// packets would overtake ours. Device.releaseHeld lets it go.
func (qp *QP) holdUntilSent(rb *rxBatch, sent uint64) {
	if qp.txHeld == nil && qp.stats.TxPackets != sent {
		qp.txHeld = rb.out
		rb.pumped = append(rb.pumped, qp)
	}
}

// heldBehind reports whether packets the QP sent into b now would
// overtake packets of its that a receive batch still holds (txHeld; b nil:
// any send); if so it owes the QP a kick, which the batch's release runs.
func (qp *QP) heldBehind(b *txBatch) bool {
	if qp.txHeld == nil || qp.txHeld == b {
		return false
	}
	qp.kickOwed = true
	return true
}

// releaseHeld, once the batch that held the QP's packets has sent them,
// runs the pump that waited for it.
func (qp *QP) releaseHeld() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.txHeld = nil
	if qp.kickOwed {
		qp.kickOwed = false
		qp.kick()
		if qp.typ == RC {
			qp.req.schedule(qp) // a READ pacer's deadline, left out while held
		}
	}
}

// kick sends what the send queue can send now, under qp.mu: into the
// receive batch the QP is handling a packet of, if it is (pumpInto).
func (qp *QP) kick() { qp.kickAt(qp.dev.now()) }

// kickAt is kick for a caller that has just read the clock.
func (qp *QP) kickAt(now int64) {
	if qp.rx != nil {
		qp.pumpInto(qp.rx, now)
		return
	}
	b := qp.dev.getBatch()
	if qp.typ == UD {
		qp.pumpUD(b)
	} else {
		qp.resp.onReadTimer(qp, now, b) // paced READ answers that waited for a batch to leave
		qp.req.pump(qp, b, now)
	}
	qp.dev.transmitAt(b, now)
	qp.dev.putBatch(b)
}

// packetBuf makes room for one more packet in b, sending b first if it is
// full, and returns the buffer to build it in.
func (qp *QP) packetBuf(b *txBatch) []byte {
	if b.full() {
		qp.dev.transmit(b)
	}
	return b.buf()
}

// onTimer runs the QP's expired timers; called by the timer goroutine. It
// reads the clock itself: the goroutine's own reading is as old as the
// QPs it served before this one took.
func (qp *QP) onTimer() {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.typ != RC || qp.state == QPSReset || qp.state == QPSErr {
		return
	}
	qp.wakeOwed.Store(false) // the pump below is what it asked for
	b := qp.dev.getBatch()
	now := qp.dev.now()
	qp.resp.onReadTimer(qp, now, b)
	qp.req.onTimer(qp, now, b)
	qp.dev.transmit(b)
	qp.dev.putBatch(b)
}

// checkDrained reports EventSQDrained once a QP in SQD has nothing in
// flight.
func (qp *QP) checkDrained() {
	if qp.state == QPSSQD && !qp.req.drainReported && qp.sq.posted() == 0 {
		qp.req.drainReported = true
		qp.dev.events.push(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

const psnMask = 0xffffff

// psnDiff is a-b in 24-bit PSN space, as a signed distance.
func psnDiff(a, b uint32) int32 { return int32((a-b)&psnMask<<8) >> 8 }

func psnAdd(a uint32, n int) uint32 { return (a + uint32(n)) & psnMask }

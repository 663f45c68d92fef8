package vroce

import (
	"sync/atomic"
	"time"

	"vroce.dev/vroce/wire"
)

// The requester of an RC QP (IBA 9.7.4; rxe_req.c): it assigns PSNs to
// posted send work requests and turns them into request packets, within
// the window, the pacer, the peer budget and the READ/atomic depth, the
// PSNs marked lost before new ones. Its completer (completer.go) takes
// the responder's answers; its timers (onTimer) fire loss recovery's
// deadlines, the end of an RNR wait and of a pacing gap. What it knows of
// each PSN in flight is the scoreboard's, when to give up on one is loss
// recovery's, and how much may be in flight the congestion controller's.

const (
	// ackEvery asks for an ACK at least this often inside long messages,
	// so that the window keeps moving (rxe asks every 65 packets).
	ackEvery = 64
	// readChunk caps the response packets one READ request asks for. A
	// large READ goes out as several requests paced by the same window as
	// writes, so a lost response costs at most a window to re-request, not
	// the whole remainder.
	readChunk = 64
	// sendBurst is the fewest new packets a window-limited sender sends
	// at once while more are queued (as TCP defers a small TSO send):
	// each ACK frees a packet or two, and sending those alone made GSO
	// datagrams of two packets over veth, a system call and a trip
	// through the peer's stack per two.
	sendBurst = 16
)

// requester is an RC QP's send side, under qp.mu. The send queue it
// sends from is the QP's (qp.sq).
type requester struct {
	nextPSN uint32 // the next new PSN of the work request at qp.sq.next to send
	sndNxt  uint32 // first PSN not yet assigned to a work request

	sb  scoreboard   // the PSNs in flight
	rec lossRecovery // RTT, RTO, probes
	cc  congestion   // the window and the pacer

	rdInFlight  int // READ and atomic work requests sent and not completed
	sinceAckReq int // packets sent since the last that asked for an ACK

	rnrAt      int64 // end of an RNR wait
	paceAt     int64 // when the pacer lets the next packet go
	progressAt int64 // retry_cnt's clock: the last ACK, or the first send after idle
	retriedAt  int64 // the first retransmission timeout since progressAt (0: none yet)
	rnrLeft    int
	rnrWait    bool

	drainReported bool // SQD: EventSQDrained is reported

	// peer is the budget this QP's packets in flight draw on, shared with
	// the device's other RC QPs to the same address (joined at RTS, left
	// at reset); peerCharge is what they draw now. Both under qp.mu.
	// peerTicket is the QP's place in peer's queue (0: not queued),
	// written under peer.mu or set to 0 by the QP (peerBudget).
	peer       *peerBudget
	peerCharge int64
	peerTicket atomic.Uint64
	// peerReserved is budget a waker charged for the QP's next packet
	// (peerBudget.reserve), not yet in peerCharge: added by the waker,
	// taken by the QP.
	peerReserved atomic.Int64
}

func (r *requester) init() {
	*r = requester{}
	r.cc.init()
}

func (r *requester) start(qp *QP) {
	a := &qp.attr
	r.nextPSN, r.sndNxt = a.SQPSN, a.SQPSN
	r.sb.start(a.SQPSN)
	r.rnrLeft = int(a.RNRRetry)
	r.progressAt, r.retriedAt = qp.dev.now(), 0
	if r.peer == nil {
		r.peer = qp.dev.peers.join(qp.flow.Dst)
		r.rec.peer = &r.peer.rtt
	}
}

// leavePeer gives back the QP's charge and its place in the peer budget,
// before a reset forgets them.
func (r *requester) leavePeer(qp *QP) {
	if r.peer == nil {
		return
	}
	qp.dev.peers.leave(r.peer, qp)
	r.peer.charge(-r.peerCharge-r.peerReserved.Swap(0), qp.dev, qp.dev.now())
	r.peer, r.peerCharge, r.rec.peer = nil, 0, nil
}

// settlePeer brings the QP's charge on its peer budget to what it has in
// flight, giving back what ACKs retired.
func (r *requester) settlePeer(qp *QP, now int64) {
	if r.peer == nil {
		return
	}
	want := r.peerWant(qp)
	if delta := want - r.peerCharge; delta != 0 {
		r.peerCharge = want
		r.peer.charge(delta, qp.dev, now)
	}
}

// peerWant is what the QP's packets in flight should be charged: the
// copies that may sit in the peer's receive buffer or on the way there.
// That is the scoreboard's pipe (sent, not yet known delivered, held by
// the responder or lost) and every resend's extra copy. A PSN the
// responder holds out of order has left its receive buffer, as has one
// refused with an RNR NAK (marked lost until its wait ends): charging
// them let the QPs waiting out RNR behind a shared SRQ fill the budget
// with packets the peer had taken, while the QPs whose messages held
// the SRQ's receives could not send the rest of them, so no receive
// ever came back.
func (r *requester) peerWant(qp *QP) int64 {
	return int64(r.sb.pipe()+r.sb.resends) * peerCost(qp.mtu)
}

// peerAdmits reports whether the peer budget lets one more new packet go;
// if not, the QP is queued to be woken when it does.
func (r *requester) peerAdmits(qp *QP, now int64) bool {
	if r.peer == nil {
		return true
	}
	// What this pump has sent so far is charged when it ends (one
	// atomic add a pump, not one a packet): count it with the packet.
	if res := r.peerReserved.Swap(0); res > 0 {
		r.peerCharge += res // settlePeer gives back what goes unsent
		return true
	}
	cost, limit := peerCost(qp.mtu), peerLimit(qp.mtu)
	if r.peer.fits(r.peerWant(qp)-r.peerCharge+cost, limit) {
		return true
	}
	r.settlePeer(qp, now)
	if r.peer.admit(qp, cost, limit) {
		return true
	}
	qp.stats.PeerBudgetStops++
	return false
}

// window is how many packets may be in the network (the scoreboard's
// pipe).
func (r *requester) window() int { return min(r.cc.window(), maxWindow) }

// room is how many new packets may leave from PSN next: the window less
// the pipe, and no further past sndUna than spanLimit.
func (r *requester) room(next uint32, mtu int) int {
	return min(r.window()-r.sb.pipe(), r.spanLimit(mtu)-int(psnDiff(next, r.sb.sndUna)))
}

// spanLimit is how far past sndUna new PSNs may go while holes below
// them are repaired: what the scoreboard tracks and the responder holds
// out of order (maxWindow packets, maxHeldPerQP bytes), and four windows,
// so a hole whose resend is lost too (it waits for a probe) stops the
// sender before the responder's buffer fills with what follows it.
func (r *requester) spanLimit(mtu int) int {
	return min(maxWindow, 4*r.window(), max(maxHeldPerQP/max(mtu, 1), 1))
}

// pump sends what the window, the pacer, the READ/atomic depth and fences
// allow: PSNs marked lost first, then new ones.
func (r *requester) pump(qp *QP, b *txBatch, now int64) {
	if qp.state == QPSErr || r.rnrWait {
		return
	}
	if qp.heldBehind(b) {
		return // the receive batch holding our packets goes first
	}
	q := &qp.sq
	for {
		psn, ok := r.sb.nextLost()
		if !ok {
			break
		}
		w := q.find(psn)
		if w == nil { // cannot happen: a PSN in flight belongs to a work request
			r.sb.abandon(psn)
			continue
		}
		// The oldest PSN may always go again: each QP can make progress
		// whatever the others hold of the budget, and whatever the pacer
		// says. Its gap is srtt/cwnd, which after timeouts on a stalled
		// host (cwnd 1, srtt 600 ms) outgrew the ACK timeout: the RTO
		// fired and sent nothing, until retry_cnt failed a QP that had
		// not retried at all.
		head := psn == r.sb.sndUna
		if (!head && !r.paced(now)) || r.rdLimited(qp, w) || (!head && !r.peerAdmits(qp, now)) {
			break
		}
		r.emit(qp, w, psn, b, now)
	}
	if r.defersSend(q, qp.mtu) {
		r.armTimers(qp, now)
		return
	}
	mtu := qp.mtu
	maxRd := max(qp.attr.MaxRdAtomic, 1)
	for q.next < q.tail && r.paceAt == 0 {
		w := q.slot(q.next)
		if !w.assigned {
			rd := w.op.awaitsResponse()
			if qp.state != QPSRTS || (w.flags&SendFence != 0 && r.rdInFlight > 0) || (rd && r.rdInFlight >= maxRd) {
				break
			}
			if r.room(r.sndNxt, mtu) <= 0 {
				break
			}
			w.assigned, w.psn, w.npsn = true, r.sndNxt, w.packets(mtu)
			r.sndNxt = psnAdd(r.sndNxt, w.npsn)
			r.nextPSN = w.psn
			if rd {
				r.rdInFlight++
			}
		}
		if r.room(r.nextPSN, mtu) <= 0 || r.rdLimited(qp, w) || !r.peerAdmits(qp, now) || !r.paced(now) {
			break
		}
		if !r.sb.outstanding() {
			// Idle until now: the retry_cnt clock starts as the packet
			// leaves, not at the last ACK of long ago, nor when the work
			// request got its PSNs (it may have waited for the peer
			// budget since).
			r.progressAt, r.retriedAt = now, 0
		}
		r.nextPSN = r.emit(qp, w, r.nextPSN, b, now)
		if psnDiff(r.nextPSN, psnAdd(w.psn, w.npsn)) >= 0 {
			q.next++
			if q.next < q.tail && q.slot(q.next).assigned {
				r.nextPSN = q.slot(q.next).psn
			}
		}
	}
	r.settlePeer(qp, now)
	r.armTimers(qp, now)
}

// defersSend reports whether new packets from q wait for more of the
// window to open: the window is nearly full, so ACKs are on their way, and
// what is queued would fill a burst. A flow with little in flight, or
// little queued, sends at once.
func (r *requester) defersSend(q *sendQueue, mtu int) bool {
	burst := min(sendBurst, r.window()/4)
	if burst <= 1 {
		return false
	}
	if r.sb.pipe() == 0 || r.room(r.nextPSN, mtu) >= burst {
		return false
	}
	queued := 0 // packets posted and not yet sent, up to a burst
	if q.next < q.tail {
		w := q.slot(q.next)
		if w.assigned {
			queued = int(psnDiff(psnAdd(w.psn, w.npsn), r.nextPSN))
		} else {
			queued = w.packets(mtu)
		}
		for i := q.next + 1; i < q.tail && queued < burst; i++ {
			queued += q.slot(i).packets(mtu)
		}
	}
	return queued >= burst
}

// rdLimited reports whether w's next packet is a READ or atomic request
// that must wait: max_rd_atomic requests already await their responses.
func (r *requester) rdLimited(qp *QP, w *sendWQE) bool {
	return w.op.awaitsResponse() && r.sb.rdRequests >= max(qp.attr.MaxRdAtomic, 1)
}

// ackInterval is how many packets may go without asking for an ACK: at
// most rxe's 64, and few enough for four ACKs per window, so the ACK clock
// keeps ticking when the window is small (a window smaller than the
// interval would otherwise wait for a probe on every step).
func (r *requester) ackInterval() int {
	return min(ackEvery, max(r.window()/4, 1)-1)
}

// paced asks the pacer for one packet; when it refuses, pump stops and the
// timer resumes it.
func (r *requester) paced(now int64) bool {
	ok, at := r.cc.pace(r.rec.rtt.SRTT, now)
	if !ok {
		r.paceAt = at
	}
	return ok
}

// armTimers keeps loss recovery's deadlines running while anything is in
// flight, and asks the device's timer for the earliest deadline.
func (r *requester) armTimers(qp *QP, now int64) {
	if !r.sb.outstanding() {
		// Nothing in flight needs the RTO or a probe, but a pump the
		// pacer stopped must still be woken.
		r.rec.disarm()
	} else {
		r.rec.arm(now, qp.dev.sched.allowance(now), qp.ackTimeout(), r.sb.lostCount > 0, r.peerMayHold(qp, r.sb.inFlight()))
	}
	r.schedule(qp)
}

// peerMayHold is the peer's rule for holding an ACK (responder.mayHoldAck)
// for a flight of n packets, as far as this end can see it: the rest
// (whether its program answers, SACK blocks to report) it cannot.
func (r *requester) peerMayHold(qp *QP, n int) bool {
	return qp.attr.PiggybackACK && n <= holdMaxPackets
}

// schedule asks the device timer for the earliest deadline; with none
// left, the QP's pending one is dropped (unschedule).
func (r *requester) schedule(qp *QP) {
	readsDue := qp.resp.pace.due
	if readsDue != 0 && qp.heldBehind(nil) {
		// The READ pacer waits for the receive batch holding our packets
		// (responder.onReadTimer), whose release pumps it: a deadline
		// passed already would fire the timer again and again until then.
		readsDue = 0
	}
	next := int64(0)
	for _, at := range [...]int64{r.rec.lossDetectionTimeout(), r.rnrAt, r.paceAt, r.failAt(qp), readsDue} {
		if at != 0 && (next == 0 || at < next) {
			next = at
		}
	}
	if next != 0 {
		qp.dev.schedule(qp, next)
	} else {
		qp.dev.unschedule(qp)
	}
}

// ackTimeout is the verbs local ACK timeout (4.096 us x 2^Timeout); 0 is
// infinite. The adaptive RTO never exceeds it, and a QP fails after
// retry_cnt + 1 of them pass without progress.
func (qp *QP) ackTimeout() int64 {
	if qp.attr.Timeout == 0 {
		return 0
	}
	return int64(4096) << qp.attr.Timeout
}

// failAt is when the QP gives up: retry_cnt + 1 local ACK timeouts without
// progress, and (with a retry_cnt) a local ACK timeout after its first
// retransmission timeout. Never, for an infinite timeout.
func (r *requester) failAt(qp *QP) int64 {
	t := qp.ackTimeout()
	if t == 0 || !r.sb.outstanding() || r.rnrWait {
		return 0
	}
	at := r.progressAt + t*(int64(qp.attr.RetryCnt)+1)
	if r.retriedAt != 0 && qp.attr.RetryCnt > 0 {
		at = max(at, r.retriedAt+t)
	}
	return at
}

// ackRidesHere reports whether an owed ACK may ride on w's packet k (at
// psn), or should wait for a later packet of the message. A GSO datagram
// carries segments of one size, the last of them perhaps shorter, so the
// 8 bytes of a piggybacked ACK on a SEND's FIRST (or a MIDDLE) split its
// message into two datagrams, and the peer wakes for each. The LAST is
// the shorter end of its run anyway: the ACK waits for it when it leaves
// in this pump. A FIRST with a RETH differs in size anyway, and a resend
// goes alone: those carry it at once.
func (r *requester) ackRidesHere(w *sendWQE, k int, psn uint32, mtu int, resend bool) bool {
	after := w.npsn - k - 1 // the message's packets after this one
	if after == 0 || k == 0 && w.op.isWrite() || resend {
		return true
	}
	// This packet is not in the pipe yet: one less for those after it.
	return r.room(psnAdd(psn, 1), mtu)-1 < after
}

// emit builds and queues the packet of w at psn and returns the PSN after
// it. A READ request covers the rest of its 64-packet chunk, or, resent,
// the run of missing responses from psn, within the window.
func (r *requester) emit(qp *QP, w *sendWQE, psn uint32, b *txBatch, now int64) uint32 {
	mtu := qp.mtu
	k := int(psnDiff(psn, w.psn))
	resend := psnDiff(psn, r.sb.sndMax) < 0 // below the highest PSN sent
	buf := qp.packetBuf(b)
	p := wire.Packet{BTH: wire.BTH{PKey: wire.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: psn}}
	n, covers := 0, 1
	switch {
	case w.op == WRRDMARead:
		// No more responses than the window has room for: they are the
		// data of this flow, and a request for a whole chunk under a
		// collapsed window (a receiver overrun, every re-request asking
		// for 2 MiB at 32 KiB packets) kept the receiver overrun.
		room := max(1, r.window()-int(psnDiff(psn, r.sb.sndUna)))
		covers = min(readChunk-k%readChunk, w.npsn-k, room)
		if sent := int(psnDiff(r.sb.sndMax, psn)); sent > 0 {
			// A resend asks again only for what was requested: the PSNs
			// from sndMax on are nextPSN's to send. Sized by a window
			// that had grown since, it took them too and left nextPSN
			// behind, to be sent again below sndUna once they came.
			covers = min(covers, sent)
		}
		for i := 1; i < covers; i++ { // stop at a response already here
			if r.sb.arrived(psnAdd(psn, i)) {
				covers = i
				break
			}
		}
		off := k * mtu
		p.BTH.Opcode, p.BTH.AckReq = wire.RCReadRequest, true
		p.RETH = wire.RETH{VA: w.raddr + uint64(off), RKey: w.rkey, DMALen: uint32(min(covers*mtu, w.length-off))}
	case w.op.isAtomic():
		p.BTH.Opcode, p.BTH.AckReq = wire.RCFetchAdd, true
		p.Atomic = wire.AtomicETH{VA: w.raddr, RKey: w.rkey, SwapAdd: w.cmpAdd}
		if w.op == WRAtomicCmpAndSwp {
			p.BTH.Opcode = wire.RCCompareSwap
			p.Atomic.SwapAdd, p.Atomic.Compare = w.swap, w.cmpAdd
		}
	default:
		off := k * mtu
		n = min(mtu, w.length-off)
		first, last := k == 0, off+n >= w.length
		p.BTH.Opcode = requestOpcode(w.op, first, last)
		p.BTH.SE = last && w.flags&SendSolicited != 0
		p.BTH.AckReq = last || r.sinceAckReq >= r.ackInterval() || resend
		if first && w.op.isWrite() {
			p.RETH = wire.RETH{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
		}
		if last && w.op.hasImm() {
			p.Imm = w.imm
		}
	}
	qp.resp.piggyback(qp, &p, r.ackRidesHere(w, k, psn, mtu, resend))
	trailer := 0
	if p.BTH.PiggyACK {
		trailer = wire.PiggyACKLen
	}
	hl, _ := p.EncodeHeaders(buf, n)
	// A packet that waits in a receive batch (QP.pumpInto) leaves after
	// the QP's lock is let go. A resend's work request may have completed
	// by then (an ACK later in the batch for the original) and its memory
	// be the application's to write again: a resend carries a copy, not a
	// loan. A first sending cannot be acknowledged before it leaves, but
	// by a peer acknowledging a PSN it never got, or by a flush to the
	// error state; the application may then change the bytes, which no
	// longer fit the ICRC sealed now, and the receiver drops the packet.
	// Memory stays valid: the batch holds the slice. Lending first
	// sendings spares ACK-clocked bulk a copy of every byte (write_bw 64
	// KiB between two namespaces at MTU 9000: 2,311-2,860 to 2,591-3,399
	// MiB/s in 4 interleaved runs, each faster; loopback 1,536-2,220 to
	// 1,887-2,891).
	body, inOne := w.lend(k*mtu, n)
	switch {
	case inOne && n >= lendMin && (qp.rx == nil || !resend):
		if trailer > 0 {
			p.Piggy.Put(buf[hl:])
		}
		b.addLent(qp, hl, body, trailer)
	case inOne && n > 0: // copied as the ICRC reads it
		if trailer > 0 {
			p.Piggy.Put(buf[hl+n:])
		}
		b.addCopied(qp, hl, body, trailer)
	default: // spread over SGEs, inline, or no payload
		if n > 0 {
			w.gather(buf[hl:hl+n], k*mtu)
		}
		if trailer > 0 {
			p.Piggy.Put(buf[hl+n:])
		}
		b.addFor(qp, wire.Finish(buf, hl+n+trailer))
	}
	if p.BTH.AckReq {
		r.sinceAckReq = 0
	} else {
		r.sinceAckReq++
	}
	read := w.op.awaitsResponse()
	for i := range covers {
		if r.sb.sent(psnAdd(psn, i), now, read) && i == 0 {
			qp.stats.Retransmits++
		}
	}
	if read {
		for i := range covers {
			r.sb.await(psnAdd(psn, covers-1), psnAdd(psn, i))
		}
	}
	return psnAdd(psn, covers)
}

// onTimer runs the requester's deadlines: the retry_cnt deadline that
// fails the QP, the end of an RNR wait or of a pacing gap, and loss
// recovery's probe and RTO.
func (r *requester) onTimer(qp *QP, now int64, b *txBatch) {
	if at := r.failAt(qp); at != 0 && now >= at {
		if r.retriedAt != 0 || qp.attr.RetryCnt == 0 {
			qp.stats.Timeouts++
			r.failHead(qp, WCRetryExcErr)
			return
		}
		// The whole budget passed before a single retransmission
		// timeout: this host did not run the timer (a VM's stolen time,
		// a stall), which says nothing of the path. One probe first;
		// the QP gives up a local ACK timeout later if it goes
		// unanswered. (Under a busy loop on each core, a QP whose peer
		// had vanished gave up with no retransmission at all.)
		r.retriedAt = now
		qp.stats.Timeouts++
		r.rec.lossSuspected(r.sb.probe(), now)
		r.pump(qp, b, now)
		r.schedule(qp)
		return
	}
	if r.rnrAt != 0 && now >= r.rnrAt {
		r.rnrAt, r.rnrWait = 0, false
		r.progressAt, r.retriedAt = now, 0
	}
	if r.paceAt != 0 && now >= r.paceAt {
		r.paceAt = 0
	}
	if r.sb.outstanding() && qp.dev.sending.stalled(now) {
		// What a passed deadline would count lost may still be in this
		// host's stuck send: hold the deadlines until it returns.
		if r.rec.holdPassed(now) {
			qp.stats.SendStallHolds++
		}
	} else if r.sb.outstanding() {
		switch r.rec.onLossDetectionTimeout(now) {
		case firstTimeout:
			qp.stats.Timeouts++
			r.noteRetry(now)
			r.rec.lossSuspected(r.sb.probe(), now)
			r.cc.onLoss(1, r.rec.rtt.SRTT, now)
		case repeatedTimeout:
			r.noteRetry(now)
			qp.stats.Timeouts++
			r.sb.markLostFrom(r.sb.sndUna)
			r.rec.lossProven(now)
			r.rec.collapsedThrough = psnAdd(r.sb.sndMax, -1)
			r.cc.onTimeout(now)
		case probeTimeout:
			// Two RTTs passed without news. Resend the oldest packet the
			// responder has not confirmed: it repairs a lost tail or a
			// lost resend directly, and its ACK reports the rest.
			qp.stats.TailProbes++
			r.rec.lossSuspected(r.sb.probe(), now)
		}
	}
	r.pump(qp, b, now)
	r.schedule(qp)
}

// noteRetry records a retransmission timeout for failAt's clock.
func (r *requester) noteRetry(now int64) {
	if r.retriedAt == 0 {
		r.retriedAt = now
	}
}

// requestOpcode picks the opcode of one packet of a SEND or WRITE. IBA
// lays both out alike (FIRST, MIDDLE, LAST, LAST_WITH_IMMEDIATE, ONLY,
// ONLY_WITH_IMMEDIATE), WRITE six after SEND.
func requestOpcode(op WROpcode, first, last bool) wire.Opcode {
	base := wire.RCSendFirst
	if op.isWrite() {
		base = wire.RCWriteFirst
	}
	imm := wire.Opcode(0)
	if op.hasImm() {
		imm = 1
	}
	switch {
	case first && last:
		return base + 4 + imm
	case first:
		return base
	case last:
		return base + 2 + imm
	}
	return base + 1
}

// rnrDelay decodes an RNR timer code (IBA table 45).
func rnrDelay(code uint8) time.Duration {
	us := [32]float64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	return time.Duration(us[code&31] * float64(time.Microsecond))
}

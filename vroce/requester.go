package vroce

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync/atomic"
	"time"

	"vroce.dev/vroce/wire"
)

// The requester and completer of an RC QP (IBA 9.7; rxe_req.c and
// rxe_comp.c): it turns send work requests into request packets, keeps them
// until acknowledged, retransmits go-back-N from a NAKed or timed-out PSN,
// waits out RNR NAKs and completes work requests in order.

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

// sendWQE is a posted send work request and its transport state.
type sendWQE struct {
	id           uint64
	op           WROpcode
	flags        SendFlags
	signaled     bool
	first        span
	more         []span // further SGEs, capacity reused with the slot
	inline       []byte // SendInline data, capacity reused with the slot
	length       int
	imm          uint32
	raddr        uint64
	rkey         uint32
	cmpAdd, swap uint64
	ud           udDest

	assigned bool   // has PSNs
	psn      uint32 // first PSN
	npsn     int    // PSNs the message uses
	done     bool   // UD: the datagram has left
}

// lendMin is the smallest payload a packet carries straight from
// registered memory: below it, copying costs less than the kernel's
// handling of two more iovecs.
const lendMin = 1024

// lendable is lend for payloads of at least lendMin bytes.
func (w *sendWQE) lendable(off, n int) ([]byte, bool) {
	if n < lendMin {
		return nil, false
	}
	return w.lend(off, n)
}

// lend returns the message bytes [off, off+n) as registered memory itself
// when one SGE holds them all, for the packet to carry without a copy.
func (w *sendWQE) lend(off, n int) ([]byte, bool) {
	if w.flags&SendInline != 0 || w.first.mr == nil {
		return nil, false
	}
	s := w.first
	for i := 0; off >= s.n; i++ {
		if i == len(w.more) {
			return nil, false
		}
		off -= s.n
		s = w.more[i]
	}
	if off+n > s.n {
		return nil, false
	}
	return s.bytes()[off : off+n], true
}

// gather copies the message bytes [off, off+len(dst)) into dst.
func (w *sendWQE) gather(dst []byte, off int) {
	if w.flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return
	}
	gather(w.first, w.more, dst, off)
}

// scatter copies src into the message's local buffers at offset off (READ
// responses and atomic results).
func (w *sendWQE) scatter(src []byte, off int) { scatter(w.first, w.more, src, off) }

func (w *sendWQE) packets(mtu int) int {
	if w.op.isAtomic() || w.length == 0 {
		return 1
	}
	return (w.length + mtu - 1) / mtu
}

func (w *sendWQE) lastPSN() uint32 { return psnAdd(w.psn, w.npsn-1) }

type requester struct {
	sq               []sendWQE // ring, a power of two long; grows to hold max
	head, next, tail uint64    // complete < head <= next (being sent) <= tail
	max              int

	nextPSN uint32 // the next new PSN of sq[next] to send
	sndNxt  uint32 // first PSN not yet assigned to a work request
	sndUna  uint32 // oldest PSN not known delivered
	sndMax  uint32 // one past the highest PSN ever sent

	pk         []pktState // per PSN in [sndUna, sndMax): the scoreboard
	lostCount  int        // PSNs marked lost and not yet resent
	lostFrom   uint32     // no PSN below it is marked lost
	highHeld   uint32     // highest PSN known received (ACK, SACK or response)
	rackSentAt int64      // latest send time among PSNs known received

	rdInFlight int // READ and atomic work requests sent and not completed
	// rdRequests counts READ and atomic request packets whose responses
	// are still awaited: what the responder holds resources for
	// (max_rd_atomic bounds it, not the work requests, since a READ goes
	// out as several requests).
	rdRequests  int
	sinceAckReq int

	rtt         rttEstimator
	cc          congestion
	backoff     int
	freshSample bool  // an RTT sample since the RTO last backed off
	rtoAt       int64 // retransmission timeout, 0 when nothing is in flight
	probeAt     int64 // tail-loss probe
	rnrAt       int64 // end of an RNR wait
	paceAt      int64 // when the pacer lets the next packet go
	progressAt  int64 // last time anything was acknowledged
	rnrLeft     int
	rnrWait     bool
	undo        float64 // the window before the last timeout, while it may prove spurious
	// lossAt is when the path last lost a packet, as far as the
	// requester can tell (see quietProbeFloor). A timer's resend of
	// probedPSN counts as a loss (suspected) unless the responder reports
	// that PSN arrived twice: lossAt then goes back to lossUndo, its
	// value before the PSN was first resent. A resend of another PSN
	// ends the suspicion: no report came.
	lossAt, lossUndo int64
	probedPSN        uint32
	suspected        bool

	drainReported bool

	// peer is the budget this QP's packets in flight draw on, shared with
	// the device's other RC QPs to the same address (joined at RTS, left
	// at reset); peerCharge is what they draw now. Both under qp.mu.
	// peerTicket is the QP's place in peer's queue (0: not queued),
	// written under peer.mu or set to 0 by the QP (peerBudget).
	peer       *peerBudget
	peerCharge int64
	peerTicket atomic.Uint64
	resends    int // the sum of pktState.resends over [sndUna, sndMax)
}

// pktState is what the requester knows of one PSN in flight.
type pktState struct {
	sentAt int64
	// resends counts the times it was sent again: a resent PSN gives no
	// RTT sample (Karn), and each resend is a copy the peer may still
	// hold unread (a timeout's resends, most of all, are often of
	// packets that were only slow), which peerCharge counts.
	resends uint8
	held    bool // SACKed: the responder holds it, do not resend
	done    bool // delivered: acknowledged, or its READ response or atomic ACK arrived
	lost    bool // queued to be sent again
	read    bool // a READ or atomic PSN: delivered only by its response
	// A READ or atomic PSN awaited by the request whose last PSN is
	// lastOff PSNs on; that last PSN's left counts the PSNs its request
	// still awaits (rdRequests counts requests with left > 0). Kept at
	// the last PSN: sndUna passes it only once the whole request is in.
	awaited bool
	lastOff uint8
	left    uint8
}

// resent reports whether the PSN was sent more than once.
func (st *pktState) resent() bool { return st.resends > 0 }

func (r *requester) init(max int) {
	*r = requester{max: max}
	r.cc.init()
}

// leavePeer gives back the QP's charge and its place in the peer budget,
// before a reset forgets them.
func (r *requester) leavePeer(qp *QP) {
	if r.peer == nil {
		return
	}
	r.peer.charge(-r.peerCharge, qp.dev, qp.dev.now())
	qp.dev.peers.leave(r.peer, qp)
	r.peer, r.peerCharge = nil, 0
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

// peerWant is what the QP's packets in flight should be charged: every
// PSN sent and not yet passed by sndUna, and every resend of one.
func (r *requester) peerWant(qp *QP) int64 {
	return int64(int(psnDiff(r.sndMax, r.sndUna))+r.resends) * peerCost(qp.mtu)
}

// peerAdmits reports whether the peer budget lets one more new packet go;
// if not, the QP is queued to be woken when it does.
func (r *requester) peerAdmits(qp *QP, now int64) bool {
	if r.peer == nil {
		return true
	}
	// What this pump has sent so far is charged when it ends (one
	// atomic add a pump, not one a packet): count it with the packet.
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

func (r *requester) start(qp *QP) {
	a := &qp.attr
	r.nextPSN, r.sndNxt, r.sndUna, r.sndMax = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
	r.highHeld = psnAdd(a.SQPSN, -1)
	r.rnrLeft = int(a.RNRRetry)
	r.progressAt = qp.dev.now()
	if r.peer == nil {
		r.peer = qp.dev.peers.join(qp.flow.Dst)
	}
}

func (r *requester) slot(i uint64) *sendWQE { return &r.sq[i&uint64(len(r.sq)-1)] }

func (r *requester) inFlight() int { return int(r.tail - r.head) }

// reserve returns a cleared slot at the tail, growing the ring if needed.
func (r *requester) reserve() *sendWQE {
	if r.inFlight() == len(r.sq) {
		size := max(4, 2*len(r.sq))
		size = min(size, 1<<bits.Len(uint(r.max)))
		sq := make([]sendWQE, size)
		for i := r.head; i < r.tail; i++ {
			sq[i&uint64(size-1)] = *r.slot(i)
		}
		r.sq = sq
	}
	w := r.slot(r.tail)
	more, inline := w.more[:0], w.inline[:0]
	*w = sendWQE{more: more, inline: inline}
	return w
}

// pkt is the scoreboard entry of psn, which must be in [sndUna, sndMax)
// or the next PSN to send; the scoreboard grows to hold it.
func (r *requester) pkt(psn uint32) *pktState {
	need := int(psnDiff(psn, r.sndUna)) + 1
	if need > len(r.pk) {
		size := max(64, len(r.pk))
		for size < need {
			size *= 2
		}
		pk := make([]pktState, size)
		if len(r.pk) > 0 {
			for p := r.sndUna; p != r.sndMax; p = psnAdd(p, 1) {
				pk[p&uint32(size-1)] = r.pk[p&uint32(len(r.pk)-1)]
			}
		}
		r.pk = pk
	}
	return &r.pk[psn&uint32(len(r.pk)-1)]
}

// tracked reports whether psn is on the scoreboard: sent and not yet
// passed by sndUna. Only such PSNs may be looked up; any other index would
// alias a live entry of the ring.
func (r *requester) tracked(psn uint32) bool {
	return psnDiff(psn, r.sndUna) >= 0 && psnDiff(psn, r.sndMax) < 0
}

// outstanding reports whether any sent PSN is not yet delivered.
func (r *requester) outstanding() bool { return r.sndUna != r.sndMax }

// ackTimeout is the verbs local ACK timeout (4.096 us x 2^Timeout); 0 is
// infinite. The adaptive RTO never exceeds it, and a QP fails after
// retry_cnt + 1 of them pass without progress.
func (qp *QP) ackTimeout() int64 {
	if qp.attr.Timeout == 0 {
		return 0
	}
	return int64(4096) << qp.attr.Timeout
}

// PostSend posts send work requests (ibv_post_send). On error the requests
// before the bad one are posted and the error names the bad one.
func (qp *QP) PostSend(wrs ...SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	switch qp.state {
	case QPSRTS, QPSSQD, QPSSQE, QPSErr:
	default:
		return statef("post send: QP %#x is in %v", qp.qpn, qp.state)
	}
	var err error
	for i := range wrs {
		if err = qp.postOne(&wrs[i]); err != nil {
			err = fmt.Errorf("work request %d: %w", i, err)
			break
		}
	}
	if qp.state == QPSErr {
		qp.req.flush(qp)
	} else {
		qp.kick()
	}
	return err
}

func (qp *QP) postOne(wr *SendWR) error {
	const op = "post send"
	r := &qp.req
	if wr.Opcode > WRAtomicFetchAndAdd {
		return invalidf("%s: unknown opcode %d", op, wr.Opcode)
	}
	if qp.typ == UD && !wr.Opcode.isSend() {
		return invalidf("%s: %v on a UD QP", op, wr.Opcode)
	}
	if r.inFlight() >= qp.cap.MaxSendWR {
		return fmt.Errorf("vroce: %s: %d outstanding: %w", op, qp.cap.MaxSendWR, ErrQueueFull)
	}
	if err := checkLimit(op, "max_send_sge", len(wr.SGL), qp.cap.MaxSendSGE); err != nil {
		return err
	}
	inline := wr.Flags&SendInline != 0
	if inline {
		if wr.Opcode == WRRDMARead || wr.Opcode.isAtomic() {
			return invalidf("%s: %v cannot be inline", op, wr.Opcode)
		}
		if err := checkLimit(op, "max_inline_data", len(wr.Inline), qp.cap.MaxInlineData); err != nil {
			return err
		}
	}
	w := r.reserve()
	w.id, w.op, w.flags, w.imm = wr.ID, wr.Opcode, wr.Flags, wr.Imm
	w.signaled = qp.sigAll || wr.Flags&SendSignaled != 0
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	if inline {
		w.inline = append(w.inline, wr.Inline...)
		w.length = len(wr.Inline)
	} else {
		need := Access(0)
		if wr.Opcode == WRRDMARead || wr.Opcode.isAtomic() {
			need = AccessLocalWrite
		}
		for i, sge := range wr.SGL {
			s, ok := qp.dev.lookupLocal(sge.LKey, qp.pd, need, sge.Addr, uint64(sge.Length))
			if !ok {
				return invalidf("%s: SGE %d (lkey %#x, addr %#x, length %d) is not registered memory of this PD with the access it needs", op, i, sge.LKey, sge.Addr, sge.Length)
			}
			if i == 0 {
				w.first = s
			} else {
				w.more = append(w.more, s)
			}
			w.length += s.n
		}
	}
	switch {
	case w.length > qp.dev.attr.MaxMsgSize:
		return checkLimit(op, "max_msg_sz", w.length, qp.dev.attr.MaxMsgSize)
	case wr.Opcode.isAtomic() && (w.length != 8 || wr.RemoteAddr%8 != 0):
		return invalidf("%s: %v needs one 8-byte local buffer and an 8-byte aligned remote address", op, wr.Opcode)
	case qp.typ == UD:
		if err := qp.resolveUD(w, wr); err != nil {
			return err
		}
	}
	r.tail++
	return nil
}

// window is how many PSNs may be in flight.
func (r *requester) window() int { return min(r.cc.window(), maxWindow) }

// pump sends what the window, the pacer, the READ/atomic depth and fences
// allow: PSNs marked lost first, then new ones.
func (r *requester) pump(qp *QP, b *txBatch, now int64) {
	if qp.state == QPSErr || r.rnrWait {
		return
	}
	for r.lostCount > 0 {
		psn, ok := r.nextLost()
		if !ok {
			r.lostCount = 0
			break
		}
		w := r.wqeFor(psn)
		if w == nil { // cannot happen: a PSN in flight belongs to a work request
			st := r.pkt(psn)
			st.lost, st.done = false, true
			r.lostCount--
			continue
		}
		// The oldest PSN may always go again: each QP can make progress
		// whatever the others hold of the budget.
		if !r.paced(now) || r.rdLimited(qp, w) || (psn != r.sndUna && !r.peerAdmits(qp, now)) {
			break
		}
		r.emit(qp, w, psn, b, now)
	}
	if r.defersSend(qp.mtu) {
		r.armTimers(qp, now)
		return
	}
	mtu := qp.mtu
	maxRd := max(qp.attr.MaxRdAtomic, 1)
	for r.next < r.tail && r.paceAt == 0 {
		w := r.slot(r.next)
		if !w.assigned {
			rd := w.op == WRRDMARead || w.op.isAtomic()
			if qp.state != QPSRTS || (w.flags&SendFence != 0 && r.rdInFlight > 0) || (rd && r.rdInFlight >= maxRd) {
				break
			}
			if int(psnDiff(r.sndNxt, r.sndUna)) >= r.window() {
				break
			}
			if r.sndUna == r.sndNxt {
				// Idle until now: the retry_cnt clock starts here, not at
				// the last ACK of long ago.
				r.progressAt = now
			}
			w.assigned, w.psn, w.npsn = true, r.sndNxt, w.packets(mtu)
			r.sndNxt = psnAdd(r.sndNxt, w.npsn)
			r.nextPSN = w.psn
			if rd {
				r.rdInFlight++
			}
		}
		if int(psnDiff(r.nextPSN, r.sndUna)) >= r.window() || r.rdLimited(qp, w) || !r.peerAdmits(qp, now) || !r.paced(now) {
			break
		}
		r.nextPSN = r.emit(qp, w, r.nextPSN, b, now)
		if psnDiff(r.nextPSN, psnAdd(w.psn, w.npsn)) >= 0 {
			r.next++
			if r.next < r.tail && r.slot(r.next).assigned {
				r.nextPSN = r.slot(r.next).psn
			}
		}
	}
	r.settlePeer(qp, now)
	r.armTimers(qp, now)
}

// defersSend reports whether new packets wait for more of the window to
// open: the window is nearly full, so ACKs are on their way, and what is
// queued would fill a burst. A flow with little in flight, or little
// queued, sends at once.
func (r *requester) defersSend(mtu int) bool {
	burst := min(sendBurst, r.window()/4)
	if burst <= 1 {
		return false
	}
	// Sent and not acknowledged: sndNxt runs ahead to the end of the
	// message being sent, nextPSN is where sending stands.
	inFlight := int(psnDiff(r.nextPSN, r.sndUna))
	if inFlight <= 0 || r.window()-inFlight >= burst {
		return false
	}
	queued := 0 // packets posted and not yet sent, up to a burst
	if r.next < r.tail {
		w := r.slot(r.next)
		if w.assigned {
			queued = int(psnDiff(psnAdd(w.psn, w.npsn), r.nextPSN))
		} else {
			queued = w.packets(mtu)
		}
		for i := r.next + 1; i < r.tail && queued < burst; i++ {
			queued += r.slot(i).packets(mtu)
		}
	}
	return queued >= burst
}

// rdLimited reports whether w's next packet is a READ or atomic request
// that must wait: max_rd_atomic requests already await their responses.
func (r *requester) rdLimited(qp *QP, w *sendWQE) bool {
	return (w.op == WRRDMARead || w.op.isAtomic()) && r.rdRequests >= max(qp.attr.MaxRdAtomic, 1)
}

// await records that the request ending at last awaits the response of
// psn, which an earlier request may have awaited too (a resend asks again
// for responses presumed lost).
func (r *requester) await(last, psn uint32) {
	st := r.pkt(psn)
	r.release(psn, st)
	st.awaited, st.lastOff = true, uint8(psnDiff(last, psn))
	l := r.pkt(last)
	if l.left == 0 {
		r.rdRequests++
	}
	l.left++
}

// release stops awaiting psn's response, whose state is st: it came, or
// is presumed lost.
func (r *requester) release(psn uint32, st *pktState) {
	if !st.awaited {
		return
	}
	st.awaited = false
	if l := r.pkt(psnAdd(psn, int(st.lastOff))); l.left > 0 {
		l.left--
		if l.left == 0 {
			r.rdRequests--
		}
	}
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
	ok, at := r.cc.pace(r.rtt.srtt, now)
	if !ok {
		r.paceAt = at
	}
	return ok
}

// markLost queues psn, whose state is st, to be sent again.
func (r *requester) markLost(psn uint32, st *pktState) {
	r.release(psn, st)
	st.lost = true
	r.lostCount++
	if r.lostCount == 1 || psnDiff(psn, r.lostFrom) < 0 {
		r.lostFrom = psn
	}
}

// nextLost finds the oldest PSN marked lost. The scan resumes from
// lostFrom, below which nothing is marked, so resending k losses costs one
// pass over the window, not k.
func (r *requester) nextLost() (uint32, bool) {
	p := r.lostFrom
	if psnDiff(p, r.sndUna) < 0 {
		p = r.sndUna
	}
	for ; p != r.sndMax && psnDiff(p, r.sndMax) < 0; p = psnAdd(p, 1) {
		if r.pkt(p).lost {
			r.lostFrom = p
			return p, true
		}
	}
	return 0, false
}

// wqeFor finds the work request that psn belongs to.
func (r *requester) wqeFor(psn uint32) *sendWQE {
	for i := r.head; i < r.tail; i++ {
		w := r.slot(i)
		if !w.assigned {
			break
		}
		if psnDiff(psn, w.psn) >= 0 && psnDiff(psn, w.lastPSN()) <= 0 {
			return w
		}
	}
	return nil
}

// armTimers keeps the RTO, the tail-loss probe and the retry deadline
// running while anything is in flight.
func (r *requester) armTimers(qp *QP, now int64) {
	if !r.outstanding() {
		// Nothing in flight needs the RTO or a probe, but a pump the
		// pacer stopped must still be woken.
		r.rtoAt, r.probeAt = 0, 0
		r.schedule(qp)
		return
	}
	// An ACK can wait for a goroutine to be scheduled, on either end:
	// both timers allow for what the scheduler makes goroutines wait.
	wait := qp.dev.sched.allowance(now)
	rto := r.rtt.rto(r.backoff, qp.ackTimeout()) + wait
	if ceiling := qp.ackTimeout(); ceiling > 0 {
		rto = min(rto, ceiling)
	}
	if r.rtoAt == 0 {
		r.rtoAt = now + rto
	}
	// A loss probe after two quiet RTTs: the last packets of a flight,
	// whether the flight ends the data or fills the window, have no later
	// ones to reveal their loss; a probe draws the SACK that does, long
	// before a timeout. Not while resends are queued: they will draw it.
	if r.lostCount > 0 {
		r.probeAt = 0
	} else if r.backoff == 0 && r.probeAt == 0 {
		// A PTO after the last probe or send, and ahead of the RTO (a
		// steady RTT makes RTTVAR, and the RTO, small against two SRTTs):
		// never at or before now, or an unanswered probe to a peer slower
		// than three quarters of the RTO was repeated at every timer wake
		// until the RTO (117 packets in 40 ms to rxe). So a PTO apart, the
		// last a quarter RTO before it: at most (RTO * 3/4) / PTO + 1
		// probes per RTO.
		if at := min(now+r.rtt.pto(r.probeFloor(now))+wait, r.rtoAt-rto/4); at > now {
			r.probeAt = at
		}
	}
	r.schedule(qp)
}

// probeFloor is the soonest a loss probe may fire: fast only on a path
// that lost packets within lossMemory.
func (r *requester) probeFloor(now int64) int64 {
	if r.lossAt != 0 && now-r.lossAt < lossMemory {
		return 0
	}
	return quietProbeFloor
}

// schedule asks the device timer for the earliest deadline.
func (r *requester) schedule(qp *QP) {
	next := int64(0)
	for _, at := range [...]int64{r.rtoAt, r.probeAt, r.rnrAt, r.paceAt, r.failAt(qp)} {
		if at != 0 && (next == 0 || at < next) {
			next = at
		}
	}
	if next != 0 {
		qp.dev.schedule(qp, next)
	}
}

// failAt is when the QP gives up: retry_cnt + 1 local ACK timeouts without
// progress. Never, for an infinite timeout.
func (r *requester) failAt(qp *QP) int64 {
	t := qp.ackTimeout()
	if t == 0 || !r.outstanding() || r.rnrWait {
		return 0
	}
	return r.progressAt + t*(int64(qp.attr.RetryCnt)+1)
}

// emit builds and queues the packet of w at psn and returns the PSN after
// it. A READ request covers the rest of its 64-packet chunk, or, resent,
// the run of missing responses from psn, within the window.
func (r *requester) emit(qp *QP, w *sendWQE, psn uint32, b *txBatch, now int64) uint32 {
	mtu := qp.mtu
	k := int(psnDiff(psn, w.psn))
	buf := qp.emit(b)
	p := wire.Packet{BTH: wire.BTH{PKey: wire.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: psn}}
	n, covers := 0, 1
	switch {
	case w.op == WRRDMARead:
		// No more responses than the window has room for: they are the
		// data of this flow, and a request for a whole chunk under a
		// collapsed window (a receiver overrun, every re-request asking
		// for 2 MiB at 32 KiB packets) kept the receiver overrun.
		room := max(1, r.window()-int(psnDiff(psn, r.sndUna)))
		covers = min(readChunk-k%readChunk, w.npsn-k, room)
		for i := 1; i < covers; i++ { // stop at a response already here
			if q := psnAdd(psn, i); r.tracked(q) && (r.pkt(q).done || r.pkt(q).held) {
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
		p.BTH.AckReq = last || r.sinceAckReq >= r.ackInterval() || psnDiff(psn, r.sndMax) < 0
		if first && w.op.isWrite() {
			p.RETH = wire.RETH{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
		}
		if last && w.op.hasImm() {
			p.Imm = w.imm
		}
	}
	qp.resp.piggyback(qp, &p)
	trailer := 0
	if p.BTH.PiggyACK {
		trailer = wire.PiggyACKLen
	}
	hl, _ := p.EncodeHeaders(buf, n)
	if body, ok := w.lendable(k*mtu, n); ok {
		if trailer > 0 {
			p.Piggy.Put(buf[hl:])
		}
		b.addLent(qp, hl, body, trailer)
	} else {
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
	for i := 0; i < covers; i++ {
		q := psnAdd(psn, i)
		resent := psnDiff(q, r.sndMax) < 0
		st := r.pkt(q)
		if !resent {
			*st = pktState{read: w.op == WRRDMARead || w.op.isAtomic()}
			r.sndMax = psnAdd(q, 1)
		} else if st.lost {
			st.lost = false
			r.lostCount--
		}
		st.sentAt = now
		if resent && st.resends < 255 {
			st.resends++
			r.resends++
		}
		if resent && i == 0 {
			qp.stats.Retransmits++
		}
	}
	if w.op == WRRDMARead || w.op.isAtomic() {
		for i := range covers {
			r.await(psnAdd(psn, covers-1), psnAdd(psn, i))
		}
	}
	return psnAdd(psn, covers)
}

// onResponse handles an ACK, NAK, READ response or atomic ACK (the
// completer), then sends what the window now allows.
func (r *requester) onResponse(qp *QP, p *wire.Packet) {
	psn := p.BTH.PSN
	if !r.names(p) {
		qp.stats.ForgedResponses++
		return
	}
	now := qp.dev.now()
	una, lost := r.sndUna, r.lostCount
	switch op := p.BTH.Opcode; op {
	case wire.RCAcknowledge:
		r.onAck(qp, p, now)
	case wire.RCAtomicAcknowledge:
		r.ackThrough(qp, psnAdd(psn, -1), now)
		if w := r.wqeFor(psn); w != nil && w.op.isAtomic() && r.tracked(psn) && !r.pkt(psn).done {
			var v [8]byte
			binary.NativeEndian.PutUint64(v[:], p.AtomicAck)
			w.scatter(v[:], 0)
			r.delivered(psn, now)
		}
	default: // READ response
		r.ackThrough(qp, psnAdd(psn, -1), now)
		r.onReadResponse(qp, p, now)
	}
	if qp.state == QPSErr {
		return
	}
	r.advance(qp, now)
	r.retire(qp)
	if r.sndUna != una || r.lostCount != lost {
		qp.kickAt(now) // the window moved or a retransmission is due
	}
	qp.checkDrained()
}

// names reports whether a response speaks of a request this QP sent, as
// rxe's completer checks (check_psn): a NAK, an RNR NAK, a READ response
// or an atomic ACK names a PSN in flight (a READ response or atomic ACK,
// one of a READ or atomic); an ACK one in flight or the last delivered (a
// duplicate ACK, which may carry SACK and D-SACK blocks). Anything else
// is stale, or forged: a NAK for a request never sent, or long since
// acknowledged, failed the head work request or stalled the send queue.
func (r *requester) names(p *wire.Packet) bool {
	psn := p.BTH.PSN
	switch op := p.BTH.Opcode; {
	case op == wire.RCAcknowledge && p.AETH.Syndrome.Kind() == wire.SyndromeACK:
		return r.tracked(psn) || psn == psnAdd(r.sndUna, -1)
	case op == wire.RCAcknowledge:
		return r.tracked(psn)
	default: // READ responses, atomic ACKs
		return r.tracked(psn) && r.pkt(psn).read
	}
}

func (r *requester) onAck(qp *QP, p *wire.Packet, now int64) {
	psn, syn := p.BTH.PSN, p.AETH.Syndrome
	switch syn.Kind() {
	case wire.SyndromeACK:
		r.ackThrough(qp, psn, now)
		var sack wire.SACK
		if len(p.Payload) > 0 && wire.ParseSACK(&sack, p.Payload) {
			qp.stats.SACKsRecv++
			if first := sack.Blocks[0]; sack.N > 0 && first.Count == 1 && psnDiff(first.First, psn) <= 0 {
				r.onDuplicateReported(first.First) // below the cumulative ACK: a D-SACK
			}
			r.onSACK(&sack, now)
		}
		r.detectLosses(qp, now)
	case wire.SyndromeRNRNAK:
		qp.stats.RNRNAKsRecv++
		r.ackThrough(qp, psnAdd(psn, -1), now)
		r.advance(qp, now)
		r.retire(qp)
		if r.rnrLeft == 0 {
			r.failHead(qp, WCRNRRetryExcErr)
			return
		}
		if qp.attr.RNRRetry != 7 {
			r.rnrLeft--
		}
		if qp.attr.SelectiveRepeat && r.tracked(psn) {
			// Our responder holds the requests that followed the one it
			// refused, as it holds any that come out of order: only that
			// one goes again. (Marking them all lost resent the window
			// whenever the SACKs saying they were held came after the
			// RNR wait.)
			r.markOneLost(psn)
		} else {
			r.markLostFrom(psn) // the responder drops what follows, as rxe does
		}
		r.rnrWait = true
		r.rtoAt, r.probeAt = 0, 0
		r.rnrAt = now + int64(rnrDelay(syn.Value()))
		r.schedule(qp)
	case wire.SyndromeNAK:
		r.ackThrough(qp, psnAdd(psn, -1), now)
		if syn.Value() == wire.NAKPSNSequenceError {
			// A go-back-N responder (rxe) dropped everything from psn.
			qp.stats.SeqNAKsRecv++
			r.markLostFrom(psn)
			r.lossProven(now)
			r.cc.onLoss(1, r.rtt.srtt, now)
			return
		}
		qp.stats.RemoteAbortErr++
		status := WCRemOpErr
		switch syn.Value() {
		case wire.NAKInvalidRequest:
			status = WCRemInvReqErr
		case wire.NAKRemoteAccessError:
			status = WCRemAccessErr
		}
		r.advance(qp, now)
		r.retire(qp)
		r.failHead(qp, status)
	}
}

// ackThrough records a cumulative ACK: every SEND and WRITE PSN up to psn
// is delivered. READ responses below it that have not come were lost: the
// responder sent them before this ACK.
func (r *requester) ackThrough(qp *QP, psn uint32, now int64) {
	if psnDiff(psn, r.sndUna) < 0 {
		return
	}
	last := psnAdd(psn, 1)
	if psnDiff(last, r.sndMax) > 0 {
		last = r.sndMax
	}
	sample := int64(0)
	for p := r.sndUna; p != last; p = psnAdd(p, 1) {
		st := r.pkt(p)
		if st.done {
			continue
		}
		if st.read {
			if !st.lost && !st.held && st.sentAt < now-r.rtt.srtt/2 {
				r.markLost(p, st)
				r.lossProven(now)
			}
			continue
		}
		if !st.resent() && !st.held { // a held PSN gave its sample when SACKed
			sample = max(sample, st.sentAt)
		}
		if st.resent() && r.undo != 0 && now-st.sentAt < r.rtt.minRTT/2 {
			// Acknowledged sooner than its resend could be: the original
			// arrived and the timeout was spurious (Eifel). Undo it.
			qp.stats.SpuriousTimeouts++
			r.cc.cwnd, r.cc.slowStart, r.backoff = max(r.cc.cwnd, r.undo), false, 0
			r.undo = 0
		}
		r.delivered(p, now)
	}
	if sample != 0 {
		r.sampleRTT(now - sample)
	}
}

// delivered marks psn delivered.
func (r *requester) delivered(psn uint32, now int64) {
	st := r.pkt(psn)
	if st.done {
		return
	}
	if st.lost {
		st.lost = false
		r.lostCount--
	}
	st.done = true
	r.release(psn, st)
	r.noteReceived(psn, st.sentAt)
}

// noteReceived updates the evidence loss detection compares against.
func (r *requester) noteReceived(psn uint32, sentAt int64) {
	if psnDiff(psn, r.highHeld) > 0 {
		r.highHeld = psn
	}
	r.rackSentAt = max(r.rackSentAt, sentAt)
}

func (r *requester) onSACK(s *wire.SACK, now int64) {
	for _, blk := range s.Blocks[:s.N] {
		for i := uint32(0); i < blk.Count && i < maxWindow; i++ {
			p := psnAdd(blk.First, int(i))
			if !r.tracked(p) {
				continue
			}
			st := r.pkt(p)
			if st.done || st.held {
				continue
			}
			st.held = true
			if st.lost {
				st.lost = false
				r.lostCount--
			}
			if !st.resent() {
				r.sampleRTT(now - st.sentAt)
			}
			r.noteReceived(p, st.sentAt)
		}
	}
}

// lossThreshold is how many later PSNs must have arrived before a missing
// one counts as lost by sequence (TCP's duplicate-ACK threshold).
const lossThreshold = 3

// detectLosses marks lost every PSN that later evidence says is gone, in
// the manner of RACK: something sent a quarter RTT after it has arrived,
// or three later PSNs sent no earlier than it have. A resent packet is thus
// judged only by evidence newer than its resend, and a window of a few
// packets still detects its losses without waiting for a timeout.
func (r *requester) detectLosses(qp *QP, now int64) {
	reorder := max(r.rtt.srtt/4, 10_000)
	found := 0
	for p := r.sndUna; p != r.sndMax && psnDiff(p, r.highHeld) < 0; p = psnAdd(p, 1) {
		st := r.pkt(p)
		if st.done || st.held || st.lost {
			continue
		}
		bySeq := psnDiff(r.highHeld, p) >= lossThreshold && st.sentAt <= r.rackSentAt
		if !bySeq && st.sentAt+reorder > r.rackSentAt {
			continue
		}
		r.markLost(p, st)
		found++
	}
	if found > 0 {
		r.lossProven(now)
		qp.stats.FastRetransmits++
		r.cc.onLoss(found, r.rtt.srtt, now)
	}
}

// probe queues for resending the oldest PSN neither delivered nor held,
// or else the newest, and returns it.
func (r *requester) probe() uint32 {
	target := psnAdd(r.sndMax, -1)
	for p := r.sndUna; p != r.sndMax; p = psnAdd(p, 1) {
		if st := r.pkt(p); !st.done && !st.held {
			target = p
			break
		}
	}
	r.markOneLost(target)
	return target
}

// markOneLost queues psn for resending, held by the responder or not.
func (r *requester) markOneLost(psn uint32) {
	if st := r.pkt(psn); !st.done && !st.lost {
		st.held = false
		r.markLost(psn, st)
	}
}

// lossSuspected notes a resend of psn that a timer made: the path lost
// something, unless the responder reports psn arrived twice.
func (r *requester) lossSuspected(psn uint32, now int64) {
	if !r.suspected || psn != r.probedPSN {
		r.lossUndo, r.suspected = r.lossAt, true
	}
	r.lossAt, r.probedPSN = now, psn
}

// lossProven notes evidence that the path lost a packet: it is not undone.
func (r *requester) lossProven(now int64) {
	r.lossAt, r.suspected = now, false
}

// onDuplicateReported takes a D-SACK: the responder got psn twice. If that
// was the last timer resend, it repaired nothing: a host stalled, not the
// path, and the path counts as clean as it was.
func (r *requester) onDuplicateReported(psn uint32) {
	if r.suspected && psn == r.probedPSN {
		r.lossAt, r.suspected = r.lossUndo, false
	}
}

// markLostFrom queues every undelivered PSN from psn on to be resent.
func (r *requester) markLostFrom(psn uint32) {
	if psnDiff(psn, r.sndUna) < 0 {
		psn = r.sndUna
	}
	for p := psn; psnDiff(p, r.sndMax) < 0; p = psnAdd(p, 1) {
		st := r.pkt(p)
		if !st.done && !st.lost {
			st.held = false
			r.markLost(p, st)
		}
	}
}

func (r *requester) onReadResponse(qp *QP, p *wire.Packet, now int64) {
	psn := p.BTH.PSN
	if !r.tracked(psn) {
		return // a duplicate of a response already passed
	}
	w := r.wqeFor(psn)
	if w == nil || w.op != WRRDMARead || r.pkt(psn).done {
		return // a duplicate, or for a READ already complete
	}
	mtu := qp.mtu
	off := int(psnDiff(psn, w.psn)) * mtu
	// A READ goes out in chunks and is re-requested in pieces, so FIRST
	// and LAST mark requests, not the work request: the PSN and the
	// length decide.
	if len(p.Payload) != min(mtu, w.length-off) {
		r.failHead(qp, WCBadRespErr)
		return
	}
	w.scatter(p.Payload, off)
	st := r.pkt(psn)
	if !st.resent() {
		r.sampleRTT(now - st.sentAt)
	}
	r.delivered(psn, now)
	r.detectLosses(qp, now)
}

// sampleRTT takes an RTT sample of a packet sent once.
func (r *requester) sampleRTT(d int64) {
	r.rtt.sample(d)
	r.freshSample = true
}

// advance moves sndUna over delivered PSNs and records progress.
func (r *requester) advance(qp *QP, now int64) {
	moved := 0
	for r.sndUna != r.sndMax && r.pkt(r.sndUna).done {
		r.resends -= int(r.pkt(r.sndUna).resends)
		r.sndUna = psnAdd(r.sndUna, 1)
		moved++
	}
	if moved == 0 {
		return
	}
	r.settlePeer(qp, now)
	r.cc.onAck(moved, r.rtt.latest, r.rtt.minRTT, r.rtt.srtt, now)
	r.progressAt = now
	if r.freshSample {
		// Karn: only an RTT measured on a packet sent once may shrink a
		// backed-off RTO. Progress on resent packets alone keeps it, or a
		// host slower than the RTO would resend every packet, sample
		// none, and never learn.
		r.backoff, r.freshSample = 0, false
	}
	r.rnrLeft = int(qp.attr.RNRRetry)
	if r.undo != 0 && r.cc.slowStart {
		r.undo = 0 // the resends are being acknowledged: the timeout was real
	}
	r.rtoAt, r.probeAt = 0, 0 // re-armed from now by pump
	if !r.outstanding() && len(r.pk) > 64 {
		r.pk = nil // nothing in flight: a window's scoreboard is not kept idle
	}
}

// finished reports whether w may complete: a UD send once it has left, an
// RC request once sndUna has passed its last PSN (sndUna never passes a PSN
// not yet sent).
func (r *requester) finished(qp *QP, w *sendWQE) bool {
	if qp.typ == UD {
		return w.done
	}
	return w.assigned && psnDiff(r.sndUna, w.lastPSN()) > 0
}

// retire completes finished work requests at the head, in order.
func (r *requester) retire(qp *QP) {
	for r.head < r.tail {
		w := r.slot(r.head)
		if !r.finished(qp, w) {
			break
		}
		if w.op == WRRDMARead || w.op.isAtomic() {
			r.rdInFlight--
		}
		if w.signaled {
			qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: WCSuccess, Opcode: wcOpcodeFor(w.op), ByteLen: uint32(w.length), QPN: qp.qpn})
		}
		w.first, w.ud = span{}, udDest{}
		clear(w.more)
		r.head++
		if r.next < r.head {
			r.next = r.head
			if r.head < r.tail && r.slot(r.head).assigned {
				r.nextPSN = r.slot(r.head).psn
			}
		}
	}
}

// failHead completes the oldest work request with status and moves the
// QP to ERR, flushing the rest.
func (r *requester) failHead(qp *QP, status WCStatus) {
	if r.head < r.tail {
		w := r.slot(r.head)
		qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: status, Opcode: wcOpcodeFor(w.op), QPN: qp.qpn})
		r.head++
	}
	ev := EventQPFatal
	if status == WCRemAccessErr {
		ev = EventQPAccessErr
	} else if status == WCRemInvReqErr {
		ev = EventQPReqErr
	}
	qp.fail(ev)
}

// flush completes every outstanding work request with WCWRFlushErr.
func (r *requester) flush(qp *QP) {
	for ; r.head < r.tail; r.head++ {
		w := r.slot(r.head)
		qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: wcOpcodeFor(w.op), QPN: qp.qpn})
		w.first, w.ud = span{}, udDest{}
		clear(w.more)
	}
	r.next = r.head
	r.rdInFlight, r.rdRequests, r.lostCount = 0, 0, 0
	r.sndUna, r.sndMax, r.resends = r.sndNxt, r.sndNxt, 0
	r.rtoAt, r.probeAt, r.rnrAt, r.paceAt, r.rnrWait = 0, 0, 0, 0, false
	r.settlePeer(qp, qp.dev.now())
}

// onTimer runs the requester's deadlines: the end of an RNR wait or of a
// pacing gap, a tail-loss probe, a retransmission timeout, and the
// retry_cnt deadline that fails the QP.
func (r *requester) onTimer(qp *QP, now int64, b *txBatch) {
	if at := r.failAt(qp); at != 0 && now >= at {
		qp.stats.Timeouts++
		r.failHead(qp, WCRetryExcErr)
		return
	}
	if r.rnrAt != 0 && now >= r.rnrAt {
		r.rnrAt, r.rnrWait = 0, false
		r.progressAt = now
	}
	if r.paceAt != 0 && now >= r.paceAt {
		r.paceAt = 0
	}
	if r.outstanding() {
		switch {
		case r.rtoAt != 0 && now >= r.rtoAt:
			qp.stats.Timeouts++
			if r.backoff == 0 {
				// The first timeout since progress is most often a
				// stall of the host, not of the network (loss probes
				// found the network's losses already): resend the
				// oldest unconfirmed packet, as a probe would, and
				// trim the window.
				r.lossSuspected(r.probe(), now)
				r.cc.onLoss(1, r.rtt.srtt, now)
			} else {
				// Again: everything in flight is presumed lost.
				r.markLostFrom(r.sndUna)
				r.lossProven(now)
				if r.undo == 0 {
					r.undo = r.cc.cwnd
				}
				r.cc.onTimeout(now)
			}
			r.backoff++
			r.rtoAt, r.probeAt = 0, 0
		case r.probeAt != 0 && now >= r.probeAt:
			// A loss probe: two RTTs passed without news. Resend the
			// oldest packet the responder has not confirmed: it repairs a
			// lost tail or a lost resend directly, and its ACK reports
			// the rest.
			qp.stats.TailProbes++
			r.probeAt = 0
			r.lossSuspected(r.probe(), now)
		}
	}
	r.pump(qp, b, qp.dev.now()) // the timer goroutine's now may be old by the QPs before this one
	r.schedule(qp)
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

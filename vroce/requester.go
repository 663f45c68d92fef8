package vroce

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"time"

	"vroce.dev/vroce/wire"
)

// The requester and completer of an RC QP (IBA 9.7; rxe_req.c and
// rxe_comp.c): it turns send work requests into request packets, keeps them
// until acknowledged, retransmits go-back-N from a NAKed or timed-out PSN,
// waits out RNR NAKs and completes work requests in order.

const (
	// sendWindow caps the PSNs in flight. Selective repeat and congestion
	// control, which size it to the path, are issue 3's.
	sendWindow = 256
	// ackEvery asks for an ACK at least this often inside long messages,
	// so that the window keeps moving (rxe asks every 65 packets).
	ackEvery = 64
	// readChunk caps the response packets one READ request asks for. A
	// large READ goes out as several requests paced by the same window as
	// writes, so a lost response costs at most a window to re-request, not
	// the whole remainder.
	readChunk = 64
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
	respGot  int    // READ: response packets placed
	done     bool
}

func (w *sendWQE) spans(yield func(span) bool) {
	if w.first.mr == nil || !yield(w.first) {
		return
	}
	for _, s := range w.more {
		if !yield(s) {
			return
		}
	}
}

// gather copies the message bytes [off, off+len(dst)) into dst.
func (w *sendWQE) gather(dst []byte, off int) {
	if w.flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return
	}
	gather(w.spans, dst, off)
}

// scatter copies src into the message's local buffers at offset off (READ
// responses and atomic results).
func (w *sendWQE) scatter(src []byte, off int) { scatter(w.spans, src, off) }

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

	nextPSN uint32 // PSN of the next packet of sq[next]
	sndNxt  uint32 // first PSN not yet assigned
	sndUna  uint32 // oldest PSN not acknowledged
	sndMax  uint32 // one past the highest PSN ever sent

	rdInFlight    int // READs and atomics sent and not completed
	sinceAckReq   int
	retriesLeft   int
	rnrLeft       int
	rtoAt, rnrAt  int64 // deadlines on the device clock, 0 when off
	rnrWait       bool
	readRestart   uint32 // PSN a lost READ response was last re-requested from
	restarting    bool
	drainReported bool
}

func (r *requester) init(max int) {
	*r = requester{max: max}
}

func (r *requester) start(qp *QP) {
	a := &qp.attr
	r.nextPSN, r.sndNxt, r.sndUna, r.sndMax = a.SQPSN, a.SQPSN, a.SQPSN, a.SQPSN
	r.retriesLeft, r.rnrLeft = int(a.RetryCnt), int(a.RNRRetry)
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

// rto is the local ACK timeout; 0 means none (infinite).
func (qp *QP) rto() int64 {
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
			s, ok := qp.dev.lookup(sge.LKey, qp.pd, need, sge.Addr, uint64(sge.Length))
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

// pump sends what the window, the READ/atomic depth and fences allow.
func (r *requester) pump(qp *QP, b *txBatch) {
	if qp.state == QPSErr || r.rnrWait {
		return
	}
	mtu := qp.mtu
	maxRd := max(qp.attr.MaxRdAtomic, 1)
	for r.next < r.tail {
		w := r.slot(r.next)
		if !w.assigned {
			rd := w.op == WRRDMARead || w.op.isAtomic()
			if qp.state != QPSRTS || (w.flags&SendFence != 0 && r.rdInFlight > 0) || (rd && r.rdInFlight >= maxRd) {
				break
			}
			if psnDiff(r.sndNxt, r.sndUna) >= sendWindow {
				break
			}
			w.assigned, w.psn, w.npsn = true, r.sndNxt, w.packets(mtu)
			r.sndNxt = psnAdd(r.sndNxt, w.npsn)
			r.nextPSN = w.psn
			if rd {
				r.rdInFlight++
			}
		}
		if psnDiff(r.nextPSN, r.sndUna) >= sendWindow {
			break
		}
		r.emitRequest(qp, w, b)
		if psnDiff(r.nextPSN, psnAdd(w.psn, w.npsn)) >= 0 {
			r.next++
			if r.next < r.tail && r.slot(r.next).assigned {
				r.nextPSN = r.slot(r.next).psn
			}
		}
	}
	if r.rtoAt == 0 && psnDiff(r.sndNxt, r.sndUna) > 0 {
		r.armRTO(qp)
	}
}

func (r *requester) armRTO(qp *QP) {
	if rto := qp.rto(); rto > 0 {
		r.rtoAt = qp.dev.now() + rto
		qp.dev.schedule(qp, r.rtoAt)
	}
}

// emitRequest builds the packet of w at r.nextPSN and advances nextPSN.
func (r *requester) emitRequest(qp *QP, w *sendWQE, b *txBatch) {
	mtu := qp.mtu
	k := int(psnDiff(r.nextPSN, w.psn))
	readPSNs := 0
	buf := qp.emit(b)
	p := wire.Packet{BTH: wire.BTH{PKey: wire.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: r.nextPSN}}
	n := 0
	switch {
	case w.op == WRRDMARead:
		off := k * mtu
		// Chunks keep fixed boundaries (packets [64i, 64i+64)), so that a
		// re-request from the middle of one covers exactly PSNs the
		// responder has seen and the next request starts where it expects.
		chunk := min(w.length-off, (readChunk-k%readChunk)*mtu)
		p.BTH.Opcode, p.BTH.AckReq = wire.RCReadRequest, true
		p.RETH = wire.RETH{VA: w.raddr + uint64(off), RKey: w.rkey, DMALen: uint32(chunk)}
		readPSNs = max((chunk+mtu-1)/mtu, 1)
	case w.op.isAtomic():
		p.BTH.Opcode, p.BTH.AckReq = wire.RCFetchAdd, true
		if w.op == WRAtomicCmpAndSwp {
			p.BTH.Opcode = wire.RCCompareSwap
		}
		p.Atomic = wire.AtomicETH{VA: w.raddr, RKey: w.rkey, SwapAdd: w.cmpAdd, Compare: 0}
		if w.op == WRAtomicCmpAndSwp {
			p.Atomic.SwapAdd, p.Atomic.Compare = w.swap, w.cmpAdd
		}
	default:
		off := k * mtu
		n = min(mtu, w.length-off)
		first, last := k == 0, off+n >= w.length
		p.BTH.Opcode = requestOpcode(w.op, first, last)
		p.BTH.SE = last && w.flags&SendSolicited != 0
		p.BTH.AckReq = last || r.sinceAckReq >= ackEvery
		if first && w.op.isWrite() {
			p.RETH = wire.RETH{VA: w.raddr, RKey: w.rkey, DMALen: uint32(w.length)}
		}
		if last && w.op.hasImm() {
			p.Imm = w.imm
		}
	}
	hl, _ := p.EncodeHeaders(buf, n)
	if n > 0 {
		w.gather(buf[hl:hl+n], k*mtu)
	}
	b.add(qp.flow, wire.Finish(buf, hl+n))
	if p.BTH.AckReq {
		r.sinceAckReq = 0
	} else {
		r.sinceAckReq++
	}
	if w.op == WRRDMARead {
		r.nextPSN = psnAdd(r.nextPSN, readPSNs)
	} else {
		r.nextPSN = psnAdd(r.nextPSN, 1)
	}
	if psnDiff(p.BTH.PSN, r.sndMax) < 0 {
		qp.stats.Retransmits++
	}
	if psnDiff(r.nextPSN, r.sndMax) > 0 {
		r.sndMax = r.nextPSN
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

// onResponse handles an ACK, NAK, READ response or atomic ACK (the
// completer), then sends what the opened window allows.
func (r *requester) onResponse(qp *QP, p *wire.Packet) {
	psn := p.BTH.PSN
	if psnDiff(psn, r.sndNxt) >= 0 {
		return // acknowledges nothing we sent
	}
	una, next, nextPSN, head := r.sndUna, r.next, r.nextPSN, r.head
	op := p.BTH.Opcode
	switch {
	case op == wire.RCAcknowledge:
		r.onAck(qp, psn, p.AETH.Syndrome)
	case op == wire.RCAtomicAcknowledge:
		r.ackThrough(qp, psnAdd(psn, -1))
		if w := r.headWQE(); w != nil && w.op.isAtomic() && w.psn == psn && !w.done {
			var v [8]byte
			binary.NativeEndian.PutUint64(v[:], p.AtomicAck)
			w.scatter(v[:], 0)
			r.finishRead(qp, w)
		}
	default: // READ response
		r.ackThrough(qp, psnAdd(psn, -1))
		r.onReadResponse(qp, p)
	}
	r.retire(qp)
	if qp.state == QPSErr {
		return
	}
	if r.sndUna != una || r.next != next || r.nextPSN != nextPSN || r.head != head {
		qp.kick() // the window moved or a retransmission starts
	}
	qp.checkDrained()
}

func (r *requester) headWQE() *sendWQE {
	if r.head == r.tail || !r.slot(r.head).assigned {
		return nil
	}
	return r.slot(r.head)
}

func (r *requester) onAck(qp *QP, psn uint32, syn wire.Syndrome) {
	switch syn.Kind() {
	case wire.SyndromeACK:
		r.ackThrough(qp, psn)
	case wire.SyndromeRNRNAK:
		qp.stats.RNRNAKsRecv++
		r.ackThrough(qp, psnAdd(psn, -1))
		r.retire(qp)
		if r.rnrLeft == 0 {
			r.failAt(qp, psn, WCRNRRetryExcErr)
			return
		}
		if qp.attr.RNRRetry != 7 {
			r.rnrLeft--
		}
		r.goBackN(qp, psn)
		r.rnrWait = true
		r.rtoAt = 0
		r.rnrAt = qp.dev.now() + int64(rnrDelay(syn.Value()))
		qp.dev.schedule(qp, r.rnrAt)
	case wire.SyndromeNAK:
		r.ackThrough(qp, psnAdd(psn, -1))
		r.retire(qp)
		if syn.Value() == wire.NAKPSNSequenceError {
			qp.stats.SeqNAKsRecv++
			r.goBackN(qp, psn)
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
		r.failAt(qp, psn, status)
	}
}

// ackThrough marks every SEND and WRITE whose last PSN is at or before psn
// acknowledged. A READ or atomic ends the walk: only its response completes
// it, and an ACK beyond it means that response was lost.
func (r *requester) ackThrough(qp *QP, psn uint32) {
	for i := r.head; i < r.tail; i++ {
		w := r.slot(i)
		if !w.assigned || psnDiff(psn, w.psn) < 0 {
			break
		}
		if w.done {
			continue
		}
		if w.op == WRRDMARead || w.op.isAtomic() {
			if psnDiff(psn, w.lastPSN()) >= 0 {
				r.restartRead(qp, w)
			}
			break
		}
		if psnDiff(w.lastPSN(), psn) > 0 { // part of a long message
			r.progress(qp, psnAdd(psn, 1))
			break
		}
		w.done = true
		r.progress(qp, psnAdd(w.lastPSN(), 1))
	}
}

// progress records that everything before una is acknowledged.
func (r *requester) progress(qp *QP, una uint32) {
	if psnDiff(una, r.sndUna) <= 0 {
		return
	}
	r.sndUna = una
	if psnDiff(r.nextPSN, una) < 0 && r.next < r.tail && r.slot(r.next).assigned && psnDiff(una, r.slot(r.next).lastPSN()) <= 0 {
		r.nextPSN = una // a go-back-N in progress need not resend what is acknowledged
	}
	r.retriesLeft, r.rnrLeft = int(qp.attr.RetryCnt), int(qp.attr.RNRRetry)
	r.restarting = false
	if psnDiff(r.sndNxt, r.sndUna) > 0 {
		if rto := qp.rto(); rto > 0 {
			r.rtoAt = qp.dev.now() + rto // the timer entry re-arms lazily
		}
	} else {
		r.rtoAt = 0
	}
}

func (r *requester) onReadResponse(qp *QP, p *wire.Packet) {
	w := r.headWQE()
	if w == nil || w.op != WRRDMARead || w.done {
		return
	}
	psn := p.BTH.PSN
	expected := psnAdd(w.psn, w.respGot)
	switch d := psnDiff(psn, expected); {
	case d < 0:
		return // duplicate
	case d > 0: // a response was lost
		r.restartRead(qp, w)
		return
	}
	mtu := qp.mtu
	off := w.respGot * mtu
	last := w.respGot == w.npsn-1
	// A READ goes out in chunks, and is re-requested from the middle after
	// a loss, so FIRST and LAST mark requests, not the work request, and a
	// late answer to an earlier request may carry either: the PSN and the
	// length decide.
	if len(p.Payload) != min(mtu, w.length-off) {
		r.failAt(qp, w.psn, WCBadRespErr)
		return
	}
	w.scatter(p.Payload, off)
	w.respGot++
	r.progress(qp, psnAdd(psn, 1))
	if last {
		r.finishRead(qp, w)
	}
}

// restartRead asks again for the part of a READ (or the atomic) whose
// response was lost, once per loss.
func (r *requester) restartRead(qp *QP, w *sendWQE) {
	from := psnAdd(w.psn, w.respGot)
	if r.restarting && r.readRestart == from {
		return
	}
	r.restarting, r.readRestart = true, from
	r.goBackN(qp, from)
}

func (r *requester) finishRead(qp *QP, w *sendWQE) {
	w.done = true
	r.rdInFlight--
	r.progress(qp, psnAdd(w.lastPSN(), 1))
}

// goBackN makes psn the next PSN to send: the sender resumes there.
func (r *requester) goBackN(qp *QP, psn uint32) {
	for i := r.head; i < r.tail; i++ {
		w := r.slot(i)
		if !w.assigned {
			return
		}
		if psnDiff(psn, w.lastPSN()) <= 0 {
			if psnDiff(psn, w.psn) < 0 {
				psn = w.psn
			}
			if w.op == WRRDMARead {
				psn = psnAdd(w.psn, w.respGot) // re-request what has not arrived
			}
			r.next, r.nextPSN = i, psn
			return
		}
	}
}

// retire completes finished work requests at the head, in order.
func (r *requester) retire(qp *QP) {
	for r.head < r.tail {
		w := r.slot(r.head)
		if !w.done {
			break
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

// failAt completes the work request holding psn with status and moves the
// QP to ERR, flushing the rest.
func (r *requester) failAt(qp *QP, psn uint32, status WCStatus) {
	if w := r.headWQE(); w != nil {
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
	r.rdInFlight = 0
	r.rtoAt, r.rnrAt, r.rnrWait = 0, 0, false
}

func (r *requester) onTimer(qp *QP, now int64, b *txBatch) {
	if r.rnrAt != 0 && now >= r.rnrAt {
		r.rnrAt, r.rnrWait = 0, false
		r.armRTO(qp)
	}
	if r.rtoAt != 0 && now >= r.rtoAt {
		r.rtoAt = 0
		if r.head < r.tail && psnDiff(r.sndNxt, r.sndUna) > 0 {
			qp.stats.Timeouts++
			if r.retriesLeft == 0 {
				r.failAt(qp, r.sndUna, WCRetryExcErr)
				return
			}
			r.retriesLeft--
			r.restarting = false
			r.goBackN(qp, r.sndUna)
			r.armRTO(qp)
		}
	}
	r.pump(qp, b)
	for _, at := range []int64{r.rtoAt, r.rnrAt} {
		if at != 0 {
			qp.dev.schedule(qp, at)
		}
	}
}

// rnrDelay decodes an RNR timer code (IBA table 45).
func rnrDelay(code uint8) time.Duration {
	us := [32]float64{655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520}
	return time.Duration(us[code&31] * float64(time.Microsecond))
}

package vroce

import (
	"encoding/binary"

	"vroce.dev/vroce/wire"
)

// The completer of an RC QP (IBA 9.7.5; rxe_comp.c): it takes the
// responder's answers (ACKs with their SACK blocks, NAKs, RNR NAKs, READ
// responses, atomic ACKs), checks that each names a request in flight,
// tells the scoreboard and loss recovery what they say, and completes
// work requests in order once sndUna has passed them. It is the
// requester's other half and shares its state (requester.go).

// ack is an acknowledgement as the responder owes it and the completer
// takes it, whether it travels as an RC_ACKNOWLEDGE packet (with a SACK
// trailer, perhaps) or rides on a request (a piggybacked ACK): the PSN it
// speaks of, the AETH (ACK, RNR NAK or NAK, and the MSN) and the encoded
// SACK blocks, if any.
type ack struct {
	psn  uint32
	aeth wire.AETH
	sack []byte
}

// onResponse handles a response packet at now: an ACK or NAK, a READ
// response or an atomic ACK. A READ response's payload is in place
// already when placed (placeAhead).
func (r *requester) onResponse(qp *QP, p *wire.Packet, now int64, placed bool) {
	psn := p.BTH.PSN
	if p.BTH.Opcode == wire.RCAcknowledge {
		r.onAck(qp, ack{psn: psn, aeth: p.AETH, sack: p.Payload}, now)
		return
	}
	// A READ response or an atomic ACK names a READ or atomic PSN in
	// flight (rxe's check_psn); anything else is stale (below sndUna: the
	// second answer to a READ resent, its first already taken), or
	// forged.
	if !r.sb.awaitsResponse(psn) {
		if psnDiff(psn, r.sb.sndUna) < 0 {
			qp.stats.StaleResponses++
		} else {
			qp.stats.ForgedResponses++
		}
		return
	}
	una, lost := r.sb.sndUna, r.sb.lostCount
	r.ackThrough(qp, psnAdd(psn, -1), now)
	if p.BTH.Opcode == wire.RCAtomicAcknowledge {
		if w := qp.sq.find(psn); w != nil && w.op.isAtomic() && r.sb.delivers(psn) {
			var v [8]byte
			binary.NativeEndian.PutUint64(v[:], p.AtomicAck)
			w.scatter(v[:], 0)
			r.sb.delivered(psn, now, r.rec.rtt.MinRTT)
		}
	} else {
		r.onReadResponse(qp, p, now, placed)
	}
	r.settle(qp, una, lost, now)
}

// onAck takes an ACK, RNR NAK or NAK at now, from its own packet or
// riding on a request.
func (r *requester) onAck(qp *QP, a ack, now int64) {
	if !r.acknowledges(a) {
		qp.stats.ForgedResponses++
		return
	}
	una, lost := r.sb.sndUna, r.sb.lostCount
	r.takeAck(qp, a, now)
	r.settle(qp, una, lost, now)
}

// acknowledges reports whether an ACK speaks of a request this QP sent, as
// rxe's completer checks (check_psn): a NAK or an RNR NAK names a PSN in
// flight; an ACK one in flight or the last delivered (a duplicate ACK,
// which may carry SACK and D-SACK blocks). Anything else is stale, or
// forged: a NAK for a request never sent, or long since acknowledged,
// failed the head work request or stalled the send queue.
func (r *requester) acknowledges(a ack) bool {
	if a.aeth.Syndrome.Kind() == wire.SyndromeACK {
		return r.sb.tracked(a.psn) || a.psn == psnAdd(r.sb.sndUna, -1)
	}
	return r.sb.tracked(a.psn)
}

// settle finishes taking a response: sndUna moves over what is delivered,
// finished work requests complete, and what the window (moved from una) or
// newly found losses (lost before) allow is sent.
func (r *requester) settle(qp *QP, una uint32, lost int, now int64) {
	if qp.state == QPSErr {
		return
	}
	r.advance(qp, now)
	r.retire(qp)
	// Every response settles the peer budget here, whether or not sndUna
	// moved: what the responder now holds, or refused, draws on it no
	// more. (A response that fails the QP skips it; the flush settles.)
	r.settlePeer(qp, now)
	if r.sb.sndUna != una || r.sb.lostCount != lost {
		qp.kickAt(now) // the window moved or a retransmission is due
	}
	qp.checkDrained()
}

func (r *requester) takeAck(qp *QP, a ack, now int64) {
	psn, syn := a.psn, a.aeth.Syndrome
	switch syn.Kind() {
	case wire.SyndromeACK:
		r.ackThrough(qp, psn, now)
		var sack wire.SACK
		if len(a.sack) > 0 && wire.ParseSACK(&sack, a.sack) {
			qp.stats.SACKsRecv++
			if first := sack.Blocks[0]; sack.N > 0 && first.Count == 1 && psnDiff(first.First, psn) <= 0 {
				r.rec.onDuplicateReported(first.First) // below the cumulative ACK: a D-SACK
			}
			r.sb.onSACK(&sack, now, r.rec.rtt.MinRTT, func(sentAt int64) { r.rec.sample(now - sentAt) })
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
		r.sb.answered(psn) // the copy refused is no longer the peer's to read
		if qp.attr.SelectiveRepeat && r.sb.tracked(psn) {
			// Our responder holds the requests that followed the one it
			// refused, as it holds any that come out of order: only that
			// one goes again. (Marking them all lost resent the window
			// whenever the SACKs saying they were held came after the
			// RNR wait.)
			r.sb.markOneLost(psn)
		} else {
			r.sb.markLostFrom(psn) // the responder drops what follows, as rxe does
		}
		r.rnrWait = true
		r.rec.disarm()
		r.rnrAt = now + int64(rnrDelay(syn.Value()))
		r.schedule(qp)
	case wire.SyndromeNAK:
		r.ackThrough(qp, psnAdd(psn, -1), now)
		if syn.Value() == wire.NAKPSNSequenceError {
			// A go-back-N responder (rxe) dropped everything from psn.
			qp.stats.SeqNAKsRecv++
			r.sb.markLostFrom(psn)
			r.rec.lossProven(now)
			r.cc.onLoss(1, r.rec.rtt.SRTT, now)
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

// ackThrough records a cumulative ACK through psn: every SEND and WRITE
// PSN up to it is delivered, READ responses below it that have not come
// were lost (the responder sent them before this ACK), a collapse of the
// window awaiting judgement is judged, and the newest PSN sent once
// gives an RTT sample.
func (r *requester) ackThrough(qp *QP, psn uint32, now int64) {
	res := r.sb.ackThrough(psn, now, r.rec.rtt.SRTT, r.rec.rtt.MinRTT)
	if res.readsLost > 0 {
		r.rec.lossProven(now)
	}
	r.judgeTimeout(qp, psn, res, now)
	if res.sampleSentAt != 0 {
		r.rec.sample(now - res.sampleSentAt)
	}
}

// judgeTimeout decides, from a cumulative ACK through psn, whether the
// repeated timeout that collapsed the window was spurious. What keeps
// every ACK away for two RTOs is most often a stalled host, not the
// path: a receiver whose vCPU the hypervisor took for milliseconds reads
// the whole flight from its socket when it runs again. Between two
// namespaces at MTU 1500, in minutes when the hypervisor took 5-15% of
// the CPUs, bulk streams met 30-190 timeouts a run and fell to a tenth
// of their rate, while kernel TCP, whose ACKs leave from the sender's
// softirq, kept its own. The collapse is undone on either proof that the
// flight had arrived:
//   - F-RTO's (RFC 5682): the ACK covers a PSN of the collapsed flight
//     still queued to be sent again and not SACKed before, so its first
//     copy arrived. The collapse resends one pacer's burst at once, and
//     a stalled receiver's first batch reaches past it;
//   - Eifel's (lossRecovery.spurious): it covers a resend sooner than
//     one could be answered, as a receiver still reading its backlog
//     does after an ACK that opened the window to resend the rest.
//
// Until one comes the collapse awaits judgement; the ACK that passes
// its flight with neither confirms it.
func (r *requester) judgeTimeout(qp *QP, psn uint32, res ackResult, now int64) {
	switch {
	case r.cc.timeoutJudged():
	case res.lostArrived && psnDiff(res.firstLostArrived, r.rec.collapsedThrough) <= 0,
		r.rec.spurious(res.resentSentAt, now):
		r.cc.undoTimeout()
		qp.stats.SpuriousTimeouts++
		r.rec.onSpuriousTimeout()
	case psnDiff(psn, r.rec.collapsedThrough) >= 0:
		r.cc.confirmTimeout()
	}
}

// detectLosses marks lost what the scoreboard's evidence says is gone and
// tells loss recovery and the congestion controller.
func (r *requester) detectLosses(qp *QP, now int64) {
	if found, runs := r.sb.detectLosses(r.rec.rtt.SRTT); found > 0 {
		r.rec.lossProven(now)
		qp.stats.FastRetransmits++
		r.cc.onLoss(runs, r.rec.rtt.SRTT, now)
	}
}

func (r *requester) onReadResponse(qp *QP, p *wire.Packet, now int64, placed bool) {
	psn := p.BTH.PSN
	w, off, ok := r.readSlot(qp, psn)
	if !ok {
		return // a duplicate, or for a READ already complete
	}
	// A READ goes out in chunks and is re-requested in pieces, so FIRST
	// and LAST mark requests, not the work request: the PSN and the
	// length decide.
	if len(p.Payload) != min(qp.mtu, w.length-off) {
		r.failHead(qp, WCBadRespErr)
		return
	}
	if !placed {
		w.scatter(p.Payload, off)
	}
	if st := r.sb.pkt(psn); !st.resent() {
		r.rec.sample(now - st.sentAt)
	}
	r.sb.delivered(psn, now, r.rec.rtt.MinRTT)
	r.detectLosses(qp, now)
}

// readSlot returns the READ a response at psn belongs to and where in
// it the response's bytes go, unless the response is a duplicate (its
// PSN passed or delivered) or answers no READ.
func (r *requester) readSlot(qp *QP, psn uint32) (w *sendWQE, off int, ok bool) {
	if !r.sb.tracked(psn) || r.sb.pkt(psn).done {
		return nil, 0, false
	}
	if w = qp.sq.find(psn); w == nil || w.op != WRRDMARead {
		return nil, 0, false
	}
	return w, int(psnDiff(psn, w.psn)) * qp.mtu, true
}

// placeAhead returns where the payload of p goes when p is a READ
// response the requester awaits, for a READ not yet complete, its payload
// within one span of the READ's memory, so that the ICRC check can copy
// it there (QP.checkICRC): onReadResponse then finds it placed, by the
// same tests (readSlot, the length). A response that fails the check
// leaves its bytes only where the READ's own response for that PSN will
// write, in memory the READ leaves undefined until it completes.
func (r *requester) placeAhead(qp *QP, p *wire.Packet) ([]byte, bool) {
	psn, op := p.BTH.PSN, p.BTH.Opcode
	if qp.state == QPSRTR || op == wire.RCAcknowledge || op == wire.RCAtomicAcknowledge || !r.sb.awaitsResponse(psn) {
		return nil, false
	}
	w, off, ok := r.readSlot(qp, psn)
	n := len(p.Payload)
	if !ok || n == 0 || n != min(qp.mtu, w.length-off) {
		return nil, false
	}
	return within(w.first, w.more, off, n)
}

// advance moves sndUna over delivered PSNs and records the progress.
func (r *requester) advance(qp *QP, now int64) {
	moved := r.sb.advance()
	if moved == 0 {
		return
	}
	r.cc.onAck(moved, r.rec.takeSample(), r.rec.rtt.MinRTT, r.rec.rtt.SRTT, now)
	r.progressAt, r.retriedAt = now, 0
	r.rec.onProgress() // re-armed from now by pump
	r.rnrLeft = int(qp.attr.RNRRetry)
}

// finished reports whether w may complete: sndUna has passed its last
// PSN (sndUna never passes a PSN not yet sent).
func (r *requester) finished(w *sendWQE) bool {
	return w.assigned && psnDiff(r.sb.sndUna, w.lastPSN()) > 0
}

// retire completes finished work requests at the head, in order.
func (r *requester) retire(qp *QP) {
	q := &qp.sq
	for q.head < q.tail {
		w := q.slot(q.head)
		if !r.finished(w) {
			break
		}
		if w.op.awaitsResponse() {
			r.rdInFlight--
		}
		if w.signaled {
			qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: WCSuccess, Opcode: wcOpcodeFor(w.op), ByteLen: uint32(w.length), QPN: qp.qpn})
		}
		q.popHead()
		if q.next < q.head {
			q.next = q.head
			if q.head < q.tail && q.slot(q.head).assigned {
				r.nextPSN = q.slot(q.head).psn
			}
		}
	}
}

// failHead completes the oldest work request with status and moves the
// QP to ERR, flushing the rest.
func (r *requester) failHead(qp *QP, status WCStatus) {
	if q := &qp.sq; q.head < q.tail {
		w := q.popHead()
		qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: status, Opcode: wcOpcodeFor(w.op), QPN: qp.qpn})
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
	q := &qp.sq
	for q.head < q.tail {
		w := q.popHead()
		qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: wcOpcodeFor(w.op), QPN: qp.qpn})
	}
	q.next = q.head
	r.rdInFlight = 0
	r.sb.reset(r.sndNxt)
	r.rec.disarm()
	r.rnrAt, r.paceAt, r.rnrWait = 0, 0, false
	r.settlePeer(qp, qp.dev.now())
}

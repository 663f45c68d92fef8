package vroce

import (
	"encoding/binary"

	"vroce.dev/vroce/wire"
)

// The responder of an RC QP (IBA 9.7.5; rxe_resp.c): it executes requests
// in PSN order, places SEND and WRITE data, answers READs and atomics,
// NAKs what is not allowed, and acknowledges duplicates so a requester
// whose ACK was lost can move on. A request ahead of the PSN it expects is
// held and reported in the SACK blocks of the ACK it owes, when selective
// repeat was negotiated (held.go bounds what it holds); otherwise it is
// NAKed as out of sequence and dropped, as rxe does (go-back-N). The ACK
// it owes is coalesced within a receive batch (rxbatch.go), answering at
// most two requests for one (ackRequested), and may ride on a request of
// ours (piggyback).

type responder struct {
	ePSN    uint32 // the PSN expected next
	msn     uint32 // messages completed (AETH MSN)
	nakSent bool   // a sequence NAK for ePSN is out; do not repeat it

	inSend  bool
	recv    recvWQE // the receive a multi-packet SEND is filling
	recvOff int

	inWrite  bool
	write    span // where the current WRITE lands
	writeGot int

	atomics    []atomicResult // recent atomic results, for duplicates
	atomicNext int

	// READ answers waiting to be sent, their pace, and the duplicate
	// READ budget (readpace.go).
	pace readPacer

	ackPending bool   // a coalesced ACK is owed
	ackOwedAt  int64  // device time it became owed (owesAck)
	ackedPSN   uint32 // the PSN the last ACK that left acknowledged through
	// acked: an ACK (or a piggybacked one) has gone into a send batch
	// since the QP was connected, which sendLastAckLocked sends again.
	acked     bool
	asked     int  // requests for an ACK the owed one answers (ackRequested)
	ackQueued bool // the QP is on the receive batch's ACK list
	// replies predicts that the program answers what this QP receives
	// before it waits again, so that a waiter holding the receive turn
	// may leave the ACK for the answer to carry (receiveTurn), as TCP's
	// delayed ACK has its ping-pong mode. It is learnt: an ACK that went
	// alone just before a request of ours could have ridden on it sets it
	// (ackedAlone); an ACK left owed that no request took clears it.
	replies, ackedAlone bool
	// With selective repeat, the owed ACK also reports a SEND or WRITE
	// PSN that arrived twice, as its first SACK block, below the
	// cumulative PSN (as TCP's D-SACK does): the requester learns that
	// its loss probe was spurious (see requester.lossAt).
	dupPSN  uint32
	dupOwed bool

	// Selective repeat, when negotiated: requests that arrive ahead of
	// ePSN are kept (up to maxWindow PSNs ahead) and reported in SACKs,
	// then executed in order once the gap fills.
	sr        bool
	held      []heldPacket // ring indexed by PSN, allocated on first use
	heldN     int
	heldBytes int // what the held packets' buffers cost (held.go bounds it)
	heldHigh  uint32
}

// heldPacket is a request kept out of order: its bytes, re-parsed when its
// turn comes.
type heldPacket struct {
	psn uint32
	buf *[]byte
}

// atomicResult remembers what an atomic returned so that a retransmitted
// request is answered from here and never executed twice.
type atomicResult struct {
	psn   uint32
	orig  uint64
	valid bool
}

func (r *responder) reset(qp *QP, psn uint32, sr bool) {
	r.release(qp)
	*r = responder{ePSN: psn, ackedPSN: psnAdd(psn, -1), sr: sr, pace: readPacer{dups: tokenBucket{tokens: dupReadBurst}}}
}

// release returns held packets' buffers to the device.
func (r *responder) release(qp *QP) {
	for i := range r.held {
		if r.held[i].buf != nil {
			r.free(qp, &r.held[i])
		}
	}
}

func (r *responder) onRequest(qp *QP, p *wire.Packet, raw []byte, rb *rxBatch, placed bool) {
	d := psnDiff(p.BTH.PSN, r.ePSN)
	if p.BTH.Opcode != wire.RCReadRequest || d > 0 {
		// Whatever this answers goes after the READ answers in waiting.
		r.flushReads(qp, rb.out)
	}
	switch {
	case d > 0:
		qp.stats.OutOfSequence++
		if r.sr {
			r.hold(qp, p.BTH.PSN, raw)
			r.owesAck(qp, rb)
			return
		}
		if !r.nakSent {
			r.nakSent = true
			qp.stats.SeqNAKsSent++
			r.sendAck(qp, rb.out, wire.NAK(wire.NAKPSNSequenceError), r.ePSN)
		}
	case d < 0:
		qp.stats.Duplicates++
		r.onDuplicate(qp, p, rb)
	default:
		r.nakSent = false
		r.execute(qp, p, rb, placed)
		if r.heldN > 0 {
			// A gap filled: the requester must hear it at once, whatever
			// the packets asked.
			r.drain(qp, rb)
			r.owesAck(qp, rb)
		}
	}
}

// hold keeps a copy of a request that arrived ahead of ePSN.
func (r *responder) hold(qp *QP, psn uint32, raw []byte) {
	if int(psnDiff(psn, r.ePSN)) >= maxWindow {
		return // beyond any window the requester may use
	}
	if r.held == nil {
		r.held = make([]heldPacket, maxWindow)
	}
	h := &r.held[psn&(maxWindow-1)]
	if h.buf != nil {
		if h.psn == psn {
			return // a duplicate of one already held
		}
		r.free(qp, h) // stale: passed by ePSN
	}
	if r.heldBytes+1<<heldClass(len(raw)) > maxHeldPerQP {
		qp.stats.HeldDrops++
		return
	}
	buf, cost, ok := qp.dev.held.take(raw)
	if !ok {
		qp.stats.HeldDrops++
		return
	}
	*h = heldPacket{psn: psn, buf: buf}
	r.heldN++
	r.heldBytes += cost
	qp.stats.HeldOutOfOrder++
	if r.heldN == 1 || psnDiff(psn, r.heldHigh) > 0 {
		r.heldHigh = psn
	}
}

// free lets a held packet's buffer go.
func (r *responder) free(qp *QP, h *heldPacket) {
	r.heldBytes -= cap(*h.buf)
	r.heldN--
	qp.dev.held.give(h.buf)
	*h = heldPacket{}
}

// drain executes held requests that are now in order.
func (r *responder) drain(qp *QP, rb *rxBatch) {
	defer r.shrink()
	for r.heldN > 0 && qp.state != QPSErr {
		h := &r.held[r.ePSN&(maxWindow-1)]
		if h.buf == nil {
			return // a gap: what is held waits for it
		}
		if h.psn != r.ePSN { // never ahead (hold): passed by ePSN
			r.free(qp, h)
			continue
		}
		buf := h.buf
		*h = heldPacket{}
		r.heldN--
		var p wire.Packet
		before := r.ePSN
		if wire.Parse(&p, *buf) == nil {
			r.execute(qp, &p, rb, false)
		}
		r.heldBytes -= cap(*buf) // executed: the packet is done with
		qp.dev.held.give(buf)
		if r.ePSN == before { // RNR or an error: the requester resends
			return
		}
	}
}

// shrink lets the held-packet ring go once nothing is held: an idle QP
// keeps no 1,024-entry ring.
func (r *responder) shrink() {
	if r.heldN == 0 {
		r.held = nil
	}
}

// dropPassed frees the held requests whose PSNs a READ request's
// response PSNs passed over (a hostile or broken requester's: an honest
// one numbers nothing inside a READ): they never execute. Only a READ
// moves ePSN by more than one, so only it leaves held requests behind
// ePSN; the ring is searched then, not at every gap drain meets: that
// search of 1,024 slots, once for each hole a lossy stream filled, was
// 0.7% of the one CPU both ends of a stream shared under 5% loss (perf,
// 91 of 13,665 samples), where 91% of the packets arrive behind a hole.
func (r *responder) dropPassed(qp *QP) {
	for i := range r.held {
		if h := &r.held[i]; h.buf != nil && psnDiff(h.psn, r.ePSN) < 0 {
			r.free(qp, h)
		}
	}
	r.shrink()
}

// sack describes what is held, lowest runs first.
func (r *responder) sack(s *wire.SACK) {
	for p := psnAdd(r.ePSN, 1); psnDiff(p, r.heldHigh) <= 0; {
		h := &r.held[p&(maxWindow-1)]
		if h.buf == nil || h.psn != p {
			p = psnAdd(p, 1)
			continue
		}
		first, n := p, uint32(0)
		for ; psnDiff(p, r.heldHigh) <= 0; p, n = psnAdd(p, 1), n+1 {
			if h := &r.held[p&(maxWindow-1)]; h.buf == nil || h.psn != p {
				break
			}
		}
		if !s.AppendBlock(first, n) {
			return
		}
	}
}

func (r *responder) execute(qp *QP, p *wire.Packet, rb *rxBatch, placed bool) {
	f := p.BTH.Opcode.Flags()
	first, last := f&wire.IsFirst != 0, f&wire.IsLast != 0
	// Opcode sequence: a message's packets come FIRST, MIDDLE..., LAST.
	inSeq := true
	switch {
	case f&wire.IsSend != 0:
		inSeq = !r.inWrite && first != r.inSend
	case f&wire.IsWrite != 0:
		inSeq = !r.inSend && first != r.inWrite
	default:
		inSeq = !r.inSend && !r.inWrite
	}
	if !inSeq {
		r.abort(qp, p, rb, wire.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	mtu := qp.mtu
	// Every packet but a message's last carries exactly one MTU.
	if f&wire.HasPayload != 0 && (len(p.Payload) > mtu || (!last && len(p.Payload) != mtu)) {
		r.abort(qp, p, rb, wire.NAKInvalidRequest, WCRemInvReqErr)
		return
	}
	access := qp.attr.AccessFlags
	switch {
	case f&wire.IsSend != 0:
		if first {
			w, ok := qp.popRecv()
			if !ok {
				r.rnr(qp, p, rb)
				return
			}
			r.recv, r.recvOff, r.inSend = w, 0, true
		}
		if r.recvOff+len(p.Payload) > r.recv.total {
			r.abort(qp, p, rb, wire.NAKInvalidRequest, WCLocLenErr)
			return
		}
		if !placed {
			scatter(r.recv.first, r.recv.more, p.Payload, r.recvOff)
		}
		r.recvOff += len(p.Payload)
		if last {
			r.inSend = false
			r.msn++
			r.completeRecv(qp, p, WCRecv, r.recvOff)
		}
	case f&wire.IsWrite != 0:
		dst, at := r.write, r.writeGot
		if first {
			if access&AccessRemoteWrite == 0 {
				r.abort(qp, p, rb, wire.NAKRemoteAccessError, WCWRFlushErr)
				return
			}
			s, ok := span{}, true
			if p.RETH.DMALen > 0 {
				s, ok = qp.dev.lookupRemote(p.RETH.RKey, qp.pd, AccessRemoteWrite, p.RETH.VA, uint64(p.RETH.DMALen))
			}
			if !ok {
				r.abort(qp, p, rb, wire.NAKRemoteAccessError, WCWRFlushErr)
				return
			}
			dst, at = s, 0
		}
		got := at + len(p.Payload)
		if got > dst.n || (last && got != dst.n) {
			r.abort(qp, p, rb, wire.NAKInvalidRequest, WCWRFlushErr)
			return
		}
		// RNR is decided before any state changes: the requester resends
		// this very packet.
		if f&wire.ConsumesRecv != 0 {
			w, ok := qp.popRecv()
			if !ok {
				r.rnr(qp, p, rb)
				return
			}
			r.recv = w
		}
		if !placed {
			copy(dst.bytes()[at:], p.Payload)
		}
		r.write, r.writeGot, r.inWrite = dst, got, !last
		if last {
			r.msn++
			if f&wire.ConsumesRecv != 0 {
				r.completeRecv(qp, p, WCRecvRDMAWithImm, dst.n)
			}
		}
	case p.BTH.Opcode == wire.RCReadRequest:
		if r.refuseRead(qp) {
			return // as if lost: ePSN stays, the requester asks again
		}
		s, ok := r.readSpan(qp, p)
		if !ok {
			r.abort(qp, p, rb, wire.NAKRemoteAccessError, WCWRFlushErr)
			return
		}
		r.msn++
		n := max((s.n+qp.mtu-1)/qp.mtu, 1)
		r.ePSN = psnAdd(r.ePSN, n)
		if n > 1 && r.heldN > 0 {
			r.dropPassed(qp)
		}
		r.answerRead(qp, rb.out, s, p.BTH.PSN, n, qp.dev.now())
		return
	case f&wire.IsAtomic != 0:
		r.executeAtomic(qp, p, rb)
		return
	}
	r.ePSN = psnAdd(r.ePSN, 1)
	if p.BTH.AckReq {
		r.ackRequested(qp, rb)
	}
}

// placeAhead returns where the payload of p goes when p is the packet
// the responder waits for next and a middle or last packet of the SEND
// or WRITE it is receiving (its payload within one span of a SEND's
// receive buffer), so that the ICRC check can copy it there
// (checkICRC): execute then finds it placed, by the same tests in the
// same order. The rest (a message's first packet, which takes a receive
// WQE or names the memory; a WRITE's last that takes a receive WQE,
// which may be refused; anything out of order) is checked first and
// copied after. A packet that fails the check leaves its bytes where the
// message it claims to continue goes, at the very place its resend will
// write: in a receive buffer no completion has handed back, or in memory
// a WRITE under way has made undefined until it completes. Nothing else
// changes.
func (r *responder) placeAhead(qp *QP, p *wire.Packet) ([]byte, bool) {
	f := p.BTH.Opcode.Flags()
	n := len(p.Payload)
	last := f&wire.IsLast != 0
	if f&wire.IsFirst != 0 || p.BTH.PSN != r.ePSN || n == 0 || n > qp.mtu || !last && n != qp.mtu {
		return nil, false
	}
	switch {
	case f&wire.IsSend != 0 && r.inSend && !r.inWrite && r.recvOff+n <= r.recv.total:
		return within(r.recv.first, r.recv.more, r.recvOff, n)
	case f&wire.IsWrite != 0 && f&wire.ConsumesRecv == 0 && r.inWrite && !r.inSend:
		got := r.writeGot + n
		if got > r.write.n || last && got != r.write.n {
			return nil, false
		}
		return r.write.bytes()[r.writeGot:got], true
	}
	return nil, false
}

func (r *responder) readSpan(qp *QP, p *wire.Packet) (span, bool) {
	if qp.attr.AccessFlags&AccessRemoteRead == 0 {
		return span{}, false
	}
	if p.RETH.DMALen == 0 {
		return span{}, true
	}
	return qp.dev.lookupRemote(p.RETH.RKey, qp.pd, AccessRemoteRead, p.RETH.VA, uint64(p.RETH.DMALen))
}

func (r *responder) completeRecv(qp *QP, p *wire.Packet, op WCOpcode, n int) {
	wc := WorkCompletion{ID: r.recv.id, Status: WCSuccess, Opcode: op, ByteLen: uint32(n), QPN: qp.qpn, SrcQP: qp.attr.DestQPN, Src: qp.flow.Dst}
	if p.BTH.Opcode.Flags()&wire.HasImm != 0 {
		wc.Flags, wc.Imm = WCWithImm, p.Imm
	}
	r.recv = recvWQE{}
	qp.complete(qp.recvCQ, &wc)
}

func (r *responder) executeAtomic(qp *QP, p *wire.Packet, rb *rxBatch) {
	a := &p.Atomic
	if qp.attr.AccessFlags&AccessRemoteAtomic == 0 {
		r.abort(qp, p, rb, wire.NAKRemoteAccessError, WCWRFlushErr)
		return
	}
	if a.VA%8 != 0 {
		r.abort(qp, p, rb, wire.NAKInvalidRequest, WCWRFlushErr)
		return
	}
	s, ok := qp.dev.lookupRemote(a.RKey, qp.pd, AccessRemoteAtomic, a.VA, 8)
	if !ok {
		r.abort(qp, p, rb, wire.NAKRemoteAccessError, WCWRFlushErr)
		return
	}
	mem := s.bytes()
	d := qp.dev
	d.atomicMu.Lock()
	orig := binary.NativeEndian.Uint64(mem)
	if p.BTH.Opcode == wire.RCFetchAdd {
		binary.NativeEndian.PutUint64(mem, orig+a.SwapAdd)
	} else if orig == a.Compare {
		binary.NativeEndian.PutUint64(mem, a.SwapAdd)
	}
	d.atomicMu.Unlock()
	if r.atomics == nil {
		r.atomics = make([]atomicResult, max(qp.attr.MaxDestRdAtomic, 1))
	}
	r.atomics[r.atomicNext] = atomicResult{psn: p.BTH.PSN, orig: orig, valid: true}
	r.atomicNext = (r.atomicNext + 1) % len(r.atomics)
	r.msn++
	r.ePSN = psnAdd(r.ePSN, 1)
	r.sendAtomicAck(qp, rb.out, p.BTH.PSN, orig)
}

// onDuplicate answers a request already executed: SENDs and WRITEs with an
// ACK of the last PSN, READs by reading again (memory reads are
// idempotent), atomics from the result cache, never by executing again.
func (r *responder) onDuplicate(qp *QP, p *wire.Packet, rb *rxBatch) {
	op := p.BTH.Opcode
	switch {
	case op == wire.RCReadRequest:
		s, ok := r.readSpan(qp, p)
		if !ok {
			return
		}
		n := (int(p.RETH.DMALen) + qp.mtu - 1) / qp.mtu
		if psnDiff(psnAdd(p.BTH.PSN, max(n, 1)), r.ePSN) > 0 {
			return // claims PSNs that were never requested
		}
		now := qp.dev.now()
		r.onReadLoss(p.BTH.PSN, now)
		r.supersedeReads(qp, p.BTH.PSN)
		r.answerDuplicateRead(qp, rb.out, s, p.BTH.PSN, max(n, 1), now)
	case op.Flags()&wire.IsAtomic != 0:
		for _, a := range r.atomics {
			if a.valid && a.psn == p.BTH.PSN {
				r.sendAtomicAck(qp, rb.out, a.psn, a.orig)
				return
			}
		}
	default:
		if r.sr {
			r.dupPSN, r.dupOwed = p.BTH.PSN, true
		}
		r.owesAck(qp, rb)
	}
}

// rnr refuses a request that found no receive posted: the requester
// retries the same PSN after the QP's min_rnr_timer.
func (r *responder) rnr(qp *QP, p *wire.Packet, rb *rxBatch) {
	qp.stats.RNRNAKsSent++
	r.sendAck(qp, rb.out, wire.RNRNAK(qp.attr.MinRNRTimer), p.BTH.PSN)
}

// abort NAKs a request that can never succeed and moves the QP to ERR; a
// receive the message was filling completes with recvStatus.
func (r *responder) abort(qp *QP, p *wire.Packet, rb *rxBatch, code uint8, recvStatus WCStatus) {
	r.flushReads(qp, rb.out) // a READ refused: the answers before it go first
	r.sendAck(qp, rb.out, wire.NAK(code), p.BTH.PSN)
	if r.inSend || r.recv.first.mr != nil {
		qp.complete(qp.recvCQ, &WorkCompletion{ID: r.recv.id, Status: recvStatus, Opcode: WCRecv, QPN: qp.qpn})
		r.recv, r.inSend = recvWQE{}, false
	}
	ev := EventQPReqErr
	if code == wire.NAKRemoteAccessError {
		ev = EventQPAccessErr
	}
	qp.fail(ev)
}

// owesAck owes one ACK for this QP, sent when the receive batch rb ends:
// however many packets of the batch asked, the requester gets one
// cumulative ACK.
func (r *responder) owesAck(qp *QP, rb *rxBatch) {
	if !r.ackPending {
		r.ackPending, r.ackOwedAt = true, rb.now
	}
	rb.oweAck(qp)
}

// mayHoldAck reports whether the owed ACK may wait for an answer to carry
// it: the program answers (replies), the peer reads piggybacked ACKs,
// and the ACK has nothing to say that a piggybacked one cannot (SACK
// blocks, a duplicate's report) nor READ answers to wait behind.
//
// Nor may an ACK wait that acknowledges more than holdMaxPackets, as
// TCP acknowledges at least every second full segment: a stream's
// receiver answers with credit updates, which taught it that it replies,
// and its bulk sender, clocked by these ACKs, lost half its speed when
// they waited for one.
func (r *responder) mayHoldAck(qp *QP) bool {
	return r.replies && qp.attr.PiggybackACK && !(r.sr && r.heldN > 0) && !r.dupOwed && !r.readsWaiting() &&
		psnDiff(psnAdd(r.ePSN, -1), r.ackedPSN) <= holdMaxPackets
}

// holdMaxPackets is the most packets an ACK held for an answer may
// acknowledge.
const holdMaxPackets = 2

// ackCopiesFrom is how many requests for an ACK a receive batch's one
// coalesced ACK must answer for it to leave twice.
const ackCopiesFrom = 2

// ackRequested owes the ACK a request asked for. The requester asks four
// times a window (ackInterval), and a receive batch can hold a whole
// window: coalesced to one ACK, whose loss (one in twenty under 5% loss)
// left the requester nothing to go on until its loss probe. So the ACK
// of a batch in which two or more requests asked leaves twice, each a
// datagram of its own (sendHeaders): both are lost together one time in
// 400 at 5% loss. It had left at every second request, as TCP
// acknowledges every second segment; but a batch's ACKs all leave with
// it (sending mid-batch cost a system call per QP per second request,
// and 32 QPs' bulk a third of its speed), so the earlier of them told the
// requester nothing the last did not, and when windows were small (every
// packet asking) they were one datagram for every two received: 32
// keep-alive HTTP streams through vroce-run sent 0.4-0.6 ACKs a data packet,
// and the receiving daemon spent 45% of its CPU sending them.
func (r *responder) ackRequested(qp *QP, rb *rxBatch) {
	r.owesAck(qp, rb)
	r.asked++
}

// owed is the cumulative ACK the responder owes, as the requester's
// completer takes it: every request through ePSN-1 executed, and the MSN.
// Its SACK blocks are the sender's to add (sendOwedAckLocked).
func (r *responder) owed() ack {
	return ack{psn: psnAdd(r.ePSN, -1), aeth: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: r.msn}}
}

// sendOwedAckLocked sends the coalesced ACK, if one is still owed, under
// qp.mu.
func (qp *QP) sendOwedAckLocked(out *txBatch) {
	r := &qp.resp
	// A QP moving to ERR sends what it owes first (toErrorLocked).
	if r.ackPending && qp.state != QPSErr && qp.state != QPSReset && !r.readsWaiting() {
		r.ackedAlone = true
		var s wire.SACK
		if r.dupOwed {
			r.dupOwed = false
			s.AppendBlock(r.dupPSN, 1)
		}
		if r.sr && r.heldN > 0 {
			r.sack(&s)
		}
		if s.N > 0 {
			qp.stats.SACKsSent++
		}
		copies := 1
		if r.asked >= ackCopiesFrom {
			copies = 2 // ackRequested says why
		}
		r.ackPending, r.asked, r.acked = false, 0, true
		a := r.owed()
		r.ackedPSN = a.psn
		for range copies {
			r.sendHeaders(qp, out, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: a.psn}, AETH: a.aeth}, &s)
		}
	}
}

// piggyback hands the coalesced ACK, if one is owed, to a request about
// to leave for the peer, when the peer reads piggybacked ACKs and the
// requester says the ACK may ride on this packet (here; a later packet of
// the message may suit it better: requester.ackRidesHere). An ACK with
// SACK blocks to report still goes on its own.
func (r *responder) piggyback(qp *QP, p *wire.Packet, here bool) {
	if r.ackedAlone && !r.ackPending {
		r.replies = true // that ACK could have waited for this request
	}
	r.ackedAlone = false
	if !here || !r.ackPending || !qp.attr.PiggybackACK || r.sr && r.heldN > 0 || r.dupOwed || r.readsWaiting() || !p.BTH.Opcode.CanCarryPiggyACK() {
		return
	}
	r.ackPending, r.asked, r.acked = false, 0, true
	a := r.owed()
	r.ackedPSN = a.psn
	p.BTH.PiggyACK = true
	p.Piggy = wire.PiggyACK{PSN: a.psn, AETH: a.aeth}
	qp.stats.PiggyACKsSent++
}

func (r *responder) sendAck(qp *QP, out *txBatch, syn wire.Syndrome, psn uint32) {
	r.sendHeaders(qp, out, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: psn}, AETH: wire.AETH{Syndrome: syn}}, nil)
}

func (r *responder) sendAtomicAck(qp *QP, out *txBatch, psn uint32, orig uint64) {
	r.sendHeaders(qp, out, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCAtomicAcknowledge, PSN: psn},
		AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits}, AtomicAck: orig}, nil)
}

// sendHeaders sends a response without payload (but for a SACK trailer on
// an ACK), addressed to the peer QP and carrying the current MSN.
func (r *responder) sendHeaders(qp *QP, out *txBatch, p *wire.Packet, s *wire.SACK) {
	if p.BTH.Opcode == wire.RCAcknowledge {
		qp.stats.ACKsSent++
	}
	buf := qp.packetBuf(out)
	p.BTH.PKey, p.BTH.DestQP, p.AETH.MSN = wire.DefaultPKey, qp.attr.DestQPN, r.msn
	trailer := 0
	if s != nil && s.N > 0 {
		trailer = s.Len()
	}
	n, _ := p.EncodeHeaders(buf, trailer)
	if trailer > 0 {
		n += s.Encode(buf[n:])
	}
	out.addSealed(qp, wire.Finish(buf, n), false) // ACKs leave one by one
}

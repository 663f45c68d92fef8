package vroce

import "vroce.dev/vroce/wire"

// The scoreboard: what an RC requester knows of every PSN it has sent and
// not yet seen delivered in order (IRN's selective repeat, with RACK's
// loss detection). It takes PSNs and times and knows nothing of QPs, work
// requests, timers or the window: the requester tells it what it sent, the
// completer what the responder said, and both read back what to resend.

// pktState is what the requester knows of one PSN in flight.
type pktState struct {
	sentAt int64
	// order is the place of its latest send among all the QP's sends:
	// what left in one pump shares sentAt, but not its order on the wire.
	order uint64
	// resends counts the times it was sent again: a resent PSN gives no
	// RTT sample (Karn), and each resend is a copy the peer may still
	// hold unread (a timeout's resends, most of all, are often of
	// packets that were only slow), which the peer budget counts.
	resends uint8
	held    bool // SACKed: the responder holds it, do not resend
	done    bool // delivered: acknowledged, or its READ response or atomic ACK arrived
	lost    bool // queued to be sent again
	read    bool // a READ or atomic PSN: delivered only by its response
	// unheld: SACKed once, then queued to be sent again by a timeout that
	// presumed the responder had dropped it; its arrival is old news.
	unheld bool
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

// scoreboard is the per-PSN state of an RC requester's packets in flight.
// The QP's requester owns it, under qp.mu.
type scoreboard struct {
	pk         []pktState // per PSN in [sndUna, sndMax), a power of two long
	sndUna     uint32     // oldest PSN not known delivered
	sndMax     uint32     // one past the highest PSN ever sent
	lostCount  int        // PSNs marked lost and not yet resent
	lostFrom   uint32     // no PSN below it is marked lost
	highHeld   uint32     // highest PSN known received (ACK, SACK or response)
	rackSentAt int64      // latest send time among PSNs known received
	rackOrder  uint64     // latest send order (pktState.order) among them
	sends      uint64     // sends so far: the next send's order
	resends    int        // the sum of pktState.resends over [sndUna, sndMax)
	arrivals   int        // PSNs in [sndUna, sndMax) done or held: out of the network
	// rdRequests counts READ and atomic request packets whose responses
	// are still awaited: what the responder holds resources for
	// (max_rd_atomic bounds it, not the work requests, since a READ goes
	// out as several requests).
	rdRequests int
}

// lossThreshold is how many later PSNs must have arrived before a missing
// one counts as lost by sequence (TCP's duplicate-ACK threshold).
const lossThreshold = 3

// minReorder is the least time a packet may trail a later one that
// arrived before it counts as lost by time.
const minReorder = 10_000

// start begins at psn with nothing in flight.
func (s *scoreboard) start(psn uint32) {
	s.sndUna, s.sndMax = psn, psn
	s.highHeld = psnAdd(psn, -1)
}

// reset forgets everything in flight, as if every PSN before psn had been
// delivered (a flush: the work requests are gone).
func (s *scoreboard) reset(psn uint32) {
	s.sndUna, s.sndMax = psn, psn
	s.lostCount, s.resends, s.rdRequests, s.arrivals = 0, 0, 0, 0
}

// pkt is the entry of psn, which must be in [sndUna, sndMax) or the next
// PSN to send; the scoreboard grows to hold it.
func (s *scoreboard) pkt(psn uint32) *pktState {
	need := int(psnDiff(psn, s.sndUna)) + 1
	if need > len(s.pk) {
		size := max(64, len(s.pk))
		for size < need {
			size *= 2
		}
		pk := make([]pktState, size)
		if len(s.pk) > 0 {
			for p := s.sndUna; p != s.sndMax; p = psnAdd(p, 1) {
				pk[p&uint32(size-1)] = s.pk[p&uint32(len(s.pk)-1)]
			}
		}
		s.pk = pk
	}
	return &s.pk[psn&uint32(len(s.pk)-1)]
}

// tracked reports whether psn is on the scoreboard: sent and not yet
// passed by sndUna. Only such PSNs may be looked up; any other index would
// alias a live entry of the ring.
func (s *scoreboard) tracked(psn uint32) bool {
	return psnDiff(psn, s.sndUna) >= 0 && psnDiff(psn, s.sndMax) < 0
}

// pipe is how many PSNs are in the network as far as the requester can
// tell: sent and passed by sndUna, neither delivered nor held by the
// responder nor presumed lost (RFC 6675's pipe). The window bounds this,
// not the span from sndUna: a hole at sndUna would otherwise stop all
// sending for the RTT its repair takes, and under a few percent of
// random loss a window nearly always has one.
func (s *scoreboard) pipe() int {
	return max(s.inFlight()-s.arrivals-s.lostCount, 0)
}

// outstanding reports whether any sent PSN is not yet delivered.
func (s *scoreboard) outstanding() bool { return s.sndUna != s.sndMax }

// inFlight is how many PSNs were sent and not yet passed by sndUna.
func (s *scoreboard) inFlight() int { return int(psnDiff(s.sndMax, s.sndUna)) }

// arrived reports whether the responder has psn: delivered or held.
func (s *scoreboard) arrived(psn uint32) bool {
	if !s.tracked(psn) {
		return false
	}
	st := s.pkt(psn)
	return st.done || st.held
}

// awaitsResponse reports whether psn is a READ or atomic PSN in flight:
// one a READ response or an atomic ACK may name.
func (s *scoreboard) awaitsResponse(psn uint32) bool { return s.tracked(psn) && s.pkt(psn).read }

// delivers reports whether psn is in flight and not yet delivered.
func (s *scoreboard) delivers(psn uint32) bool { return s.tracked(psn) && !s.pkt(psn).done }

// sent records that psn left at now, for the first time or again; read
// marks a READ or atomic PSN. It reports whether it was a resend.
func (s *scoreboard) sent(psn uint32, now int64, read bool) (resent bool) {
	resent = psnDiff(psn, s.sndMax) < 0
	st := s.pkt(psn)
	if !resent {
		*st = pktState{read: read}
		s.sndMax = psnAdd(psn, 1)
	} else if st.lost {
		st.lost, st.unheld = false, false
		s.lostCount--
	}
	st.sentAt, st.order = now, s.sends
	s.sends++
	if resent && st.resends < 255 {
		st.resends++
		s.resends++
	}
	return resent
}

// await records that the request ending at last awaits the response of
// psn, which an earlier request may have awaited too (a resend asks again
// for responses presumed lost).
func (s *scoreboard) await(last, psn uint32) {
	st := s.pkt(psn)
	s.release(psn, st)
	st.awaited, st.lastOff = true, uint8(psnDiff(last, psn))
	l := s.pkt(last)
	if l.left == 0 {
		s.rdRequests++
	}
	l.left++
}

// release stops awaiting psn's response, whose state is st: it came, or
// is presumed lost.
func (s *scoreboard) release(psn uint32, st *pktState) {
	if !st.awaited {
		return
	}
	st.awaited = false
	if l := s.pkt(psnAdd(psn, int(st.lastOff))); l.left > 0 {
		l.left--
		if l.left == 0 {
			s.rdRequests--
		}
	}
}

// markLost queues psn, whose state is st, to be sent again.
func (s *scoreboard) markLost(psn uint32, st *pktState) {
	s.release(psn, st)
	st.lost = true
	s.lostCount++
	if s.lostCount == 1 || psnDiff(psn, s.lostFrom) < 0 {
		s.lostFrom = psn
	}
}

// nextLost finds the oldest PSN marked lost. The scan resumes from
// lostFrom, below which nothing is marked, so resending k losses costs one
// pass over the window, not k. Finding none, it forgets the count.
func (s *scoreboard) nextLost() (uint32, bool) {
	if s.lostCount == 0 {
		return 0, false
	}
	p := s.lostFrom
	if psnDiff(p, s.sndUna) < 0 {
		p = s.sndUna
	}
	for ; p != s.sndMax && psnDiff(p, s.sndMax) < 0; p = psnAdd(p, 1) {
		if s.pkt(p).lost {
			s.lostFrom = p
			return p, true
		}
	}
	s.lostCount = 0
	return 0, false
}

// abandon takes psn, marked lost, off the scoreboard as delivered: no work
// request sends it any more.
func (s *scoreboard) abandon(psn uint32) {
	st := s.pkt(psn)
	st.lost, st.done = false, true
	s.lostCount--
	s.arrivals++
}

// ackResult is what a cumulative ACK told the scoreboard, for the RTT
// estimator and loss recovery.
type ackResult struct {
	// sampleSentAt is the latest send time of a PSN it delivered that was
	// sent once and not held (a held one gave its sample when SACKed); 0
	// if none.
	sampleSentAt int64
	// resentSentAt is the latest send time of a resent PSN it delivered;
	// 0 if none.
	resentSentAt int64
	// readsLost counts READ and atomic PSNs it passed without their
	// response, now marked lost: the responder sent them before the ACK.
	readsLost int
	// lostArrived reports that it delivered SEND or WRITE PSNs still
	// queued to be sent again, not SACKed before: an earlier copy
	// arrived, so whatever presumed them lost was wrong (F-RTO's
	// evidence, RFC 5682: the ACK covers what was not resent).
	// firstLostArrived is the oldest of them.
	lostArrived      bool
	firstLostArrived uint32
}

// ackThrough records a cumulative ACK through psn at now: every SEND and
// WRITE PSN up to it is delivered, and READ responses that should have
// come before it by half an RTT (srtt) are lost. minRTT is the path's
// least RTT (see resendArrived).
func (s *scoreboard) ackThrough(psn uint32, now, srtt, minRTT int64) ackResult {
	var res ackResult
	if psnDiff(psn, s.sndUna) < 0 {
		return res
	}
	last := psnAdd(psn, 1)
	if psnDiff(last, s.sndMax) > 0 {
		last = s.sndMax
	}
	for p := s.sndUna; p != last; p = psnAdd(p, 1) {
		st := s.pkt(p)
		if st.done {
			continue
		}
		if st.read {
			if !st.lost && !st.held && st.sentAt < now-srtt/2 {
				s.markLost(p, st)
				res.readsLost++
			}
			continue
		}
		if st.lost && !st.unheld && !res.lostArrived {
			res.lostArrived, res.firstLostArrived = true, p
		}
		switch {
		case st.resent():
			res.resentSentAt = max(res.resentSentAt, st.sentAt)
		case !st.held:
			res.sampleSentAt = max(res.sampleSentAt, st.sentAt)
		}
		s.deliver(p, st)
	}
	if last == psnAdd(psn, 1) {
		s.resendArrived(s.pkt(psn), now, minRTT)
	}
	return res
}

// delivered marks psn delivered on news of it alone, heard at now (a
// READ response, an atomic ACK).
func (s *scoreboard) delivered(psn uint32, now, minRTT int64) {
	if st := s.pkt(psn); !st.done {
		s.deliver(psn, st)
		s.resendArrived(st, now, minRTT)
	}
}

// deliver marks psn, whose state is st, delivered.
func (s *scoreboard) deliver(psn uint32, st *pktState) {
	if st.lost {
		st.lost = false
		s.lostCount--
	}
	if !st.held {
		s.arrivals++
	}
	st.done = true
	s.release(psn, st)
	s.noteReceived(psn, st)
}

// noteReceived updates the evidence loss detection compares against: the
// responder has psn, whose state is st. A resent PSN's send time is
// evidence only as resendArrived allows.
func (s *scoreboard) noteReceived(psn uint32, st *pktState) {
	if psnDiff(psn, s.highHeld) > 0 {
		s.highHeld = psn
	}
	if !st.resent() {
		s.noteSend(st)
	}
}

// noteSend takes st's latest send as the newest known to have arrived, if
// it is.
func (s *scoreboard) noteSend(st *pktState) {
	s.rackSentAt = max(s.rackSentAt, st.sentAt)
	s.rackOrder = max(s.rackOrder, st.order)
}

// resendArrived takes a resent PSN's send time, st's, as evidence when
// that PSN is the newest the news at now reports and the news came at
// least minRTT after the resend (RACK's rule). An ACK that reports more
// than the resend was most often sent before the resend arrived (the
// copy it reports is the first, delayed behind a queue, as RTTs many
// times the least one show): taking the resend's time from it marked
// lost every packet sent before the resend and still on its way.
func (s *scoreboard) resendArrived(st *pktState, now, minRTT int64) {
	if (st.done || st.held) && st.resent() && now-st.sentAt >= minRTT {
		s.noteSend(st)
	}
}

// onSACK marks the PSNs the responder holds, heard of at now. Each newly
// held PSN sent only once gives an RTT sample, its send time passed to
// sample in PSN order.
func (s *scoreboard) onSACK(sack *wire.SACK, now, minRTT int64, sample func(sentAt int64)) {
	var newest *pktState
	for _, blk := range sack.Blocks[:sack.N] {
		for i := uint32(0); i < blk.Count && i < maxWindow; i++ {
			p := psnAdd(blk.First, int(i))
			if !s.tracked(p) {
				continue
			}
			st := s.pkt(p)
			if st.done || st.held {
				newest = nil // the newest PSN reported was known already
				continue
			}
			st.held = true
			s.arrivals++
			if st.lost {
				st.lost = false
				s.lostCount--
			}
			if !st.resent() {
				sample(st.sentAt)
			}
			s.noteReceived(p, st)
			newest = st
		}
	}
	if newest != nil {
		s.resendArrived(newest, now, minRTT)
	}
}

// detectLosses marks lost every PSN that later evidence says is gone, in
// the manner of RACK: something sent a quarter RTT (srtt/4) after it has
// arrived, or three later PSNs have and something sent after it (in send
// order, not time: a pump's packets share one timestamp, and a resend
// followed on the wire by the next resend of the same pump is no
// evidence that the next was lost; taken as such, every ACK that came
// mid-burst resent the rest of the burst). A resent
// packet is thus judged only by evidence newer than its resend, and a
// window of a few packets still detects its losses without waiting for a
// timeout. Time judges PSNs above the highest that arrived too: when a
// whole flight is lost (one GSO datagram can be the whole window), the
// probe's resend of its first PSN arrives alone, and its ACK shows that
// the rest, sent before it, are gone; judged only below highHeld, each
// probe repaired one packet and the flight took a probe per packet. It
// returns how many PSNs it marked, and in how many runs of consecutive
// ones (see congestion.onLoss).
func (s *scoreboard) detectLosses(srtt int64) (found, runs int) {
	reorder := max(srtt/4, minReorder)
	var last uint32 // the last PSN marked, when found > 0
	for p := s.sndUna; p != s.sndMax; p = psnAdd(p, 1) {
		st := s.pkt(p)
		if st.done || st.held || st.lost {
			continue
		}
		byTime := st.sentAt+reorder <= s.rackSentAt
		if psnDiff(p, s.highHeld) > 0 {
			if !byTime { // above highHeld, time alone judges
				if !st.resent() {
					break // later PSNs were first sent later still
				}
				continue
			}
		} else if bySeq := psnDiff(s.highHeld, p) >= lossThreshold && st.order < s.rackOrder; !bySeq && !byTime {
			continue
		}
		s.markLost(p, st)
		if found == 0 || p != psnAdd(last, 1) {
			runs++
		}
		found, last = found+1, p
	}
	return found, runs
}

// probe queues for resending the oldest PSN neither delivered nor held,
// or else the newest, and returns it.
func (s *scoreboard) probe() uint32 {
	target := psnAdd(s.sndMax, -1)
	for p := s.sndUna; p != s.sndMax; p = psnAdd(p, 1) {
		if st := s.pkt(p); !st.done && !st.held {
			target = p
			break
		}
	}
	s.markOneLost(target)
	return target
}

// markOneLost queues psn for resending, held by the responder or not.
func (s *scoreboard) markOneLost(psn uint32) {
	if st := s.pkt(psn); !st.done && !st.lost {
		s.unhold(st)
		s.markLost(psn, st)
	}
}

// answered records that the responder answered a copy of psn without
// taking it (an RNR NAK): one copy fewer may be waiting to be read. RNR
// retries are sent one at a time, each after the last was refused, so a
// PSN waiting out RNR counts no extra copies, however often it was
// refused; it still counts as resent (Karn).
func (s *scoreboard) answered(psn uint32) {
	if !s.tracked(psn) {
		return
	}
	if st := s.pkt(psn); st.resends > 0 {
		st.resends--
		s.resends--
	}
}

// unhold forgets that the responder holds a PSN not yet delivered: it is
// to be sent again whatever the SACK said.
func (s *scoreboard) unhold(st *pktState) {
	if st.held {
		st.held = false
		s.arrivals--
	}
}

// markLostFrom queues every undelivered PSN from psn on to be resent.
func (s *scoreboard) markLostFrom(psn uint32) {
	if psnDiff(psn, s.sndUna) < 0 {
		psn = s.sndUna
	}
	for p := psn; psnDiff(p, s.sndMax) < 0; p = psnAdd(p, 1) {
		st := s.pkt(p)
		if !st.done && !st.lost {
			st.unheld = st.held
			s.unhold(st)
			s.markLost(p, st)
		}
	}
}

// advance moves sndUna over delivered PSNs and returns how many it
// passed. A scoreboard left with nothing in flight lets a window's worth
// of entries go.
func (s *scoreboard) advance() int {
	moved := 0
	for s.sndUna != s.sndMax && s.pkt(s.sndUna).done {
		s.resends -= int(s.pkt(s.sndUna).resends)
		s.arrivals--
		s.sndUna = psnAdd(s.sndUna, 1)
		moved++
	}
	if moved > 0 && !s.outstanding() && len(s.pk) > 64 {
		s.pk = nil
	}
	return moved
}

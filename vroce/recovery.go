package vroce

// Loss recovery for an RC requester: the RTT estimate, the retransmission
// timeout with its backoff (and Karn's rule on what may end it), the
// tail-loss probe, and what the path's recent losses say about how soon a
// probe may fire. In the shape of quic-go's ackhandler: it is given the
// time, says when its next deadline is (lossDetectionTimeout), and says
// what a passed deadline calls for (onLossDetectionTimeout); the requester
// acts on the scoreboard and the congestion controller.

// lossRecovery is an RC requester's timers and RTT state. The QP's
// requester owns it, under qp.mu.
type lossRecovery struct {
	rtt rttEstimator
	// peer is the RTT the QP's peer's QPs measure (peerBudget's), which
	// stands in for a sample of the QP's own until
	// it has one, as Linux seeds a TCP connection from its destination's
	// cached metrics: a new stream to a busy peer whose queue holds its
	// packets for 100 ms is not timed by the 10 ms meant for a peer
	// nobody has measured. A sample-less QP's timeout raises it too
	// (peerAtLeast). nil without a peer budget.
	peer        *peerRTT
	backoff     int   // RTO doublings since the last progress with a fresh sample
	freshSample bool  // an RTT sample since the RTO last backed off
	rtoAt       int64 // retransmission timeout, 0 when nothing is in flight
	armedRTO    int64 // the timeout rtoAt was armed with
	probeAt     int64 // tail-loss probe, 0 when none is due
	// lossAt is when the path last lost a packet, as far as the
	// requester can tell (see quietProbeFloor). A timer's resend of
	// probedPSN counts as a loss (suspected) unless the responder reports
	// that PSN arrived twice: lossAt then goes back to lossUndo, its
	// value before the PSN was first resent. A resend of another PSN
	// ends the suspicion: no report came.
	lossAt, lossUndo int64
	probedPSN        uint32
	suspected        bool
	// collapsedThrough is the newest PSN in flight when a repeated
	// timeout collapsed the window: the cumulative ACK that passes it
	// ends the wait for evidence that the timeout was spurious
	// (requester.judgeTimeout).
	collapsedThrough uint32
	// unjudged is the least RTT sample the congestion controller has not
	// yet been given (takeSample); 0 when it has them all.
	unjudged int64
}

// timeoutKind is what a passed loss-detection deadline calls for.
type timeoutKind uint8

const (
	noTimeout timeoutKind = iota
	// probeTimeout: two quiet RTTs; resend the oldest unconfirmed packet.
	probeTimeout
	// firstTimeout: the first RTO since progress, most often a stall of
	// the host, not of the network (probes found the network's losses
	// already); resend the oldest unconfirmed packet and trim the window.
	firstTimeout
	// repeatedTimeout: everything in flight is presumed lost.
	repeatedTimeout
)

// sample takes an RTT sample of a packet sent once. Time is the receive
// batch's, read before its packets are handled: a sample that is not
// positive acknowledged a packet sent after the batch arrived, which only
// a peer guessing PSNs does.
func (l *lossRecovery) sample(d int64) {
	if d <= 0 {
		return
	}
	l.rtt.Sample(d)
	l.freshSample = true
	if l.unjudged == 0 || d < l.unjudged {
		l.unjudged = d
	}
	if l.peer != nil {
		l.peer.sample(d)
	}
}

// takeSample hands the congestion controller the least RTT sample taken
// since it last asked, each once (0: none): samples come on ACKs, SACKs
// and READ responses that may move no window, and the controller's
// standing RTT must see each in the RTT it was measured in.
func (l *lossRecovery) takeSample() int64 {
	d := l.unjudged
	l.unjudged = 0
	return d
}

// peerAtLeast tells the peer's estimate that a packet of this QP, which
// has no sample of its own, went unanswered for d: a lower bound on the
// peer's RTT, unless the packet was lost (peerRTT.atLeast). Every first
// packet of 10,000 streams starting at once was otherwise resent three
// or four times into the peer's queue.
func (l *lossRecovery) peerAtLeast(d int64) {
	if l.rtt.SRTT == 0 && l.peer != nil && d > 0 {
		l.peer.atLeast(d)
	}
}

// estimate is the RTT estimate the timers go by: the QP's own, or before
// its first sample its peer's.
func (l *lossRecovery) estimate() rttEstimator {
	if l.rtt.SRTT == 0 && l.peer != nil {
		if p := l.peer.estimate(); p.SRTT > 0 {
			return rttEstimator{p}
		}
	}
	return l.rtt
}

// disarm stops the RTO and the probe: nothing is in flight.
func (l *lossRecovery) disarm() { l.rtoAt, l.probeAt = 0, 0 }

// arm keeps the RTO and the tail-loss probe running from now while
// packets are in flight. wait is what the Go scheduler lately made
// goroutines wait (an ACK can wait for one to be scheduled, on either
// end), ackTimeout the QP's verbs timeout (0: infinite), resendsQueued
// whether resends are queued (they draw the SACK a probe would), and
// peerMayHold whether the peer may be holding its ACK for its program's
// answer (responder.mayHoldAck): then a quiet path's probe waits out
// the hold (heldAckProbeFloor), or every answer slower than the probe
// floor would draw a probe, and a resent request, as TCP's loss probe
// waits out a delayed ACK when one segment is in flight; its RTO is then
// at least heldAckRTO, so that the probe, a quarter RTO ahead of it at
// the latest, can (floors).
func (l *lossRecovery) arm(now, wait, ackTimeout int64, resendsQueued, peerMayHold bool) {
	est := l.estimate()
	probeFloor, rtoFloor := l.floors(now, peerMayHold)
	rto := est.rto(l.backoff, rtoFloor, ackTimeout) + wait
	if ackTimeout > 0 {
		rto = min(rto, ackTimeout)
	}
	if l.rtoAt == 0 {
		l.rtoAt, l.armedRTO = now+rto, rto
	}
	// A loss probe after two quiet RTTs: the last packets of a flight,
	// whether the flight ends the data or fills the window, have no later
	// ones to reveal their loss; a probe draws the SACK that does, long
	// before a timeout.
	if resendsQueued {
		l.probeAt = 0
	} else if l.backoff == 0 && l.probeAt == 0 {
		// A PTO after the last probe or send, and ahead of the RTO (a
		// steady RTT makes RTTVAR, and the RTO, small against two SRTTs):
		// never at or before now, or an unanswered probe to a peer slower
		// than three quarters of the RTO was repeated at every timer wake
		// until the RTO (117 packets in 40 ms to rxe). So a PTO apart, the
		// last a quarter RTO before it: at most (RTO * 3/4) / PTO + 1
		// probes per RTO.
		if at := min(now+est.pto(probeFloor)+wait, l.rtoAt-rto/4); at > now {
			l.probeAt = at
		}
	}
}

// lossDetectionTimeout is the earlier of the RTO and the probe deadline;
// 0 when neither runs.
func (l *lossRecovery) lossDetectionTimeout() int64 {
	switch {
	case l.probeAt == 0:
		return l.rtoAt
	case l.rtoAt == 0:
		return l.probeAt
	}
	return min(l.rtoAt, l.probeAt)
}

// onLossDetectionTimeout says which deadline has passed at now, the RTO
// before the probe, and clears them; an RTO backs off.
func (l *lossRecovery) onLossDetectionTimeout(now int64) timeoutKind {
	switch {
	case l.rtoAt != 0 && now >= l.rtoAt:
		kind := firstTimeout
		if l.backoff > 0 {
			kind = repeatedTimeout
		}
		// Karn: only a sample taken after this backoff may end it.
		l.backoff, l.freshSample = l.backoff+1, false
		l.peerAtLeast(l.armedRTO)
		l.rtoAt, l.probeAt = 0, 0
		return kind
	case l.probeAt != 0 && now >= l.probeAt:
		l.probeAt = 0
		return probeTimeout
	}
	return noTimeout
}

// holdPassed moves a passed RTO a whole armed RTO on from now, and drops
// a passed probe (the next send arms one), while this host's own send is
// stuck (sendStall): the packets they would judge may not have left. It
// reports whether it held one. No backoff, no resend: the retry_cnt
// deadline (requester.failAt) still runs, so a send stuck for good still
// fails the QP.
func (l *lossRecovery) holdPassed(now int64) bool {
	held := false
	if l.rtoAt != 0 && now >= l.rtoAt {
		l.rtoAt, held = now+l.armedRTO, true
	}
	if l.probeAt != 0 && now >= l.probeAt {
		l.probeAt, held = 0, true
	}
	return held
}

// onProgress hears that sndUna moved: the deadlines restart from the next
// send. Karn: only an RTT measured on a packet sent once may shrink a
// backed-off RTO. Progress on resent packets alone keeps it, or a host
// slower than the RTO would resend every packet, sample none, and never
// learn.
func (l *lossRecovery) onProgress() {
	if l.freshSample {
		l.backoff, l.freshSample = 0, false
	}
	l.disarm()
}

// spurious reports whether a resend sent at resentAt and acknowledged at
// now was acknowledged sooner than it could have been: the original
// arrived, and the timeout that resent it was spurious (Eifel).
func (l *lossRecovery) spurious(resentAt, now int64) bool {
	return resentAt != 0 && now-resentAt < l.rtt.MinRTT/2
}

// onSpuriousTimeout undoes a timeout's backoff.
func (l *lossRecovery) onSpuriousTimeout() { l.backoff = 0 }

// floors are the soonest a loss probe may fire and the least RTO: on a
// path that lost packets within lossMemory, a fast probe and minRTO; on
// a quiet one, quietProbeFloor and minRTO, or, when the peer may be
// holding its ACK for an answer (peerMayHold), heldAckProbeFloor and
// heldAckRTO, which wait the hold out. On a path that lost packets
// lately both stay short even then: a probe or timeout a held ACK makes
// spurious, the responder reports as a duplicate, and the path is quiet
// again (lossSuspected); on a flight of one or two packets the timeout's
// collapsed window costs little.
func (l *lossRecovery) floors(now int64, peerMayHold bool) (probe, rto int64) {
	switch {
	case l.lossAt != 0 && now-l.lossAt < lossMemory:
		return 0, minRTO
	case peerMayHold:
		return heldAckProbeFloor, heldAckRTO
	}
	return quietProbeFloor, minRTO
}

// lossSuspected notes a resend of psn that a timer made: the path lost
// something, unless the responder reports psn arrived twice.
func (l *lossRecovery) lossSuspected(psn uint32, now int64) {
	if !l.suspected || psn != l.probedPSN {
		l.lossUndo, l.suspected = l.lossAt, true
	}
	l.lossAt, l.probedPSN = now, psn
}

// lossProven notes evidence that the path lost a packet: it is not undone.
func (l *lossRecovery) lossProven(now int64) {
	l.lossAt, l.suspected = now, false
}

// onDuplicateReported takes a D-SACK: the responder got psn twice. If that
// was the last timer resend, it repaired nothing: a host stalled, not the
// path, and the path counts as clean as it was.
func (l *lossRecovery) onDuplicateReported(psn uint32) {
	if l.suspected && psn == l.probedPSN {
		l.lossAt, l.suspected = l.lossUndo, false
	}
}

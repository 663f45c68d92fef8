package vroce

import (
	"sync"

	"vroce.dev/internal/rtt"
)

// rttEstimator is the module's RTT estimator (internal/rtt) with an RC
// requester's timeouts on top: the RTO and the tail-loss probe.
type rttEstimator struct{ rtt.Estimator }

const (
	minRTO     = 5_000_000     // 5 ms: a busy host stalls longer than 1 ms often; loss probes repair real losses first
	defaultRTO = 10_000_000    // before the first sample
	maxBackoff = 6             // RTO doubles at most this many times
	rttNoise   = 50_000        // allowance for ACK coalescing and wakeups
	maxRTO     = 1_000_000_000 // when the verbs timeout is infinite

	// A QP that lost nothing lately probes for a lost tail no sooner than
	// quietProbeFloor after sending it (QUIC's timer granularity), one
	// that did after two RTTs and rttNoise. A probe deadline is not
	// cancelled when the ACK comes (that would cost a timerfd_settime per
	// ACK); it fires stale, and a 100 us deadline made a ping-pong wake
	// the timer goroutine about every other message: a quarter of its latency
	// on loopback. A path that loses packets pays that for the fast
	// repair; a clean one does not, and its first loss in lossMemory
	// costs a millisecond.
	quietProbeFloor = 1_000_000
	// A flight small enough that the peer may hold its ACK for its
	// program's answer (ackHold) probes no sooner than the hold and a
	// quiet floor after it: the first loss of a request that gets no
	// answer in that time costs 6 ms instead of 1, and an answer that
	// comes within the hold draws no probe.
	heldAckProbeFloor = int64(ackHold) + quietProbeFloor
	// heldAckRTO is the least RTO of such a flight (minRTO for others):
	// its probe comes at the latest a quarter of the RTO before it
	// (lossRecovery.arm), and must wait the hold out. A request lost on a
	// clean path is still repaired by the probe first.
	heldAckRTO = heldAckProbeFloor * 4 / 3
	lossMemory = 1_000_000_000
)

// rto is the retransmission timeout after backoff doublings, at least
// floor (minRTO, or heldAckRTO) before them and at most ceiling (the
// QP's configured timeout).
func (e *rttEstimator) rto(backoff int, floor, ceiling int64) int64 {
	rto := max(defaultRTO, floor)
	if e.SRTT > 0 {
		rto = max(e.Timeout(rttNoise), floor)
	}
	rto <<= min(backoff, maxBackoff)
	if ceiling <= 0 {
		ceiling = maxRTO
	}
	return min(rto, ceiling)
}

// pto is when to probe for a lost tail: two RTTs without an ACK, or more
// where the RTT varies more (a host's scheduling stalls: a probe on every
// stall costs both ends a packet and a wakeup, and adds to the latency it
// was meant to save); never sooner than floor.
func (e *rttEstimator) pto(floor int64) int64 {
	if e.SRTT == 0 {
		return max(defaultRTO/2, floor)
	}
	return max(max(2*e.SRTT, e.SRTT+4*e.RTTVar)+rttNoise, floor)
}

// peerRTT is the RTT of one peer as all of a device's QPs to it measure
// it (their peer budget holds it): the module's estimator fed every QP's
// samples, under a lock since the QPs' locks are their own. A QP without
// a sample of its own yet times its packets by it (lossRecovery.peer).
type peerRTT struct {
	mu sync.Mutex
	e  rtt.Estimator
}

func (p *peerRTT) sample(d int64) {
	p.mu.Lock()
	p.e.Sample(d)
	p.mu.Unlock()
}

// atLeast says the peer took at least d to answer (a sample-less QP's
// timeout passed): the estimate rises to d as from a first sample, if it
// is lower. Karn's rule leaves no other way to learn it when every QP
// to the peer starts at once into a queue longer than the timeout.
func (p *peerRTT) atLeast(d int64) {
	p.mu.Lock()
	if p.e.SRTT < d {
		p.e = rtt.Estimator{}
		p.e.Sample(d)
	}
	p.mu.Unlock()
}

func (p *peerRTT) estimate() rtt.Estimator {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.e
}

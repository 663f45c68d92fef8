package vroce

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A requester probes for a lost tail after quietProbeFloor until the path
// shows it loses packets; then after two RTTs, for lossMemory. A probe the
// responder reports as a duplicate (a D-SACK) shows nothing, and is
// undone.
func TestProbeFloorFollowsTheLossesThePathShows(t *testing.T) {
	var r lossRecovery
	r.rtt.Sample(20_000) // a 20 us path: a fast probe comes well under 1 ms
	fast := r.rtt.pto(0)
	if fast >= quietProbeFloor {
		t.Fatalf("fast probe timeout %d ns, want under the quiet floor", fast)
	}
	check := func(what string, now, want int64) {
		t.Helper()
		floor, _ := r.floors(now, false)
		if got := r.rtt.pto(floor); got != want {
			t.Fatalf("%s: probe after %d ns, want %d", what, got, want)
		}
	}
	now := int64(10 * lossMemory)
	check("clean path", now, quietProbeFloor)

	r.lossSuspected(100, now) // a probe resends PSN 100
	check("a probe, not yet answered", now+1, fast)
	r.onDuplicateReported(100)
	check("the probe's PSN arrived twice", now+2, quietProbeFloor)

	r.lossSuspected(101, now+3)
	r.lossSuspected(101, now+4) // probed again: the same suspicion
	r.onDuplicateReported(99)   // some other duplicate: no news on 101
	check("D-SACK of another PSN", now+5, fast)
	r.onDuplicateReported(101)
	check("both probes of 101 undone", now+6, quietProbeFloor)

	r.lossSuspected(102, now+7)
	r.lossSuspected(103, now+8) // 102 drew no D-SACK: it was lost
	r.onDuplicateReported(103)
	check("103 undone, 102 stands", now+9, fast)
	check("lossMemory after 102", now+7+lossMemory, quietProbeFloor)

	r.lossProven(now + 10) // a SACK showed a hole
	r.onDuplicateReported(103)
	check("proven loss survives a late D-SACK", now+11, fast)
	check("proven loss forgotten after lossMemory", now+10+lossMemory, quietProbeFloor)
}

// recoveryOn20us is loss recovery on a 20 us path (SRTT 20 us, RTTVAR 10
// us, minimum 20 us) whose last loss is long past.
func recoveryOn20us() *lossRecovery {
	var l lossRecovery
	l.sample(20_000)
	return &l
}

// The probe comes a PTO after the send and ahead of the RTO; a quiet path
// waits quietProbeFloor for it. The deadlines are exact.
func TestRecoveryArmsTheProbeAheadOfTheRTO(t *testing.T) {
	l := recoveryOn20us()
	const now = 10 * lossMemory
	l.arm(now, 0, 0, false, false)
	assert.Equal(t, int64(now+minRTO), l.rtoAt, "SRTT + 4 RTTVAR is under the 5 ms floor")
	assert.Equal(t, int64(now+quietProbeFloor), l.probeAt, "a clean path probes after 1 ms")
	assert.Equal(t, l.probeAt, l.lossDetectionTimeout())

	l.arm(now+500_000, 0, 0, false, false)
	assert.Equal(t, int64(now+minRTO), l.rtoAt, "arming again moves no running deadline")
	assert.Equal(t, int64(now+quietProbeFloor), l.probeAt)

	l.disarm()
	l.lossProven(now)
	l.arm(now, 0, 0, false, false)
	assert.Equal(t, int64(now+20_000+4*10_000+rttNoise), l.probeAt, "a lossy path probes after SRTT + 4 RTTVAR (over two RTTs here)")

	l.disarm()
	l.arm(now, 0, 0, true, false)
	assert.Zero(t, l.probeAt, "queued resends draw the SACK a probe would")
}

// The scheduler's recent delay is added to both deadlines; the verbs
// timeout caps the RTO, and the probe stays a quarter RTO before it.
func TestRecoveryAllowsForTheSchedulerAndTheVerbsTimeout(t *testing.T) {
	l := recoveryOn20us()
	const now, wait = int64(1e12), int64(2_000_000)
	l.arm(now, wait, 0, false, false)
	assert.Equal(t, now+minRTO+wait, l.rtoAt)
	assert.Equal(t, now+quietProbeFloor+wait, l.probeAt)

	l.disarm()
	const ceiling = 4096 << 10 // Timeout 10: 4.19 ms
	l.arm(now, 3*wait/2, ceiling, false, false)
	assert.Equal(t, now+ceiling, l.rtoAt)
	assert.Equal(t, now+ceiling-ceiling/4, l.probeAt, "never after three quarters of the RTO")
}

// Deadlines fire in order: the probe, then the RTO, which backs off; a
// backed-off RTO arms no probe, and the next timeout presumes everything
// lost. Progress with a fresh sample ends the backoff (Karn), progress
// without one does not.
func TestRecoveryTimeoutsFireInOrderAndBackOff(t *testing.T) {
	l := recoveryOn20us()
	const now = int64(1e12)
	l.arm(now, 0, 0, false, false)
	assert.Equal(t, noTimeout, l.onLossDetectionTimeout(now+quietProbeFloor-1))
	assert.Equal(t, probeTimeout, l.onLossDetectionTimeout(now+quietProbeFloor))
	assert.Zero(t, l.probeAt)
	assert.Equal(t, int64(now+minRTO), l.lossDetectionTimeout(), "the RTO still runs")
	assert.Equal(t, firstTimeout, l.onLossDetectionTimeout(now+minRTO))
	assert.Equal(t, 1, l.backoff)
	assert.Zero(t, l.lossDetectionTimeout())

	t1 := now + minRTO
	l.arm(t1, 0, 0, false, false)
	assert.Equal(t, t1+2*minRTO, l.rtoAt, "backed off once: doubled")
	assert.Zero(t, l.probeAt, "no probe while backed off")
	assert.Equal(t, repeatedTimeout, l.onLossDetectionTimeout(t1+2*minRTO))
	assert.Equal(t, 2, l.backoff)

	l.onProgress()
	assert.Equal(t, 2, l.backoff, "progress on resent packets alone keeps the backoff")
	l.sample(20_000)
	l.onProgress()
	assert.Zero(t, l.backoff, "a fresh sample ends it")
	assert.Zero(t, l.lossDetectionTimeout(), "progress disarms; the next send arms again")
}

// A resend acknowledged within half the minimum RTT of leaving cannot be
// what the peer acknowledged: the original was, and the timeout was
// spurious.
func TestRecoveryTellsASpuriousTimeout(t *testing.T) {
	l := recoveryOn20us()
	assert.True(t, l.spurious(100_000, 109_999))
	assert.False(t, l.spurious(100_000, 110_000))
	assert.False(t, l.spurious(0, 5_000), "no resend was acknowledged")
	l.backoff = 3
	l.onSpuriousTimeout()
	assert.Zero(t, l.backoff)
}

// A QP without an RTT sample of its own times its first packets by what
// its peer's other QPs measured (RFC 6298's first sample: three times
// it), not by the default meant for a peer nobody has measured; once it
// has a sample, its own.
func TestAFreshQPTimesItsPacketsByItsPeersRTT(t *testing.T) {
	const now = int64(1_000_000_000)
	var peer peerRTT
	r := lossRecovery{peer: &peer}
	r.arm(now, 0, 0, false, false)
	assert.Equal(t, now+defaultRTO, r.rtoAt, "nobody has measured the peer: the default")

	peer.sample(100_000_000) // another QP: the peer's queue holds packets for 100 ms
	r.disarm()
	r.arm(now, 0, 0, false, false)
	assert.Equal(t, now+300_000_000, r.rtoAt, "three times the peer's SRTT")

	r.sample(40_000) // its own first sample: 40 us
	assert.Equal(t, int64(100_000_000+(40_000-100_000_000)/8), peer.estimate().SRTT, "its sample smoothed into the peer's")
	r.disarm()
	r.arm(now, 0, 0, false, false)
	assert.Equal(t, now+minRTO, r.rtoAt, "its own estimate, at the floor")
}

// A QP with no sample whose packet goes unanswered for its whole RTO
// tells its peer's estimate that the peer takes at least that long, so
// the next fresh QPs to it wait longer; Karn's rule would give none of
// them a sample from their resends. A QP with a sample of its own (its
// timeout a loss, not an unknown RTT) leaves the peer's estimate alone.
func TestAnUnansweredFreshQPRaisesItsPeersRTT(t *testing.T) {
	const now = int64(1_000_000_000)
	var peer peerRTT
	a := lossRecovery{peer: &peer}
	a.arm(now, 0, 0, false, false)
	assert.Equal(t, firstTimeout, a.onLossDetectionTimeout(now+defaultRTO))
	assert.Equal(t, int64(defaultRTO), peer.estimate().SRTT, "the peer answers no sooner than the RTO that passed")

	b := lossRecovery{peer: &peer}
	b.arm(now, 0, 0, false, false)
	assert.Equal(t, now+3*defaultRTO, b.rtoAt, "the next fresh QP waits three times that")

	c := lossRecovery{peer: &peer}
	c.sample(40_000)
	before := peer.estimate()
	c.arm(now, 0, 0, false, false)
	assert.Equal(t, firstTimeout, c.onLossDetectionTimeout(c.rtoAt))
	assert.Equal(t, before, peer.estimate(), "a sampled QP's timeout is a loss: the peer's estimate stands")
}

// The RTO a QP's Stats report is the timeout its next packet gets: on
// the bench's 100 us path, the floor (heldAckRTO for a request the peer
// may hold its ACK for, with piggybacked ACKs); on a path measured at 40
// ms, the estimate's, above it (rsock keeps a finished stream's QP for
// four of them, for the peer's repeated FIN).
func TestStatsReportTheRTOTheNextPacketGets(t *testing.T) {
	for _, c := range []struct {
		rtt       int64
		piggyback bool
	}{{100_000, false}, {40_000_000, false}, {100_000, true}, {40_000_000, true}} {
		rtt := c.rtt
		rb := newBench(t, c.piggyback)
		rb.qp.mu.Lock()
		rb.qp.req.rec.rtt = rttEstimator{}
		rb.qp.req.rec.sample(rtt)
		rb.qp.mu.Unlock()
		reported := rb.qp.Stats().RTO
		rb.write(t, 1024, t0)
		require.Len(t, rb.sink.take(), 1)
		rb.qp.mu.Lock()
		armed := rb.qp.req.rec.armedRTO
		rb.qp.mu.Unlock()
		assert.Equal(t, time.Duration(armed), reported, "an RTT of %v, piggybacked ACKs %v", time.Duration(rtt), c.piggyback)
		assert.Greater(t, reported, time.Duration(rtt), "an RTT of %v", time.Duration(rtt))
		assert.GreaterOrEqual(t, reported, time.Duration(minRTO), "an RTT of %v", time.Duration(rtt))
	}
}

// A sample that is not positive (an ACK in a batch that arrived before
// its packet left: a peer guessing PSNs) teaches nothing: not the QP's
// estimate, not the controller's next sample, not the peer's.
func TestASampleThatIsNotPositiveIsDropped(t *testing.T) {
	var peer peerRTT
	r := lossRecovery{peer: &peer}
	r.sample(40_000)
	require.Equal(t, int64(40_000), r.takeSample())
	for _, d := range []int64{0, -5_000} {
		r.sample(d)
		assert.Zero(t, r.takeSample(), "sample %d", d)
	}
	assert.Equal(t, int64(40_000), r.rtt.SRTT)
	assert.Equal(t, int64(40_000), peer.estimate().SRTT)
}

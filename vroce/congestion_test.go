package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWindowGrowsUnderTargetAndShrinksAboveIt(t *testing.T) {
	var c congestion
	c.init()
	const minRTT, srtt = 10_000, 10_000
	c.onAck(64, 11_000, minRTT, srtt, 1)
	if c.cwnd != 128 {
		t.Fatalf("slow start: window %.1f after 64 acked, want 128", c.cwnd)
	}
	c.standing = standingRTT{}                   // forget the earlier samples: every one is high now
	c.onAck(1, 1_000_000, minRTT, srtt, 100_000) // RTT far above target
	if c.cwnd != 64 || c.slowStart {
		t.Fatalf("window %.1f after a large delay, want halved to 64 and out of slow start", c.cwnd)
	}
	c.onAck(1, 1_000_000, minRTT, srtt, 100_001) // again within one RTT: no change
	if c.cwnd != 64 {
		t.Fatalf("decreased twice in one RTT: %.1f", c.cwnd)
	}
	c.onAck(64, 11_000, minRTT, srtt, 200_000) // additive increase: +1 per window
	if c.cwnd < 64.9 || c.cwnd > 65.1 {
		t.Fatalf("additive increase gave %.2f, want about 65", c.cwnd)
	}
	c.onLoss(1, srtt, 205_000) // one in 131 packets, the RTT under target: random
	if c.cwnd < 64.9 || c.cwnd > 65.1 {
		t.Fatalf("a random loss moved the window to %.1f", c.cwnd)
	}
	c.onLoss(8, srtt, 206_000) // nine in 139: more than 5%, still random
	if c.cwnd < 64.9 || c.cwnd > 65.1 {
		t.Fatalf("nine losses in 139 packets moved the window to %.1f", c.cwnd)
	}
	c.onLoss(8, srtt, 206_500) // 17 in 147: congestive
	if c.cwnd < 56.8 || c.cwnd > 57 {
		t.Fatalf("loss gave %.1f, want seven eighths of 65", c.cwnd)
	}
	c.onLoss(20, srtt, 207_000) // and again within the RTT: no change
	if c.cwnd < 56.8 || c.cwnd > 57 {
		t.Fatalf("trimmed twice in one RTT: %.1f", c.cwnd)
	}
	for i := range 3 { // three clean rounds of 128 packets, the last with no loss in it
		c.onAck(128, 11_000, minRTT, srtt, int64(290_000+i*srtt))
	}
	c.cwnd = 65                // back, as if the congested rounds had not been
	c.onLoss(1, srtt, 320_000) // a new round: one loss is random again
	if c.cwnd != 65 {
		t.Fatalf("a random loss after clean rounds moved the window to %.1f", c.cwnd)
	}
	c.cwnd = 65 * (1 - lossDecrease)
	c.onTimeout(400_000)
	if c.window() != minWindow || !c.slowStart {
		t.Fatalf("timeout left window %d, slow start %v", c.window(), c.slowStart)
	}
	for i := 0; i < 10 && c.slowStart; i++ {
		c.onAck(c.window(), 11_000, minRTT, srtt, int64(500_000+i*srtt))
	}
	if c.slowStart || c.cwnd < 28 || c.cwnd > 29 {
		t.Fatalf("slow start after a timeout ended at %.1f (still on: %v), want half of 57", c.cwnd, c.slowStart)
	}
}

func TestPacerSpreadsAWindowOverAnRTT(t *testing.T) {
	var c congestion
	c.init()
	c.cwnd = 10
	const srtt = 100_000 // 10 packets per 100 us: one per 10 us, paced below a burst
	now := int64(1)
	c.pacer.at = now
	sent := 0
	for ; sent < 100; sent++ {
		ok, at := c.pace(srtt, now)
		if !ok {
			if at <= now || at > now+10_001 {
				t.Fatalf("pacer waits until %d from %d", at, now)
			}
			break
		}
	}
	if sent != paceBurst {
		t.Fatalf("burst of %d, want %d", sent, paceBurst)
	}
	now += 1_000_000 // 1 ms later: refilled to one burst, not 100 packets
	for sent = 0; sent < 100; sent++ {
		if ok, _ := c.pace(srtt, now); !ok {
			break
		}
	}
	if sent != paceBurst {
		t.Fatalf("after idling, a burst of %d, want %d", sent, paceBurst)
	}
}

func TestPacerStandsAsideForLargeWindows(t *testing.T) {
	var c congestion
	c.init()
	c.cwnd = 200
	for i := 0; i < 1000; i++ {
		if ok, _ := c.pace(100_000, 1); !ok {
			t.Fatalf("a window of 200 packets paced after %d", i)
		}
	}
}

// TestSmallWindowsTolerateMoreDelay: flow-based scaling lets the smaller
// of two windows sharing a delay keep growing while the larger yields.
func TestSmallWindowsTolerateMoreDelay(t *testing.T) {
	const minRTT = 20_000
	if small, large := target(minRTT, 4), target(minRTT, 400); small <= large {
		t.Fatalf("target %d for a 4-packet window, %d for 400", small, large)
	}
	var small, large congestion
	small.init()
	large.init()
	small.cwnd, large.cwnd, small.slowStart, large.slowStart = 4, 400, false, false
	rtt := (target(minRTT, 4) + target(minRTT, 400)) / 2 // between the two targets
	small.onAck(4, rtt, minRTT, 100_000, 1_000_000)
	large.onAck(400, rtt, minRTT, 100_000, 1_000_000)
	if small.cwnd <= 4 || large.cwnd >= 400 {
		t.Fatalf("at a delay between their targets: small %.1f (want up from 4), large %.1f (want down from 400)", small.cwnd, large.cwnd)
	}
}

// A stall delays the packets that arrive while it lasts, not the ones
// after: samples of the standing RTT's window that are high while others
// are at the base leave the window alone. A queue delays them all, and
// once every sample of an RTT stands above the target the window is cut.
func TestOnlyAStandingDelayCutsTheWindow(t *testing.T) {
	var c congestion
	c.init()
	c.cwnd, c.slowStart = 300, false
	const minRTT, srtt = 50_000, 100_000
	now := int64(1_000_000)
	for range 10 { // an RTT at the base
		c.onAck(1, minRTT, minRTT, srtt, now)
		now += srtt / 10
	}
	before := c.cwnd
	for range 10 { // a stall's burst of late ACKs, within the next RTT
		c.onAck(1, 20*minRTT, minRTT, srtt, now)
		now += srtt / 20
	}
	assert.GreaterOrEqual(t, c.cwnd, before, "a stall's samples beside base ones")
	for range 30 { // a queue: every sample high for three RTTs
		c.onAck(1, 20*minRTT, minRTT, srtt, now)
		now += srtt / 10
	}
	assert.Less(t, c.cwnd, before*(1-maxDecrease/2), "a standing delay")
}

// Delay alone cuts a window to a burst and no further (the hosts' delay
// is most of a user-space stack's RTT); a congestive loss, or a timeout,
// still takes it below.
func TestDelayAloneCutsNoWindowBelowABurst(t *testing.T) {
	var c congestion
	c.init()
	c.slowStart = false
	const minRTT, srtt = 50_000, 50_000
	now := int64(1_000_000)
	for range 20 { // an RTT far above target, once per RTT
		c.onAck(1, 100*minRTT, minRTT, srtt, now)
		now += srtt
	}
	assert.Equal(t, float64(delayFloor), c.cwnd, "delay alone stops at a burst")

	c.cwnd = delayFloor - 4 // below the floor already (after a loss): delay leaves it
	c.onAck(1, 100*minRTT, minRTT, srtt, now)
	now += srtt
	assert.Equal(t, float64(delayFloor-4), c.cwnd)

	c.cwnd = delayFloor
	c.onLoss(1, srtt, now) // the RTT stands above its target: congestive
	assert.Equal(t, delayFloor*(1-lossDecrease), c.cwnd, "a congestive loss cuts below the floor")
	c.onTimeout(now + 1)
	assert.Equal(t, minWindow, c.window(), "a timeout collapses it")
}

// A loss while the RTT stands above its target is congestion's however
// few packets were lost: the queue it overflowed had already shown.
func TestLossWithDelayIsCongestive(t *testing.T) {
	var c congestion
	c.init()
	const minRTT, srtt = 10_000, 10_000
	c.slowStart = false
	tgt := target(minRTT, c.cwnd)
	c.onAck(100, tgt-1, minRTT, srtt, 1)
	before := c.cwnd
	c.onLoss(1, srtt, 2) // one in a hundred, no queue: random
	if c.cwnd != before {
		t.Fatalf("a random loss moved the window from %.2f to %.2f", before, c.cwnd)
	}
	// The same loss, now with the RTT at its target (and the round not
	// yet decreased by the delay signal, which waits an RTT after the
	// last decrease).
	c.lastDecrease = -srtt
	c.lastRTT, c.lastTarget = tgt, tgt
	c.onLoss(1, srtt, 3)
	if want := before * (1 - lossDecrease); c.cwnd != want {
		t.Fatalf("a loss with a standing queue: window %.2f, want %.2f", c.cwnd, want)
	}
}

// A timeout that proves spurious gives back the window it collapsed; once
// the requester confirms it, it cannot be undone.
func TestCongestionUndoesASpuriousTimeout(t *testing.T) {
	var c congestion
	c.init()
	c.cwnd, c.slowStart = 100, false
	c.onTimeout(1000)
	require.Equal(t, float64(minWindow), c.cwnd)
	require.True(t, c.undoTimeout())
	assert.Equal(t, 100.0, c.cwnd)
	assert.False(t, c.slowStart)
	assert.False(t, c.undoTimeout(), "undone once")

	c.onTimeout(2000)
	c.onAck(1, 0, 10_000, 10_000, 3000) // a resend acknowledged in slow start
	assert.False(t, c.timeoutJudged(), "an ACK alone judges nothing: the requester does")
	c.confirmTimeout()
	assert.True(t, c.timeoutJudged())
	assert.False(t, c.undoTimeout(), "the timeout was real")
	assert.Less(t, c.cwnd, 100.0)
}

// Random loss scatters: judged round by round over a few packets, 5% of
// them lost looks like more than 10% often enough to keep the window
// small. A round is judged over at least lossJudged packets.
func TestLossShareIsJudgedOverEnoughPackets(t *testing.T) {
	var r lossRound
	const srtt = 10_000
	r.roll(srtt, 0)
	r.delivered, r.lost = 17, 3 // 15% of 20 packets
	assert.Zero(t, r.lossShare(), "20 packets are too few to judge")
	r.roll(srtt, srtt)
	assert.Equal(t, 17, r.delivered, "a round of 20 packets goes on past its RTT")

	r.delivered, r.lost = 122, 6 // 128 packets, 4.7% lost
	r.roll(srtt, 2*srtt)
	assert.Zero(t, r.delivered+r.lost, "128 packets and an RTT: a new round")
	r.lost = 1
	assert.InDelta(t, 7.0/129, r.lossShare(), 1e-9, "a round just begun is judged with the last")

	r.delivered, r.lost = 100, 28 // a policer's 22%
	r.roll(srtt, 3*srtt)
	r.lost = 2
	assert.Greater(t, r.lossShare(), congestiveShare)
}

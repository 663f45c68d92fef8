package vroce

import "math"

// Congestion control for RC: delay-based in the style of Swift (SIGCOMM
// 2020), needing nothing from switches. The window grows while the
// standing RTT (standingRTT) stays under a target a little above the
// path's base RTT, shrinks in
// proportion to the excess when it does not (at most once per RTT, and
// not below a burst: delayFloor), is trimmed by an eighth on a loss that
// congestion caused (congestive) and collapses on repeated timeouts.
// Below a burst's worth of window (as in Swift, whose windows fall under
// one packet in incast) a pacer spreads the window over an RTT; above
// it, the ACK clock spaces the packets.

const (
	initialWindow = 64   // packets
	maxWindow     = 1024 // packets; the SACK scoreboard and the responder's buffer hold this many
	minWindow     = 1
	targetSlack   = 300_000 // ns above 1.5 x base RTT: a user-space stack's scheduling noise
	maxDecrease   = 0.5     // the largest multiplicative decrease
	lossDecrease  = 0.125   // on a congestive loss found by SACK or NAK
	delayBeta     = 0.8
	paceBurst     = 16        // packets sent back to back before the pacer waits
	flowScaling   = 200_000.0 // ns of extra target delay for a one-packet window
)

// delayFloor is the smallest window a rise in delay alone cuts to; losses
// and timeouts still take it lower. Swift can read the fabric's delay
// apart from the hosts' (NIC timestamps); a user-space stack's RTT is
// mostly its hosts': packets waiting for a busy receiver to be scheduled,
// which a smaller window does not relieve but makes dearer. Each packet
// of a window under a burst is paced by a timer and, arriving alone,
// asks for its own ACK: 32 keep-alive HTTP streams through vroce-run,
// their hosts' CPUs saturated, sat at windows of 2-6 packets (SRTT 500-700
// us against a base of 50), and their receiver sent an ACK for every two
// data packets. With this floor (and responder.ackRequested's one ACK a
// batch), 2,324-3,163 requests/s of a 64 KiB file against 1,635-2,488
// (three interleaved runs). A congested fabric, with its queue
// overflowing, still cuts below it through its losses (congestive: the
// RTT stands at its target).
const delayFloor = paceBurst

// congestiveShare is the share of packets lost above which the losses
// are congestion's whatever the delay says: a policer, or a buffer too
// shallow to show delay, drops the excess, a share that grows with it. A
// VPC's random loss is a few percent at worst.
const congestiveShare = 0.1

// lossJudged is the fewest packets a round holds before it ends, so that
// a share is judged over at least this many. Random loss scatters: at 5%,
// a round of 20 packets loses three or more (15%) one time in thirteen,
// and a controller that judged such rounds cut the window that often, to
// a third of its lossless size; over 128 packets a share above 10% comes
// about one round in 200 (binomial tail), a trim the window regrows
// between.
const lossJudged = 128

type congestion struct {
	cwnd         float64 // packets
	slowStart    bool
	ssthresh     float64 // slow start ends here (after a timeout)
	lastDecrease int64
	pacer        tokenBucket // packets that may leave now (pace)
	standing     standingRTT
	// What the path showed lately, to tell congestion's losses from
	// random ones: the latest standing RTT and its target, and the
	// packets delivered and lost in this round and the last.
	lastRTT, lastTarget int64
	round               lossRound
	// undo is the window before the timeout that collapsed it, kept
	// while the requester has not judged that timeout (undoTimeout if it
	// proves spurious, confirmTimeout if not); 0 when none awaits.
	undo float64
}

// standingRTT is the least RTT sample of the last one to two SRTTs: what
// a queue holds every packet for, without what a host's stall held some
// of them for (Copa's standing RTT, NSDI 2018, over two half-windows).
// A queue delays every packet behind it; a receiver the scheduler or
// the hypervisor kept off its CPU for half a millisecond delays only the
// packets that arrived meanwhile, and the ones after come back at the
// base RTT. Cutting on single samples, the window of a stream between
// two namespaces at MTU 1500 fell to 20-60 packets in runs of cuts on
// 400-1,000 us samples against a 370 us target. Judged on the standing
// RTT, 64 KiB streams were faster in 21 of 30 interleaved pairs (three
// sets of ten, an hour apart), by a median of 1.12x (quartiles
// 0.95-1.42x); with the receiver stopped 10 ms in every 100, in 18 of
// 30, by 1.18x (0.79-1.48x). Single sets of ten said anything from
// 0.88x to 1.29x: this host's noise is that large.
type standingRTT struct {
	start     int64 // when the current half began
	cur, prev int64 // the least sample of this half and of the one before
}

// add takes an RTT sample at now. Each sample must come once: one fed
// again at a later now would open a half of its own and stand for an
// RTT it was not measured in.
func (s *standingRTT) add(rtt, srtt, now int64) {
	if s.cur == 0 || now-s.start >= srtt {
		s.prev, s.cur, s.start = s.cur, rtt, now
	} else {
		s.cur = min(s.cur, rtt)
	}
}

// value is the standing RTT; 0 before any sample.
func (s *standingRTT) value() int64 {
	if s.prev > 0 {
		return min(s.cur, s.prev)
	}
	return s.cur
}

// lossRound counts a round's deliveries and losses: a round lasts an RTT
// and at least lossJudged packets. The last round's counts are kept, so
// a round just begun is judged together with the one before it.
type lossRound struct {
	start                   int64
	delivered, lost         int
	lastDelivered, lastLost int
}

// roll starts a new round once srtt has passed since this one began and
// it has counted lossJudged packets.
func (r *lossRound) roll(srtt, now int64) {
	if now-r.start >= max(srtt, 1) && r.delivered+r.lost >= lossJudged {
		*r = lossRound{start: now, lastDelivered: r.delivered, lastLost: r.lost}
	}
}

// lossShare is the share of packets lost in this round and the last; 0
// until they have counted lossJudged packets between them.
func (r *lossRound) lossShare() float64 {
	lost := r.lost + r.lastLost
	n := r.delivered + r.lastDelivered + lost
	if n < lossJudged {
		return 0
	}
	return float64(lost) / float64(n)
}

func (c *congestion) init() {
	*c = congestion{cwnd: initialWindow, slowStart: true, ssthresh: maxWindow, pacer: tokenBucket{tokens: paceBurst}}
}

func (c *congestion) window() int { return max(int(c.cwnd), minWindow) }

// target is the RTT a window of cwnd aims at. As in Swift's flow-based
// scaling, a small window tolerates more delay than a large one: flows
// sharing a path see the same delay, and a decrease in proportion to it
// alone would keep whatever imbalance they have; this lets the smaller
// grow while the larger yields, so they converge to fair shares.
func target(minRTT int64, cwnd float64) int64 {
	return minRTT + minRTT/2 + targetSlack + int64(flowScaling/math.Sqrt(max(cwnd, 1)))
}

// onAck adjusts the window for acked packets, judged by the standing RTT;
// rtt is the least RTT sample taken since the last onAck (0: none, as
// when only resent packets were acknowledged).
func (c *congestion) onAck(acked int, rtt, minRTT, srtt, now int64) {
	if acked <= 0 {
		return
	}
	tgt := target(minRTT, c.cwnd)
	if rtt > 0 {
		c.standing.add(rtt, srtt, now)
	}
	rtt = c.standing.value()
	if rtt > 0 {
		c.lastRTT, c.lastTarget = rtt, tgt
	}
	c.round.roll(srtt, now)
	c.round.delivered += acked
	if rtt <= 0 || rtt < tgt {
		if c.slowStart {
			c.cwnd += float64(acked)
			if c.cwnd >= c.ssthresh {
				c.cwnd, c.slowStart = c.ssthresh, false
			}
		} else {
			c.cwnd += float64(acked) / c.cwnd
		}
	} else if now-c.lastDecrease >= srtt {
		excess := float64(rtt-tgt) / float64(rtt)
		c.cwnd = max(c.cwnd*max(1-delayBeta*excess, 1-maxDecrease), min(c.cwnd, delayFloor))
		c.lastDecrease, c.slowStart = now, false
	}
	c.cwnd = min(max(c.cwnd, minWindow), maxWindow)
}

// onLoss hears of losses, lost of them, and trims the window by an
// eighth, once per RTT, when the loss is congestive. A VPC drops packets
// that no queue overflowed: halving on every loss, as Reno does, would
// cap goodput under random loss near 1.2/sqrt(p) packets per RTT, and
// even an eighth per RTT holds the window near eight times its per-RTT
// growth. So a loss counts as congestion only when the path shows it:
//   - the RTT stands at or above its target: a queue built up before it
//     overflowed (the delay signal has begun to cut already);
//   - or the round lost more than congestiveShare of its packets, losses
//     counted as events: a run of consecutive PSNs lost together is one
//     (the requester counts runs). A segmented datagram that a host's
//     stack carries whole (GSO over veth, say) is dropped whole, 20 to
//     60 packets at once: counted by packet, 5% of datagrams dropped at
//     random read as more than 10% of a round's packets in 345 of 396
//     window cuts of one run. A policer, or a queue overflowing under
//     load, drops packets across the window, as many events as packets.
//
// Any other loss is random: the retransmission repairs it and the window
// stays. Timeouts still collapse it (onTimeout).
func (c *congestion) onLoss(lost int, srtt, now int64) {
	c.round.roll(srtt, now)
	c.round.lost += lost
	if !c.congestive() || now-c.lastDecrease < srtt {
		return
	}
	c.cwnd = max(c.cwnd*(1-lossDecrease), minWindow)
	c.lastDecrease, c.slowStart = now, false
}

// congestive reports whether the losses heard of lately are congestion's.
func (c *congestion) congestive() bool {
	if c.lastRTT > 0 && c.lastRTT >= c.lastTarget {
		return true
	}
	return c.round.lossShare() > congestiveShare
}

// onTimeout restarts from the smallest window and slow-starts back to half
// the window that timed out.
func (c *congestion) onTimeout(now int64) {
	if c.undo == 0 {
		c.undo = c.cwnd
	}
	c.ssthresh = max(c.cwnd/2, 2)
	c.cwnd, c.lastDecrease, c.slowStart = minWindow, now, true
}

// timeoutJudged reports whether no collapse awaits the requester's
// verdict.
func (c *congestion) timeoutJudged() bool { return c.undo == 0 }

// undoTimeout restores the window a timeout collapsed, once the timeout
// proves spurious; it reports whether there was one to undo.
func (c *congestion) undoTimeout() bool {
	if c.undo == 0 {
		return false
	}
	c.cwnd, c.slowStart = max(c.cwnd, c.undo), false
	c.undo = 0
	return true
}

// confirmTimeout keeps the collapse: the timeout proved real.
func (c *congestion) confirmTimeout() { c.undo = 0 }

// pace reports whether one more packet may leave at now; if not, when it
// may. The pacer refills at cwnd packets per srtt, holding at most a burst.
func (c *congestion) pace(srtt, now int64) (ok bool, at int64) {
	if c.cwnd >= paceBurst {
		// A window of a burst or more is clocked by its ACKs, which the
		// path already spaces; pacing it costs a timer wakeup per gap.
		c.pacer.fill(now, paceBurst)
		return true, 0
	}
	if srtt > 0 {
		rate := c.cwnd / float64(srtt) // packets per ns
		c.pacer.refill(now, rate, paceBurst)
		if c.pacer.tokens < 1 {
			return false, c.pacer.whenOne(rate)
		}
	}
	c.pacer.tokens--
	return true, 0
}

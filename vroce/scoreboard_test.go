package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// sentBoard is a scoreboard that has sent n SEND/WRITE PSNs from first,
// PSN first+i at time at(i).
func sentBoard(first uint32, n int, at func(i int) int64) *scoreboard {
	var s scoreboard
	s.start(first)
	for i := range n {
		s.sent(psnAdd(first, i), at(i), false)
	}
	return &s
}

func everyMicrosecond(i int) int64 { return int64(i+1) * 1000 }

func sackOf(blocks ...wire.SACKBlock) *wire.SACK {
	var s wire.SACK
	s.N = copy(s.Blocks[:], blocks)
	return &s
}

func TestScoreboardTracksWhatWasSent(t *testing.T) {
	s := sentBoard(0xfffffe, 4, everyMicrosecond) // across the 24-bit wrap
	assert.Equal(t, 4, s.inFlight())
	assert.True(t, s.outstanding())
	for _, psn := range []uint32{0xfffffe, 0xffffff, 0, 1} {
		assert.True(t, s.tracked(psn), "PSN %#x was sent", psn)
	}
	for _, psn := range []uint32{0xfffffd, 2, 0x7fffff} {
		assert.False(t, s.tracked(psn), "PSN %#x was not", psn)
	}
	assert.False(t, s.sent(2, 9000, false), "a first send")
	assert.True(t, s.sent(0xffffff, 9000, false), "a resend")
	assert.Equal(t, 1, s.resends)
	assert.Equal(t, int64(9000), s.pkt(0xffffff).sentAt, "a resend restarts the PSN's clock")
}

// A SACK marks PSNs held; only PSNs sent once give RTT samples, in PSN
// order; a held PSN marked lost is no longer to be resent.
func TestScoreboardSACKMarksHeldAndSamplesFirstSends(t *testing.T) {
	s := sentBoard(100, 10, everyMicrosecond)
	s.markLost(104, s.pkt(104))
	s.sent(105, 20_000, false) // resent: no sample
	var samples []int64
	s.onSACK(sackOf(wire.SACKBlock{First: 103, Count: 3}, wire.SACKBlock{First: 500, Count: 2}), 1_000_000, 0, func(at int64) { samples = append(samples, at) })
	assert.Equal(t, []int64{4000, 5000}, samples, "103 and 104 sent once; 105 resent; 500 never sent")
	for psn := uint32(103); psn <= 105; psn++ {
		assert.True(t, s.pkt(psn).held, "PSN %d held", psn)
		assert.True(t, s.arrived(psn))
	}
	assert.False(t, s.pkt(104).lost, "held: no longer to be resent")
	assert.Equal(t, 0, s.lostCount)
	assert.Equal(t, uint32(105), s.highHeld)
	assert.Equal(t, int64(20_000), s.rackSentAt, "the newest send time among PSNs known received")
}

// RACK: a PSN is lost once three later PSNs have arrived (and none of its
// own sends is newer than theirs), or once something sent a quarter RTT
// after it has.
func TestScoreboardDetectsLossesBySequenceAndByTime(t *testing.T) {
	const srtt = 400_000 // a reorder window of 100 us
	at := func(i int) int64 { return []int64{0, 10_000, 20_000, 150_000, 160_000, 170_000}[i] + 1 }
	s := sentBoard(0, 6, at)
	// 4 arrives: 0 and 1 have three later PSNs (2, 3, 4 sent after
	// them) above them; 2 and 3 only one or two, but 2 was sent 140 us
	// before 4, more than the reorder window; 3, 10 us before, is not
	// yet given up on.
	s.onSACK(sackOf(wire.SACKBlock{First: 4, Count: 1}), 1_000_000, 0, func(int64) {})
	assert.Equal(t, 3, lostPackets(s.detectLosses(srtt)))
	for psn, lost := range []bool{true, true, true, false, false, false} {
		assert.Equal(t, lost, s.pkt(uint32(psn)).lost, "PSN %d", psn)
	}
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "nothing new: nothing more is lost")

	// A resend is judged by evidence newer than itself.
	s.sent(0, 300_000, false)
	s.onSACK(sackOf(wire.SACKBlock{First: 5, Count: 1}), 1_000_000, 0, func(int64) {})
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "5 was sent before 0's resend")
	assert.False(t, s.pkt(0).lost)
}

func TestScoreboardNextLostResumesAndProbeTakesTheOldestUnconfirmed(t *testing.T) {
	s := sentBoard(10, 8, everyMicrosecond)
	s.onSACK(sackOf(wire.SACKBlock{First: 10, Count: 2}), 1_000_000, 0, func(int64) {})
	assert.Equal(t, uint32(12), s.probe(), "10 and 11 are held: 12 is the oldest unconfirmed")
	s.markLost(15, s.pkt(15))
	psn, ok := s.nextLost()
	require.True(t, ok)
	assert.Equal(t, uint32(12), psn)
	s.sent(12, 50_000, false)
	psn, ok = s.nextLost()
	require.True(t, ok)
	assert.Equal(t, uint32(15), psn)
	s.sent(15, 50_000, false)
	_, ok = s.nextLost()
	assert.False(t, ok)

	s.markLostFrom(0) // below sndUna: from sndUna
	assert.Equal(t, 8, s.lostCount, "every PSN in flight, the held ones too")
	assert.False(t, s.pkt(10).held, "marked lost: to be resent, held or not")
}

// A cumulative ACK delivers SEND and WRITE PSNs, reports the newest send
// time of those sent once and of those resent, and marks lost the READ
// PSNs it passed whose responses should have come.
func TestScoreboardAckThrough(t *testing.T) {
	var s scoreboard
	s.start(0)
	s.sent(0, 1000, false)
	s.sent(1, 2000, true) // a READ sent long before the ACK
	s.sent(2, 3000, false)
	s.sent(3, 4000, false)
	s.sent(4, 95_000, true) // a READ sent just before it
	s.sent(5, 6000, false)
	s.sent(3, 90_000, false) // resent
	s.onSACK(sackOf(wire.SACKBlock{First: 2, Count: 1}), 1_000_000, 0, func(int64) {})

	res := s.ackThrough(4, 100_000, 20_000, 0)
	assert.Equal(t, ackResult{sampleSentAt: 1000, resentSentAt: 90_000, readsLost: 1}, res,
		"2 was held (sampled when SACKed); 3 resent; READ 1 due 10 us after the ACK's half RTT")
	assert.True(t, s.pkt(1).lost)
	assert.False(t, s.pkt(4).lost, "READ 4 may still come")
	for psn, done := range []bool{true, false, true, true, false, false} {
		assert.Equal(t, done, s.pkt(uint32(psn)).done, "PSN %d", psn)
	}
	assert.Equal(t, 1, s.advance(), "sndUna stops at READ 1")
	assert.Equal(t, ackResult{}, s.ackThrough(0xffffff, 100_000, 20_000, 0), "an ACK below sndUna says nothing")
}

// READ and atomic requests count against max_rd_atomic while any of their
// responses is awaited, by request, not by PSN.
func TestScoreboardCountsReadRequestsAwaited(t *testing.T) {
	var s scoreboard
	s.start(0)
	for psn := range uint32(4) { // one request for PSNs 0-3, sent as emit sends it
		s.sent(psn, 1000, true)
	}
	for psn := range uint32(4) {
		s.await(3, psn)
	}
	s.sent(4, 1000, true) // another for PSN 4
	s.await(4, 4)
	assert.Equal(t, 2, s.rdRequests)
	for psn := range uint32(3) {
		s.delivered(psn, 1_000_000, 0)
	}
	assert.Equal(t, 2, s.rdRequests, "PSN 3 is still awaited")
	s.markLost(3, s.pkt(3)) // presumed lost: no longer awaited
	assert.Equal(t, 1, s.rdRequests)
	s.delivered(4, 1_000_000, 0)
	assert.Equal(t, 0, s.rdRequests)
}

func TestScoreboardAdvanceLetsAnIdleWindowGo(t *testing.T) {
	s := sentBoard(0, 200, everyMicrosecond)
	s.sent(7, 300_000, false)
	require.Len(t, s.pk, 256)
	s.ackThrough(99, 400_000, 0, 0)
	assert.Equal(t, 100, s.advance())
	assert.Equal(t, 0, s.resends, "the resend of 7 is passed")
	assert.Len(t, s.pk, 256, "still in flight: kept")
	s.ackThrough(199, 400_000, 0, 0)
	assert.Equal(t, 100, s.advance())
	assert.False(t, s.outstanding())
	assert.Nil(t, s.pk, "nothing in flight: a window's entries are let go")
	assert.False(t, s.sent(200, 500_000, false), "and the next send starts afresh")
	assert.Equal(t, 1, s.inFlight())
}

// A whole flight lost at once (one GSO datagram can carry the window):
// the probe's resend of its first PSN arrives alone, and its ACK shows
// that everything sent before the probe is gone, above the PSN it
// delivered as much as below.
func TestScoreboardAProbesACKShowsTheWholeFlightLost(t *testing.T) {
	const srtt, minRTT = 100_000, 50_000
	s := sentBoard(0, 30, everyMicrosecond) // sent within 30 us, all lost
	s.sent(0, 500_000, false)               // the probe's resend
	s.ackThrough(0, 600_000, srtt, minRTT)
	s.advance()
	assert.Equal(t, 29, lostPackets(s.detectLosses(srtt)), "PSNs 1 to 29 were sent before the probe that arrived")
	assert.Equal(t, 0, s.pipe(), "nothing is in the network")
}

// RACK's guard: news of a resent PSN sooner than the least RTT after its
// resend is news of an earlier copy, and says nothing of what was sent
// between the two.
func TestScoreboardAResendAcknowledgedTooSoonIsNoEvidence(t *testing.T) {
	const srtt, minRTT = 100_000, 50_000
	s := sentBoard(0, 10, everyMicrosecond)
	s.sent(0, 200_000, false) // resent, though the first copy is on its way
	s.ackThrough(0, 210_000, srtt, minRTT)
	s.advance()
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "1 to 9 may still arrive")
	assert.Equal(t, 9, s.pipe())

	// Nor does an ACK that reports more than the resend: it was sent for
	// the first copy, which came with those after it, delayed behind a
	// queue, and the rest are on their way too.
	s = sentBoard(0, 10, everyMicrosecond)
	s.sent(0, 200_000, false)
	s.ackThrough(4, 300_000, srtt, minRTT)
	s.advance()
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "5 to 9 may still arrive")
	s.onSACK(sackOf(wire.SACKBlock{First: 0, Count: 1}, wire.SACKBlock{First: 6, Count: 1}), 300_000, minRTT, func(int64) {})
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "a SACK of 6 sent once says 5 trails it by 1 us, within the reorder window")

	// The positive control: the ACK of the resend alone, a least RTT
	// after it.
	s = sentBoard(0, 10, everyMicrosecond)
	s.sent(0, 200_000, false)
	s.ackThrough(0, 250_000, srtt, minRTT)
	s.advance()
	assert.Equal(t, 9, lostPackets(s.detectLosses(srtt)))
}

// The pipe counts what is in the network: sent and neither delivered,
// held nor presumed lost. A held PSN marked lost again returns to it
// once resent.
func TestScoreboardPipe(t *testing.T) {
	s := sentBoard(0, 10, everyMicrosecond)
	assert.Equal(t, 10, s.pipe())
	s.onSACK(sackOf(wire.SACKBlock{First: 4, Count: 3}), 1_000_000, 0, func(int64) {})
	assert.Equal(t, 7, s.pipe(), "4 to 6 held")
	s.ackThrough(1, 1_000_000, 0, 0)
	assert.Equal(t, 5, s.pipe(), "0 and 1 delivered")
	assert.Equal(t, 2, s.advance())
	assert.Equal(t, 5, s.pipe(), "passing delivered PSNs changes nothing")
	s.markOneLost(5) // held, but to be resent (as an RNR NAK's PSN is)
	assert.Equal(t, 5, s.pipe(), "marked lost: not in the network until resent")
	s.sent(5, 2_000_000, false)
	assert.Equal(t, 6, s.pipe())
	s.ackThrough(9, 3_000_000, 0, 0)
	assert.Equal(t, 8, s.advance())
	assert.Equal(t, 0, s.pipe())
	assert.Equal(t, 0, s.arrivals, "nothing in flight: nothing counted")
}

// A pump's packets share one timestamp, so order on the wire, not time,
// says which came after which: the ACK of the first resend of a pump is
// no evidence that the resends behind it were lost.
func TestScoreboardJudgesBySendOrderWithinAPump(t *testing.T) {
	const srtt, minRTT = 100_000, 50_000
	s := sentBoard(0, 20, everyMicrosecond)
	s.onSACK(sackOf(wire.SACKBlock{First: 10, Count: 10}), 100_000, minRTT, func(int64) {})
	require.Equal(t, 10, lostPackets(s.detectLosses(srtt)), "0 to 9: ten later PSNs arrived")
	for psn := range uint32(10) {
		s.sent(psn, 500_000, false) // one pump resends them all
	}
	s.ackThrough(0, 600_000, srtt, minRTT)
	s.advance()
	assert.Equal(t, 0, lostPackets(s.detectLosses(srtt)), "1 to 9 left after 0, in the same pump")

	// The positive control: a resend from the middle of the pump
	// arrives, and those sent before it in the pump are gone.
	s.onSACK(sackOf(wire.SACKBlock{First: 5, Count: 1}), 600_000, minRTT, func(int64) {})
	assert.Equal(t, 4, lostPackets(s.detectLosses(srtt)), "1 to 4 left before 5")
	assert.False(t, s.pkt(6).lost, "6 left after 5")
}

// lostPackets is detectLosses' count of PSNs.
func lostPackets(found, _ int) int { return found }

// Losses are counted as runs of consecutive PSNs too: a segmented
// datagram dropped whole is one event however many packets it carried.
func TestScoreboardCountsLossRuns(t *testing.T) {
	const srtt = 400_000
	s := sentBoard(0, 12, everyMicrosecond)
	s.onSACK(sackOf(wire.SACKBlock{First: 3, Count: 2}, wire.SACKBlock{First: 8, Count: 4}), 1_000_000, 0, func(int64) {})
	found, runs := s.detectLosses(srtt)
	assert.Equal(t, 6, found, "0 to 2 and 5 to 7")
	assert.Equal(t, 2, runs)
}

// A PSN refused again and again with RNR NAKs, each retry sent after the
// last refusal, counts one copy that may be unread while a retry is out
// and none while it waits; the PSNs held behind it and the refused one
// are not in the pipe the peer budget charges.
func TestScoreboardRNRRetriesCountNoExtraCopies(t *testing.T) {
	s := sentBoard(100, 8, everyMicrosecond)
	s.onSACK(sackOf(wire.SACKBlock{First: 101, Count: 7}), 10_000, 0, func(int64) {})
	assert.Equal(t, 1, s.pipe(), "only the refused PSN is not held")
	for i := range 300 {
		s.answered(100) // the RNR NAK
		s.markOneLost(100)
		require.Equal(t, 0, s.pipe()+s.resends, "waiting out RNR %d", i)
		s.sent(100, int64(20_000+i), false)
		require.Equal(t, 2, s.pipe()+s.resends, "retry %d out", i)
	}
	assert.True(t, s.pkt(100).resent(), "a retry gives no RTT sample (Karn)")
}

package rsock

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The ways a stream's connection ends, event by event, with the state
// each step leads to.
func TestStreamStateMachineTakesTheTCPPaths(t *testing.T) {
	type step struct {
		ev   streamEvent
		want streamState
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"active close: we shut, our FIN is acknowledged, theirs comes", []step{
			{evShutWrite, stateFinWait1}, {evFinAcked, stateFinWait2}, {evPeerFIN, stateTimeWait}, {evTeardown, stateReleased}}},
		{"passive close: their FIN, then ours", []step{
			{evPeerFIN, stateCloseWait}, {evShutWrite, stateLastAck}, {evFinAcked, stateTimeWait}}},
		{"simultaneous close: both FINs cross", []step{
			{evShutWrite, stateFinWait1}, {evPeerFIN, stateClosing}, {evFinAcked, stateTimeWait}}},
		{"their FIN, then their QP leaves (RDMA_CM)", []step{
			{evPeerFIN, stateCloseWait}, {evPeerLeft, statePeerGone}, {evShutWrite, statePeerGone}}},
		{"after an orderly end the peer's QP leaves", []step{
			{evPeerFIN, stateCloseWait}, {evShutWrite, stateLastAck}, {evFinAcked, stateTimeWait}, {evPeerLeft, statePeerGone}}},
		{"the peer's QP leaves before its FIN: a reset", []step{
			{evShutWrite, stateFinWait1}, {evPeerLeft, stateFailed}, {evPeerFIN, stateFailed}, {evFinAcked, stateFailed}}},
		{"we reset: failed, then our RST posted", []step{
			{evFailure, stateFailed}, {evRstPosted, stateResetSent}, {evFailure, stateResetSent}, {evTeardown, stateReleased}}},
		{"a failure in the middle of a close", []step{
			{evShutWrite, stateFinWait1}, {evFinAcked, stateFinWait2}, {evFailure, stateFailed}, {evPeerFIN, stateFailed}}},
		{"a repeated shut, a FIN acknowledged twice", []step{
			{evShutWrite, stateFinWait1}, {evShutWrite, stateFinWait1}, {evFinAcked, stateFinWait2}, {evFinAcked, stateFinWait2}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := stateEstablished
			for i, st := range c.steps {
				next := s.next(st.ev)
				assert.Equal(t, st.want, next, "step %d: %v on %v", i+1, s, st.ev)
				s = next
			}
		})
	}
}

// Whatever the state: teardown releases, a released stream stays
// released, and a failed one stays failed (or has its RST posted).
func TestStreamStateMachineInvariants(t *testing.T) {
	for s := range numStreamStates {
		for ev := range numStreamEvents {
			next := s.next(ev)
			switch {
			case ev == evTeardown:
				assert.Equal(t, stateReleased, next, "%v on %v", s, ev)
			case s == stateReleased:
				assert.Equal(t, stateReleased, next, "%v on %v", s, ev)
			case s.hasFailed():
				assert.True(t, next.hasFailed(), "%v on %v gave %v", s, ev, next)
			case ev == evFailure:
				assert.Equal(t, stateFailed, next, "%v on %v", s, ev)
			case ev == evRstPosted:
				assert.Equal(t, stateResetSent, next, "%v on %v", s, ev)
			}
			if next.hasFailed() {
				assert.False(t, next.peerFinished() || next.writeShut() || next.peerMaySend(), "%v: failed, and nothing else", next)
			}
		}
	}
}

// What each state lets the stream do, and when a stream the application
// closed may be torn down.
func TestStreamStatesSayWhatTheStreamMayDo(t *testing.T) {
	for _, c := range []struct {
		s                                     streamState
		peerMaySend, peerDone, shut, owesFIN  bool
		finishedIdle, finishedWithSendsOnWire bool
	}{
		{stateEstablished, true, false, false, false, false, false},
		{stateFinWait1, true, false, true, true, false, false},
		{stateFinWait2, true, false, true, false, false, false},
		{stateCloseWait, false, true, false, false, false, false},
		{stateClosing, false, true, true, true, false, false},
		{stateLastAck, false, true, true, true, false, false},
		{stateTimeWait, false, true, true, false, true, true},
		{statePeerGone, false, true, true, false, true, true},
		{stateFailed, false, false, false, false, true, true},
		{stateResetSent, false, false, false, false, true, false},
		{stateReleased, false, false, false, false, false, false},
	} {
		assert.Equal(t, c.peerMaySend, c.s.peerMaySend(), "%v: peer may send", c.s)
		assert.Equal(t, c.peerDone, c.s.peerFinished(), "%v: peer finished", c.s)
		assert.Equal(t, c.shut, c.s.writeShut(), "%v: writing shut", c.s)
		assert.Equal(t, c.owesFIN, c.s.owesFIN(), "%v: owes a FIN", c.s)
		assert.Equal(t, c.finishedIdle, c.s.finished(0), "%v: finished, nothing in flight", c.s)
		assert.Equal(t, c.finishedWithSendsOnWire, c.s.finished(2), "%v: finished, sends in flight", c.s)
	}
	assert.Equal(t, "FIN_WAIT_2", stateFinWait2.String())
	assert.Equal(t, "streamState(200)", streamState(200).String())
}

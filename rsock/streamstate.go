package rsock

import "fmt"

// A stream's connection state, named after TCP's (RFC 9293, 3.3.2): the
// send half ends with our FIN and its acknowledgement (the completion of
// its SEND), the receive half with the peer's FIN; a reset, a timeout or
// a protocol error fails both. Two states are our own: statePeerGone (the
// peer's FIN came, then its QP left: an RDMA_CM disconnect, after which
// nothing of ours can be acknowledged) and stateResetSent (failed, with our
// RST on its way). What the application holds is not part of it: as with
// a TCP socket, Close orphans the connection, which then finishes alone
// (stream.closed).
type streamState uint8

const (
	stateEstablished streamState = iota // data may flow both ways
	stateFinWait1                       // we shut writing; our FIN is queued behind the data, or sent and not yet acknowledged
	stateFinWait2                       // our FIN is acknowledged; the peer may still send
	stateCloseWait                      // the peer's FIN came; we may still send
	stateClosing                        // we shut writing, then the peer's FIN came; ours is not yet acknowledged
	stateLastAck                        // the peer's FIN came, then we shut writing; ours is not yet acknowledged
	stateTimeWait                       // both FINs are through: an orderly end
	statePeerGone                       // the peer's FIN came, then its QP left
	stateFailed                         // reset by the peer, timed out, a protocol error (stream.err says which)
	stateResetSent                      // failed, and our RST is on its way
	stateReleased                       // torn down: the QP destroyed, the buffers given back
	numStreamStates
)

var streamStateNames = [numStreamStates]string{"ESTABLISHED", "FIN_WAIT_1", "FIN_WAIT_2", "CLOSE_WAIT", "CLOSING", "LAST_ACK", "TIME_WAIT", "PEER_GONE", "FAILED", "RESET_SENT", "RELEASED"}

func (s streamState) String() string {
	if s < numStreamStates {
		return streamStateNames[s]
	}
	return fmt.Sprintf("streamState(%d)", uint8(s))
}

// streamEvent is what moves a stream from one state to the next.
type streamEvent uint8

const (
	evShutWrite streamEvent = iota // the application shuts writing (CloseWrite, or an orderly Close)
	evFinAcked                     // our FIN's SEND completed
	evPeerFIN                      // the peer's FIN arrived
	evPeerLeft                     // the peer's QP left (an RDMA_CM disconnect)
	evFailure                      // a reset from the peer, a timeout, a protocol error
	evRstPosted                    // our RST is posted
	evTeardown                     // the QP is destroyed and the buffers given back
	numStreamEvents
)

var streamEventNames = [numStreamEvents]string{"evShutWrite", "evFinAcked", "evPeerFIN", "evPeerLeft", "evFailure", "evRstPosted", "evTeardown"}

func (e streamEvent) String() string {
	if e < numStreamEvents {
		return streamEventNames[e]
	}
	return fmt.Sprintf("streamEvent(%d)", uint8(e))
}

// streamTransitions is the state machine: the state an event leads to.
// An event a state does not list leaves it where it is (a FIN after a
// evFailure, say, changes nothing); evTeardown leads every state to stateReleased.
var streamTransitions = [numStreamStates]map[streamEvent]streamState{
	stateEstablished: {evShutWrite: stateFinWait1, evPeerFIN: stateCloseWait, evPeerLeft: stateFailed, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateFinWait1:    {evFinAcked: stateFinWait2, evPeerFIN: stateClosing, evPeerLeft: stateFailed, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateFinWait2:    {evPeerFIN: stateTimeWait, evPeerLeft: stateFailed, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateCloseWait:   {evShutWrite: stateLastAck, evPeerLeft: statePeerGone, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateClosing:     {evFinAcked: stateTimeWait, evPeerLeft: statePeerGone, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateLastAck:     {evFinAcked: stateTimeWait, evPeerLeft: statePeerGone, evFailure: stateFailed, evRstPosted: stateResetSent},
	stateTimeWait:    {evPeerLeft: statePeerGone, evFailure: stateFailed, evRstPosted: stateResetSent},
	statePeerGone:    {evFailure: stateFailed, evRstPosted: stateResetSent},
	stateFailed:      {evRstPosted: stateResetSent},
	stateResetSent:   {},
	stateReleased:    {},
}

// next is the state ev leads s to.
func (s streamState) next(ev streamEvent) streamState {
	if ev == evTeardown {
		return stateReleased
	}
	if to, ok := streamTransitions[s][ev]; ok {
		return to
	}
	return s
}

// hasFailed: the stream stateFailed; stream.err says why.
func (s streamState) hasFailed() bool { return s == stateFailed || s == stateResetSent }

// peerFinished: the peer will send no more (its FIN came), and the
// stream has not stateFailed.
func (s streamState) peerFinished() bool {
	switch s {
	case stateCloseWait, stateClosing, stateLastAck, stateTimeWait, statePeerGone:
		return true
	}
	return false
}

// peerMaySend: the peer may still send data, for which credits are
// granted.
func (s streamState) peerMaySend() bool {
	return s == stateEstablished || s == stateFinWait1 || s == stateFinWait2
}

// writeShut: nothing more may be written, though the stream has not
// stateFailed: we shut writing, or the peer has gone.
func (s streamState) writeShut() bool {
	switch s {
	case stateFinWait1, stateFinWait2, stateClosing, stateLastAck, stateTimeWait, statePeerGone:
		return true
	}
	return false
}

// owesFIN: our FIN is due, once the data written before it is out (its
// SEND, posted, is stream.finPosted).
func (s streamState) owesFIN() bool {
	return s == stateFinWait1 || s == stateClosing || s == stateLastAck
}

// finished reports whether a stream the application closed is done with
// and may be torn down, with inflight messages of ours not yet completed:
// an orderly end, the peer gone, or a evFailure (once our RST has left, if
// one was sent; whatever else is in flight no longer matters to anyone).
func (s streamState) finished(inflight int) bool {
	switch s {
	case stateTimeWait, statePeerGone, stateFailed:
		return true
	case stateResetSent:
		return inflight == 0
	}
	return false
}

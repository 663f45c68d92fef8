package vroce

import "sync/atomic"

// sendStall tells whether this device's own send is stuck: a provider's
// Send that has not returned, with none returning meanwhile, for at least
// sendStallMin. A retransmission timer that fires then has learnt nothing
// of the path, since the packets it would count lost may not have left
// this host: a Send waits for room in the socket or a plugin's ring, and
// the kernel can stall copying a batch into its buffers (5 ms and more
// for 29 packets of 32 KiB in a VM, while loopback's timers resent what
// had not yet left; docs/performance-history.md). The requester holds
// its loss deadlines while it lasts (requester.onTimer).
//
// Device.transmit, the one place packets leave, begins and ends each
// send; any goroutine may ask.
type sendStall struct {
	inFlight atomic.Int32
	// moved is the latest device time the send path was seen moving: a
	// send began with none in flight, or a send that began then has
	// returned.
	moved atomic.Int64
}

// sendStallMin is how long a send must go without returning to count as
// stuck: a batch's send takes microseconds.
const sendStallMin = 1_000_000 // ns

// begin marks a send's start. A send that finds none in flight stamps
// moved before it counts itself, so that stalled never sees it in flight
// with an old stamp (a device idle for a while would look stuck).
func (s *sendStall) begin(now int64) {
	if s.inFlight.Load() == 0 {
		s.moved.Store(now)
	}
	s.inFlight.Add(1)
}

// end marks the return of a send that began at began. It stamps the
// send's start, not its end, so that a send costs one clock reading: the
// one after the system call cost several times the one before it (in a
// one-CPU stream ping-pong, 143 profile samples against 41, 0.8% of all
// the CPU), and a send that returns took microseconds. What it gives up
// is a send that took longer: its return no longer tells stalled that
// another, still in flight, has just begun its wait, and a send that has
// stayed in flight for sendStallMin is stuck however the others fared.
func (s *sendStall) end(began int64) {
	for {
		m := s.moved.Load()
		if began <= m || s.moved.CompareAndSwap(m, began) {
			break
		}
	}
	s.inFlight.Add(-1)
}

// stalled reports whether a send has been in flight at now, none having
// begun on an idle path or returned after beginning in the last
// sendStallMin.
func (s *sendStall) stalled(now int64) bool {
	return s.inFlight.Load() > 0 && now-s.moved.Load() >= sendStallMin
}

package vroce

import (
	"context"
	"sync/atomic"
)

// A Signal wakes a goroutine that waits for news a completion handler
// leaves it, rather than for a completion: rsock's stream reader waits
// for the data its CQ's handler (OnCompletion) queues on the stream.
// While it waits, the goroutine may receive for the whole device
// (receiveTurn), as one waiting in CQ.Wait does, so that the packet that
// brings its news wakes it directly instead of through the device's
// receive goroutine: between two processes that hand-off is a thread
// wake-up per message.
//
// One goroutine at a time receives for the device; others waiting on a
// Signal sleep until it is notified.
type Signal struct {
	dev *Device
	// noticed is a notice not yet taken, and wake (capacity 1) rouses a
	// waiter asleep when one is left. Most notices are left by the
	// waiter's own batch, as it holds the receive turn: a channel of
	// notices cost that waiter a send and a receive under the channel's
	// lock on every message (with its length read, 260 samples of a
	// one-CPU stream_lat's 15,000: 1 us of a round trip).
	noticed atomic.Bool
	wake    chan struct{}
	// receiving counts waiters on this Signal holding the receive turn
	// (briefly two, as one gives it up and another takes it): a Notify
	// from outside the holder's batch must cut its receive short.
	receiving atomic.Int32
	// sleeping counts waiters blocked on wake (and the offer).
	sleeping atomic.Int32
	// cancel is the channel of the last waiter to hold the turn (written
	// and read only by the holder, ordered by the turn's lock), and ready
	// the turn's done func, made once.
	cancel <-chan struct{}
	ready  func() bool
}

// NewSignal makes a Signal whose waiters may receive for d.
func (d *Device) NewSignal() *Signal {
	s := &Signal{dev: d, wake: make(chan struct{}, 1)}
	s.ready = s.readyForHolder
	return s
}

// Notify leaves a notice: a Wait in progress returns, or else the next
// one returns at once. Notices do not add up.
func (s *Signal) Notify() {
	// Left before sleeping is read, as a waiter counts itself sleeping
	// before it looks for a notice: one of the two sees the other.
	s.noticed.Store(true)
	if s.sleeping.Load() > 0 {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	d := s.dev
	d.wakeHolder(&s.receiving)
	if s.sleeping.Load() > 0 {
		// Someone this wakes could take the turn, or run before the
		// receive goroutine goes on: as CQ.wakeLocked, only then.
		// Data is notified whether or not its reader waits yet, and a
		// turn given up to nobody leaves the device unread until the
		// lease runs out.
		d.handedOff.Store(true)
		d.turn.woke.Store(true)
	}
}

// Wait blocks until the Signal is notified, taking the notice, or until
// cancel closes; the caller knows which it waited for. Once the device is
// closed, Wait still waits for either, without receiving.
//
// A waiter receiving for the device sees cancel close only when its
// receive next returns: whoever closes cancel also calls Notify, as
// netconn's deadlines do for a Stream that is a netconn.ReadInterrupter.
func (s *Signal) Wait(cancel <-chan struct{}) {
	d := s.dev
	turn := d.turn.intr != nil
	for {
		if s.take() {
			return
		}
		select {
		case <-cancel:
			return
		default:
		}
		if turn && d.takeTurnFree() {
			s.cancel = cancel
			// An error goes to the receive goroutine with the turn,
			// which deals with it; this waiter waits the plain way.
			turn = d.receiveHolding(context.Background(), s.ready, &s.receiving) == nil
			continue
		}
		var offer, done <-chan struct{} // nil for a waiter that may not take the turn
		if turn {
			offer, done = d.park(), d.done
		}
		s.sleeping.Add(1)
		awake := s.take() // left before this waiter counted itself
		if !awake {
			select {
			case <-s.wake: // the notice is taken at the top (a wake left over from one taken already: asleep again)
			case <-cancel:
				awake = true
			case <-offer: // the receive turn is free: take it, if it still is
			case <-done:
				turn = false
			}
		}
		s.sleeping.Add(-1)
		if offer != nil {
			d.unpark()
		}
		if awake {
			return
		}
	}
}

// take takes the notice, if one was left.
func (s *Signal) take() bool { return s.noticed.Load() && s.noticed.Swap(false) }

// readyForHolder reports, to the waiter holding the turn, whether its
// wait is over.
func (s *Signal) readyForHolder() bool {
	if s.noticed.Load() || s.dev.isClosed() {
		return true
	}
	select {
	case <-s.cancel:
		return true
	default:
		return false
	}
}

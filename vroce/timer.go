package vroce

import (
	"sync"
	"sync/atomic"

	"vroce.dev/internal/clock"
	"vroce.dev/internal/minheap"
)

// timerQueue holds, for each QP with a deadline, the earliest time it must
// be looked at. Moving a deadline later costs nothing: the QP keeps its
// entry and re-arms when the stale entry fires. So the per-packet cost of
// the retransmission timer is one store, not a heap operation.
//
// A QP that goes idle drops its entry (unschedule), which then stays in
// the heap and is skipped when it comes up, or popped when a deadline is
// pushed while it is on top: the timer goroutine still wakes for it,
// once per probe timeout, but no longer looks at the QP. On
// a clean path that timeout is at least 1 ms (quietProbeFloor), so a
// ping-pong pays one wakeup per millisecond, not one every other message.
// Removing the entry and moving the clock on instead (tried) costs a
// timerfd_settime per ACK.
type timerQueue struct {
	mu    sync.Mutex
	h     minheap.Heap[timerEntry] // by at
	clock *clock.Clock
	armed int64 // the deadline the clock is set for
	// turnAt is when the receive turn's lease is looked at (0: it is
	// not), as a QP's timerAt is for the QP.
	turnAt atomic.Int64
}

// timerEntry is a deadline of qp's, or with qp nil the receive turn's
// lease (checkTurnLease).
type timerEntry struct {
	at int64
	qp *QP
}

func earlier(a, b timerEntry) bool { return a.at < b.at }

// schedule makes sure the timer goroutine looks at qp no later than at.
func (d *Device) schedule(qp *QP, at int64) {
	t := &d.timers
	t.mu.Lock()
	t.scheduleLocked(&qp.timerAt, timerEntry{at: at, qp: qp})
	t.mu.Unlock()
}

// scheduleTurn makes sure the timer goroutine looks at the receive turn's
// lease no later than at.
func (d *Device) scheduleTurn(at int64) {
	t := &d.timers
	t.mu.Lock()
	t.scheduleLocked(&t.turnAt, timerEntry{at: at})
	t.mu.Unlock()
}

// wake has the timer goroutine pump qp now, for another QP's goroutine
// (the peer budget gave room back). Unlike a deadline of the QP's own,
// the QP's own pump cannot drop it (unschedule): it may be running as the
// wake comes, having found no room, and the wake is all that brings it
// back.
func (d *Device) wake(qp *QP, now int64) {
	qp.wakeOwed.Store(true)
	d.schedule(qp, now)
}

// unschedule drops qp's pending deadline, unless a wake is owed: its
// entry stays in the heap and is skipped when it comes up, as one
// superseded is. A QP whose last packet is acknowledged has no deadline
// left, and its loss probe would fire stale: with thousands of QPs each
// sending now and then, every request cost the timer goroutine a look at
// a cold QP (its lock, a batch, a pump) a millisecond later, 8% of a
// proxy's CPU at 3,000 streams. A pop it skips costs far less.
func (d *Device) unschedule(qp *QP) {
	if qp.timerAt.Load() == 0 || qp.wakeOwed.Load() {
		return
	}
	t := &d.timers
	t.mu.Lock()
	if !qp.wakeOwed.Load() {
		qp.timerAt.Store(0)
	}
	t.mu.Unlock()
}

// scheduleLocked queues e unless its owner's pending deadline (*pending,
// 0 for none) comes no later, and re-arms the clock if e is the
// earliest: a later deadline costs nothing while an earlier one waits.
func (t *timerQueue) scheduleLocked(pending *atomic.Int64, e timerEntry) {
	if p := pending.Load(); p != 0 && p <= e.at {
		return
	}
	pending.Store(e.at)
	// A ping-pong's last probe, dropped by its ACK, is on top: popped
	// now, the heap stays a deadline or two deep, where the timer
	// goroutine sifted fifty dead ones a millisecond.
	t.dropStaleLocked()
	t.h.Push(e)
	if e.at < t.armed {
		t.armed = e.at
		t.clock.Arm(e.at)
	}
}

// timerLoop runs due QP timers. It sleeps on a clock precise to
// microseconds (Go's own timers round sub-millisecond sleeps up to a
// millisecond when the process is idle, which would turn every loss probe
// into a timeout); schedule re-arms it when a deadline comes earlier.
func (d *Device) timerLoop() {
	defer d.wg.Done()
	t := &d.timers
	defer func() {
		t.mu.Lock()
		t.clock.Close()
		t.mu.Unlock()
	}()
	var due []*QP
	for {
		now := d.now()
		lease := false
		t.mu.Lock()
		for t.h.Len() > 0 && t.h.Min().at <= now {
			e := t.h.Pop()
			switch {
			case !t.live(e):
			case e.qp == nil:
				t.turnAt.Store(0)
				lease = true
			default:
				e.qp.timerAt.Store(0)
				due = append(due, e.qp)
			}
		}
		t.mu.Unlock()
		if lease {
			d.checkTurnLease(now)
		}
		for i, qp := range due {
			qp.onTimer()
			due[i] = nil
		}
		due = due[:0]
		t.mu.Lock()
		t.dropStaleLocked()
		t.armed = idleDeadline
		if t.h.Len() > 0 {
			t.armed = t.h.Min().at
		}
		t.clock.Arm(t.armed)
		t.mu.Unlock()
		if d.isClosed() {
			return
		}
		t.clock.Wait()
	}
}

// dropStaleLocked pops the superseded and dropped entries (unschedule)
// at the top of the heap, so that the clock is armed for a live one. A
// QP in a ping-pong leaves a dropped loss-probe entry per message, a
// message apart: armed for each in turn, the timer goroutine woke once a
// message to pop it (a thread woken, a timerfd re-armed: as many wakes
// as the ping-pong's own). Popped here, it wakes once per live deadline.
func (t *timerQueue) dropStaleLocked() {
	for t.h.Len() > 0 && !t.live(t.h.Min()) {
		t.h.Pop()
	}
}

// live reports whether e is its owner's pending deadline: not
// superseded by another, nor dropped (unschedule).
func (t *timerQueue) live(e timerEntry) bool {
	if e.qp == nil {
		return t.turnAt.Load() == e.at
	}
	return e.qp.timerAt.Load() == e.at
}

// idleDeadline is far enough to mean "no deadline".
const idleDeadline = int64(1) << 62

// stopTimers wakes the timer goroutine so that it sees the device closed.
func (d *Device) stopTimers() {
	t := &d.timers
	t.mu.Lock()
	t.armed = 1
	t.clock.Arm(1)
	t.mu.Unlock()
}

package netconn

import (
	"sync"
	"time"
)

// Deadline is a point in time after which blocked calls give up. Done
// returns a channel that is closed while the deadline has passed; setting
// a new deadline re-arms it. The zero value has no deadline.
type Deadline struct {
	mu    sync.Mutex
	timer *time.Timer
	ch    chan struct{} // closed while expired; nil until first needed
	gen   uint64        // counts Sets, so a stale timer cannot expire a newer deadline
	// onExpire, set before first use, runs as the deadline passes (a
	// ReadInterrupter's InterruptRead, a WriteInterrupter's InterruptWrite).
	onExpire func()
}

// closedChan is shared by every expired deadline that had no waiter yet.
var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Set moves the deadline to t: zero means none, a time in the past
// expires it at once (waking blocked calls).
func (d *Deadline) Set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	expired := d.ch != nil && isClosed(d.ch)
	if t.IsZero() {
		if expired {
			d.ch = nil
		}
		return
	}
	if wait := time.Until(t); wait > 0 {
		if expired {
			d.ch = nil
		}
		gen := d.gen
		d.timer = time.AfterFunc(wait, func() { d.expire(gen) })
		return
	}
	d.expireLocked()
}

func (d *Deadline) expire(gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gen == gen {
		d.expireLocked()
	}
}

func (d *Deadline) expireLocked() {
	switch {
	case d.ch == nil:
		d.ch = closedChan
	case !isClosed(d.ch):
		close(d.ch)
	}
	if d.onExpire != nil {
		d.onExpire()
	}
}

// Done returns a channel closed once the deadline has passed.
func (d *Deadline) Done() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ch == nil {
		d.ch = make(chan struct{})
	}
	return d.ch
}

// Expired reports whether the deadline has passed.
func (d *Deadline) Expired() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch != nil && isClosed(d.ch)
}

// Stop releases the deadline's timer.
func (d *Deadline) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

//go:build !linux

package clock

import (
	"sync"
	"time"
)

// Clock elsewhere is a Go timer: millisecond-coarse when idle, which
// costs loss probes their edge but nothing else.
type Clock struct {
	epoch time.Time
	mu    sync.Mutex
	t     *time.Timer
	wake  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func New(epoch time.Time) (*Clock, error) {
	c := &Clock{epoch: epoch, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.t = time.AfterFunc(time.Hour, c.fire)
	return c, nil
}

func (c *Clock) fire() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Arm sets the deadline, in nanoseconds since the epoch New was given.
func (c *Clock) Arm(at int64) {
	c.mu.Lock()
	c.t.Reset(max(time.Duration(at)-time.Since(c.epoch), 0))
	c.mu.Unlock()
}

// Wait blocks until the deadline passes or the clock is closed.
func (c *Clock) Wait() {
	select {
	case <-c.wake:
	case <-c.done:
	}
}

// Close releases the clock and wakes a Wait in progress.
func (c *Clock) Close() {
	c.once.Do(func() {
		c.t.Stop()
		close(c.done)
	})
}

//go:build !linux

package vroce

import (
	"sync"
	"time"
)

// deviceClock elsewhere is a Go timer: millisecond-coarse when idle, which
// costs loss probes their edge but nothing else.
type deviceClock struct {
	epoch time.Time
	mu    sync.Mutex
	t     *time.Timer
	wake  chan struct{}
}

func newDeviceClock(epoch time.Time) (*deviceClock, error) {
	c := &deviceClock{epoch: epoch, wake: make(chan struct{}, 1)}
	c.t = time.AfterFunc(time.Hour, c.fire)
	return c, nil
}

func (c *deviceClock) fire() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *deviceClock) arm(at int64) {
	c.mu.Lock()
	c.t.Reset(max(time.Duration(at)-time.Since(c.epoch), 0))
	c.mu.Unlock()
}

func (c *deviceClock) wait()  { <-c.wake }
func (c *deviceClock) close() { c.t.Stop() }

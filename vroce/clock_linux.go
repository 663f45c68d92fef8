package vroce

import (
	"time"

	"golang.org/x/sys/unix"
)

// deviceClock wakes the timer goroutine at a deadline on the device clock
// with microsecond precision: a timerfd on CLOCK_MONOTONIC (the clock Go's
// monotonic time reads), read by a goroutine on its own OS thread. Setting
// it from another goroutine moves the deadline of a read in progress.
type deviceClock struct {
	fd        int   // -1 once closed
	monoEpoch int64 // CLOCK_MONOTONIC at the device epoch, ns
}

func newDeviceClock(epoch time.Time) (*deviceClock, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		unix.Close(fd)
		return nil, err
	}
	// The device clock is time.Since(epoch); align the two.
	return &deviceClock{fd: fd, monoEpoch: ts.Nano() - int64(time.Since(epoch))}, nil
}

// arm sets the deadline, in device-clock nanoseconds. The caller holds the
// timer queue's lock, as close's caller does: a closed descriptor's number
// may already belong to another file.
func (c *deviceClock) arm(at int64) {
	if c.fd < 0 {
		return
	}
	abs := c.monoEpoch + max(at, 1)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(abs)}
	_ = unix.TimerfdSettime(c.fd, unix.TFD_TIMER_ABSTIME, &spec, nil)
}

// wait blocks until the deadline passes: a blocking read, which parks the
// thread, not the scheduler.
func (c *deviceClock) wait() {
	var buf [8]byte
	for {
		_, err := unix.Read(c.fd, buf[:])
		if err != unix.EINTR {
			return
		}
	}
}

func (c *deviceClock) close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

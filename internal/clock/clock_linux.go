// Package clock wakes a goroutine at a deadline with microsecond
// precision. Go's own timers round sub-millisecond sleeps up to a
// millisecond whenever the process is idle (the runtime sleeps in
// epoll_pwait, whose timeout is in milliseconds), which would turn every
// loss probe and pacing gap of the transport into a millisecond.
package clock

import (
	"time"

	"golang.org/x/sys/unix"
)

// Clock wakes one goroutine at a deadline with microsecond precision: a
// timerfd on CLOCK_MONOTONIC (the clock Go's monotonic time reads) read
// with a blocking read. Setting it from another goroutine moves the
// deadline of a read in progress.
type Clock struct {
	fd        int   // -1 once closed
	monoEpoch int64 // CLOCK_MONOTONIC at the device epoch, ns
}

func New(epoch time.Time) (*Clock, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Deadlines are time.Since(epoch); align the two clocks. Reading Go's
	// clock first errs late by the gap between the two reads (a
	// preempted thread: microseconds), never early.
	since := time.Since(epoch)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &Clock{fd: fd, monoEpoch: ts.Nano() - int64(since)}, nil
}

// Arm sets the deadline, in nanoseconds since the epoch New was given.
// Arm and Close must not run concurrently (their callers share a lock): a
// closed descriptor's number may already belong to another file.
func (c *Clock) Arm(at int64) {
	if c.fd < 0 {
		return
	}
	abs := c.monoEpoch + max(at, 1)
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(abs)}
	_ = unix.TimerfdSettime(c.fd, unix.TFD_TIMER_ABSTIME, &spec, nil)
}

// Wait blocks until the deadline passes: a blocking read, which parks the
// thread, not the scheduler.
func (c *Clock) Wait() {
	var buf [8]byte
	for {
		_, err := unix.Read(c.fd, buf[:])
		if err != unix.EINTR {
			return
		}
	}
}

// Close releases the clock.
func (c *Clock) Close() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

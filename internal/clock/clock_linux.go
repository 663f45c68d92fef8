// Package clock wakes a goroutine at a deadline with microsecond
// precision. Go's own timers round sub-millisecond sleeps up to a
// millisecond whenever the process is idle (the runtime sleeps in
// epoll_pwait, whose timeout is in milliseconds), which would turn every
// loss probe and pacing gap of the transport into a millisecond.
package clock

import (
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Clock wakes one goroutine at a deadline with microsecond precision: a
// timerfd on CLOCK_MONOTONIC (the clock Go's monotonic time reads) that
// the runtime's poller watches. The timerfd turns readable at the
// deadline itself, so the poller wakes on time though its own timeout
// is in milliseconds. Waiting parks the goroutine, not a thread: a
// thread blocked in read(2) instead (tried first) kept the runtime's
// monitor retaking its processor every 20 us.
type Clock struct {
	f         *os.File
	rc        syscall.RawConn
	monoEpoch int64 // CLOCK_MONOTONIC at the device epoch, ns
	// The functions handed to rc, made once: a closure made per call
	// would be an allocation per packet sent.
	spec   unix.ItimerSpec
	set    func(fd uintptr)
	buf    [8]byte
	expire func(fd uintptr) bool
}

func New(epoch time.Time) (*Clock, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC|unix.TFD_NONBLOCK)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Deadlines are time.Since(epoch); align the two clocks. Reading Go's
	// clock first errs late by the gap between the two reads (a
	// preempted thread: microseconds), never early.
	since := time.Since(epoch)
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		f.Close()
		return nil, os.NewSyscallError("clock_gettime", err)
	}
	c := &Clock{f: f, rc: rc, monoEpoch: ts.Nano() - int64(since)}
	c.set = func(fd uintptr) { _ = unix.TimerfdSettime(int(fd), unix.TFD_TIMER_ABSTIME, &c.spec, nil) }
	c.expire = func(fd uintptr) bool {
		_, err := unix.Read(int(fd), c.buf[:])
		return err != unix.EAGAIN
	}
	return c, nil
}

// Arm sets the deadline, in nanoseconds since the epoch New was given.
// It may run concurrently with Wait and Close, not with itself (callers
// share a lock); after Close it does nothing.
func (c *Clock) Arm(at int64) {
	c.spec.Value = unix.NsecToTimespec(c.monoEpoch + max(at, 1))
	_ = c.rc.Control(c.set)
}

// Wait blocks until the deadline passes or the clock is closed. One
// goroutine waits.
func (c *Clock) Wait() { _ = c.rc.Read(c.expire) }

// Close releases the clock and wakes a Wait in progress.
func (c *Clock) Close() { c.f.Close() }

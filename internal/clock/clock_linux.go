package clock

import (
	"math"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"vroce.dev/internal/nonblock"
)

// Clock wakes one goroutine at a deadline with microsecond precision: a
// timerfd on CLOCK_MONOTONIC (the clock Go's monotonic time reads) that
// the runtime's poller watches. The timerfd turns readable at the
// deadline itself, so the poller wakes on time though its own timeout
// is in milliseconds. Waiting parks the goroutine, not a thread: a
// thread blocked in read(2) instead (tried first) kept the runtime's
// monitor retaking its processor every 20 us.
//
// Waiting never reads the timerfd. Arming it again (timerfd_settime)
// clears an expiry, and Wait asks Go's clock instead whether the
// deadline has passed: an expiry the poller reported before a Wait
// began would otherwise be lost to it, and the two reads it replaces
// were most of what a wake-up for a stale deadline cost.
type Clock struct {
	f         *os.File
	rc        syscall.RawConn
	epoch     time.Time
	monoEpoch int64        // CLOCK_MONOTONIC at the epoch, ns (never early: see New)
	armed     atomic.Int64 // the deadline, ns since the epoch
	// The functions handed to rc, made once: a closure made per call
	// would be an allocation per packet sent.
	spec   unix.ItimerSpec
	set    func(fd uintptr)
	passed func(fd uintptr) bool
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
	c := &Clock{f: f, rc: rc, epoch: epoch, monoEpoch: ts.Nano() - int64(since)}
	c.armed.Store(math.MaxInt64)
	// timerfd_settime never blocks: made without the runtime's system
	// call entry (internal/nonblock says why).
	c.set = func(fd uintptr) {
		nonblock.Syscall6(unix.SYS_TIMERFD_SETTIME, fd, unix.TFD_TIMER_ABSTIME, uintptr(unsafe.Pointer(&c.spec)), 0, 0, 0)
	}
	// The kernel fires at monoEpoch + armed, which is never before Go's
	// clock reads armed: once it has fired, this says so.
	c.passed = func(uintptr) bool { return int64(time.Since(c.epoch)) >= c.armed.Load() }
	return c, nil
}

// Arm sets the deadline, in nanoseconds since the epoch New was given.
// It may run concurrently with Wait and Close, not with itself (callers
// share a lock); after Close it does nothing.
func (c *Clock) Arm(at int64) {
	at = max(at, 1)
	c.armed.Store(at) // before the kernel can fire for it
	c.spec.Value = unix.NsecToTimespec(c.monoEpoch + at)
	_ = c.rc.Control(c.set)
}

// Wait blocks until the deadline passes or the clock is closed. One
// goroutine waits.
func (c *Clock) Wait() { _ = c.rc.Read(c.passed) }

// Close releases the clock and wakes a Wait in progress.
func (c *Clock) Close() { c.f.Close() }

package clock_test

import (
	"testing"
	"time"

	"vroce.dev/internal/clock"
)

// open makes a clock on an epoch of now, closed with the test.
func open(t *testing.T) (*clock.Clock, time.Time) {
	t.Helper()
	epoch := time.Now()
	c, err := clock.New(epoch)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, epoch
}

// waitAside runs c.Wait on another goroutine; the channel closes when it
// returns.
func waitAside(c *clock.Clock) <-chan struct{} {
	woke := make(chan struct{})
	go func() {
		c.Wait()
		close(woke)
	}()
	return woke
}

func mustWake(t *testing.T, woke <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-woke:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not wake the waiter", what)
	}
}

func TestWaitReturnsNoSoonerThanTheDeadline(t *testing.T) {
	c, epoch := open(t)
	for _, d := range []time.Duration{50 * time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		at := time.Since(epoch) + d
		c.Arm(int64(at))
		c.Wait()
		if now := time.Since(epoch); now < at {
			t.Fatalf("woke %v before a %v deadline", at-now, d)
		}
	}
}

// TestArmingEarlierMovesAWaitInProgress: a deadline an hour away, then,
// from another goroutine, one now: the waiter wakes.
func TestArmingEarlierMovesAWaitInProgress(t *testing.T) {
	c, epoch := open(t)
	c.Arm(int64(time.Since(epoch) + time.Hour))
	woke := waitAside(c)
	c.Arm(int64(time.Since(epoch) + time.Millisecond))
	mustWake(t, woke, "the earlier deadline")
}

// TestCloseWakesAWait: a waiter on a deadline an hour away returns when
// the clock is closed.
func TestCloseWakesAWait(t *testing.T) {
	c, epoch := open(t)
	c.Arm(int64(time.Since(epoch) + time.Hour))
	woke := waitAside(c)
	c.Close()
	c.Arm(1) // after Close: does nothing, and must not touch a reused descriptor
	mustWake(t, woke, "Close")
}

// A deadline that passed while nobody waited (the poller may have seen
// the expiry and had no one to tell) ends the next Wait at once.
func TestADeadlinePassedBeforeWaitIsNotLost(t *testing.T) {
	c, epoch := open(t)
	for _, ahead := range []time.Duration{-time.Millisecond, 200 * time.Microsecond} {
		at := time.Since(epoch) + ahead
		c.Arm(int64(at))
		for time.Since(epoch) < at+2*time.Millisecond {
			time.Sleep(time.Millisecond) // let it expire with no one waiting
		}
		mustWake(t, waitAside(c), "a deadline passed before Wait")
	}
}

// An epoch's time starts near zero and moves with the monotonic clock.
func TestEpochCountsFromItsStart(t *testing.T) {
	before := time.Now()
	e := clock.NewEpoch()
	first := e.Now()
	if first < 0 || first > int64(time.Second) {
		t.Fatalf("an epoch just begun reads %d ns", first)
	}
	time.Sleep(2 * time.Millisecond) // the time under test, not a synchronisation
	if d := e.Now() - first; d < int64(2*time.Millisecond) {
		t.Fatalf("2 ms later the epoch moved %d ns", d)
	}
	if e.Time().Before(before) {
		t.Fatalf("the epoch began at %v, before NewEpoch was called (%v)", e.Time(), before)
	}
}

package clock_test

import (
	"testing"
	"time"

	"vroce.dev/internal/clock"
)

func TestWaitReturnsNoSoonerThanTheDeadline(t *testing.T) {
	epoch := time.Now()
	c, err := clock.New(epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
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
	epoch := time.Now()
	c, err := clock.New(epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Arm(int64(time.Since(epoch) + time.Hour))
	woke := make(chan struct{})
	go func() {
		c.Wait()
		close(woke)
	}()
	c.Arm(int64(time.Since(epoch) + time.Millisecond))
	select {
	case <-woke:
	case <-time.After(30 * time.Second):
		t.Fatal("the earlier deadline did not wake the waiter")
	}
}

// TestCloseWakesAWait: a waiter on a deadline an hour away returns when
// the clock is closed.
func TestCloseWakesAWait(t *testing.T) {
	epoch := time.Now()
	c, err := clock.New(epoch)
	if err != nil {
		t.Fatal(err)
	}
	c.Arm(int64(time.Since(epoch) + time.Hour))
	woke := make(chan struct{})
	go func() {
		c.Wait()
		close(woke)
	}()
	c.Close()
	c.Arm(1) // after Close: does nothing, and must not touch a reused descriptor
	select {
	case <-woke:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not wake the waiter")
	}
}

// A deadline that passed while nobody waited (the poller may have seen
// the expiry and had no one to tell) ends the next Wait at once.
func TestADeadlinePassedBeforeWaitIsNotLost(t *testing.T) {
	epoch := time.Now()
	c, err := clock.New(epoch)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, ahead := range []time.Duration{-time.Millisecond, 200 * time.Microsecond} {
		at := time.Since(epoch) + ahead
		c.Arm(int64(at))
		for time.Since(epoch) < at+2*time.Millisecond {
			time.Sleep(time.Millisecond) // let it expire with no one waiting
		}
		woke := make(chan struct{})
		go func() {
			c.Wait()
			close(woke)
		}()
		select {
		case <-woke:
		case <-time.After(30 * time.Second):
			t.Fatalf("a deadline %v ahead, passed before Wait: Wait did not return", ahead)
		}
	}
}

package vroce

import (
	"context"
	"testing"
	"time"
)

// Every waiter wakes for a completion, however many wait and whichever
// channel each sleeps on.
func TestCQWaitWakesEveryWaiter(t *testing.T) {
	a, _ := pipeQPs(t)
	cq := a.cq
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, waiters := range []int{1, 2, 5} {
		woke := make(chan error, waiters)
		for range waiters {
			go func() { woke <- cq.Wait(ctx) }()
		}
		for { // every waiter asleep
			cq.mu.Lock()
			n := cq.nwait
			cq.mu.Unlock()
			if n == waiters {
				break
			}
			time.Sleep(time.Millisecond)
		}
		cq.push(&WorkCompletion{ID: 1})
		for range waiters {
			if err := <-woke; err != nil {
				t.Fatalf("%d waiters: %v", waiters, err)
			}
		}
		if n, _ := cq.Poll(make([]WorkCompletion, 1)); n != 1 {
			t.Fatalf("polled %d", n)
		}
	}
}

// Wake makes a blocked Wait return, and a Wake that finds nobody waiting
// makes the next Wait return at once: a notice is never lost between the
// look and the sleep.
func TestCQWake(t *testing.T) {
	a, _ := pipeQPs(t)
	cq := a.cq
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cq.Wake()
	if err := cq.Wait(ctx); err != nil {
		t.Fatalf("Wait after Wake: %v", err)
	}
	woke := make(chan error, 1)
	go func() { woke <- cq.Wait(ctx) }()
	for {
		cq.mu.Lock()
		n := cq.nwait
		cq.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	cq.Wake()
	if err := <-woke; err != nil {
		t.Fatalf("blocked Wait: %v", err)
	}
	// Consumed: the next Wait blocks until its context ends.
	short, stop := context.WithTimeout(ctx, 20*time.Millisecond)
	defer stop()
	if err := cq.Wait(short); err != context.DeadlineExceeded {
		t.Fatalf("Wait with nothing to report: %v", err)
	}
}

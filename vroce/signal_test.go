package vroce

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// signalEnd is e with a completion handler on its CQ that takes every
// completion and notifies sig, as rsock's stack does for its streams.
type signalEnd struct {
	pipeEnd
	sig   *Signal
	recvs atomic.Int64 // receive completions the handler took
}

func withSignal(t *testing.T, e pipeEnd) *signalEnd {
	t.Helper()
	s := &signalEnd{pipeEnd: e, sig: e.dev.NewSignal()}
	wcs := make([]WorkCompletion, 8)
	e.cq.OnCompletion(func() {
		for {
			n, _ := e.cq.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Opcode == WCRecv && wc.Status == WCSuccess {
					s.recvs.Add(1)
				}
			}
			if n < len(wcs) {
				break
			}
		}
		s.sig.Notify()
	})
	return s
}

// sendTo sends one inline SEND from e to s, leaving a receive posted for
// it, and waits for the send's completion on e's CQ.
func sendTo(t *testing.T, e pipeEnd, s *signalEnd, i int) {
	t.Helper()
	sendInline(t, e, s.pipeEnd, i, SendSignaled, e)
}

// awaitRecvs waits on s's Signal until its handler has taken want
// receives.
func (s *signalEnd) awaitRecvs(t *testing.T, want int64) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for s.recvs.Load() < want {
		require.True(t, time.Now().Before(end), "%d of %d receives", s.recvs.Load(), want)
		s.sig.Wait(nil)
	}
}

// A goroutine waiting on a Signal receives for the device, like a CQ
// waiter: the packet its handler notifies it of wakes it directly.
func TestSignalWaiterReceivesForItself(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a)
	for i := range 100 {
		require.NoError(t, sa.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{sa.mr.SGE(0, 64)}}))
		require.NoError(t, b.qp.PostSend(SendWR{ID: uint64(i), Opcode: WRSend, Inline: []byte{byte(i)}, Flags: SendInline}))
		sa.awaitRecvs(t, int64(i+1))
		reply(t, a, b, i)
	}
	st := a.dev.Stats()
	assert.Greater(t, st.RxByWaiters, st.RxPackets/2, "of %d packets received", st.RxPackets)
}

// reply sends an unsignaled inline SEND from e, whose CQ a handler takes,
// and waits for it on peer's CQ.
func reply(t *testing.T, e, peer pipeEnd, i int) {
	t.Helper()
	sendInline(t, e, peer, i, 0, peer)
}

// signalHoldingTheTurn starts a Wait on s's Signal with cancel and
// returns once that waiter holds the receive turn, retrying with a SEND
// from peer until it does. The channel closes as the Wait returns.
func signalHoldingTheTurn(t *testing.T, s *signalEnd, peer pipeEnd, cancel <-chan struct{}) <-chan struct{} {
	t.Helper()
	for i := range 200 {
		sendTo(t, peer, s, i)
		s.awaitRecvs(t, int64(i+1)) // this waiter is handed the turn
		s.sig.take()                // the handler's notice, if awaitRecvs did not wait
		res := make(chan struct{})
		go func() { s.sig.Wait(cancel); close(res) }()
		if eventually(20*time.Millisecond, func() bool { return s.dev.turnHolder() == turnWaiter }) {
			return res
		}
		s.sig.Notify() // let this wait go, and try again
		<-res
	}
	t.Fatal("no Signal waiter took the receive turn in 200 tries")
	return nil
}

// Notify from another goroutine reaches a waiter that is receiving, with
// nothing arriving from the network to end its receive.
func TestSignalNotifyReachesAReceivingWaiter(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a)
	res := signalHoldingTheTurn(t, sa, b, nil)
	sa.sig.Notify()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify did not reach the waiter holding the turn")
	}
	sendTo(t, b, sa, 999) // the device still receives
	sa.awaitRecvs(t, sa.recvs.Load())
}

// A closed cancel ends a waiter that sleeps at once, and one that is
// receiving once it is notified too (as netconn's deadlines do).
func TestSignalCancel(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a)

	cancel := make(chan struct{})
	res := signalHoldingTheTurn(t, sa, b, cancel)
	close(cancel)
	sa.sig.Notify()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled wait holding the turn did not return")
	}

	// A plain pipe: nobody can receive for the device, so the waiter
	// sleeps, and the closed cancel alone wakes it.
	c, _ := pipeQPs(t)
	sig := c.dev.NewSignal()
	cancel = make(chan struct{})
	done := make(chan struct{})
	go func() { sig.Wait(cancel); close(done) }()
	close(cancel)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a closed cancel did not wake a sleeping waiter")
	}
}

// Closing the device ends a waiter's receive, and the Signal still works:
// the waiter waits for a notice without receiving.
func TestSignalAfterClose(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a)
	res := signalHoldingTheTurn(t, sa, b, nil)
	require.NoError(t, a.dev.Close())
	require.True(t, eventually(5*time.Second, func() bool { return a.dev.turnHolder() != turnWaiter }),
		"Close did not end the waiter's receive")
	select {
	case <-res:
		t.Fatal("the wait returned without a notice")
	default:
	}
	sa.sig.Notify()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify after Close did not end the wait")
	}
}

// A Wait on a CQ with a completion handler never receives for the
// device: the handler takes the completions wherever they arrive, and the
// turn is left for a waiter that gains from it.
func TestCQWithHandlerWaiterDoesNotReceive(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- a.cq.Wait(ctx) }()
	for i := range 50 {
		sendTo(t, b, sa, i)
	}
	require.True(t, eventually(5*time.Second, func() bool { return sa.recvs.Load() == 50 }),
		"the handler took %d of 50 receives", sa.recvs.Load())
	assert.Zero(t, a.dev.Stats().RxByWaiters)
	cancel()
	assert.ErrorIs(t, <-waited, context.Canceled)
}

// Data notified to a Signal nobody waits on yet does not make the receive
// goroutine give up the turn: nobody would take it, and the device would
// go unread until the lease ran out.
func TestNotifyWithoutAWaiterKeepsTheTurn(t *testing.T) {
	a, b := turnQPs(t)
	sa := withSignal(t, a) // nobody waits on its Signal
	for i := range 20 {
		sendTo(t, b, sa, i)
		assert.False(t, eventually(2*time.Millisecond, func() bool { return a.dev.turnHolder() == turnFree }),
			"send %d: the receive goroutine gave the turn up to nobody", i)
	}
	assert.Equal(t, int64(20), sa.recvs.Load())
}

// No notice is lost between a waiter's look for one and its sleep, nor
// while it holds the receive turn: a notifier and a waiter in lockstep,
// thousands of times.
func TestSignalLosesNoNotice(t *testing.T) {
	a, _ := turnQPs(t)
	sig := a.dev.NewSignal()
	const rounds = 5000
	woke := make(chan struct{})
	go func() {
		for range rounds {
			sig.Wait(nil)
			woke <- struct{}{}
		}
	}()
	for i := range rounds {
		sig.Notify()
		select {
		case <-woke:
		case <-time.After(10 * time.Second):
			t.Fatalf("notice %d of %d lost", i, rounds)
		}
	}
}

package vroce

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// turnQPs is pipeQPs over providers whose receive can be interrupted: CQ
// waiters take the receive turn.
func turnQPs(t *testing.T) (a, b pipeEnd) {
	t.Helper()
	return pipeQPsWith(t, func(p *pipeProvider) Provider { return turnPipe{p} })
}

func (d *Device) turnHolder() turnHolder {
	d.turn.mu.Lock()
	defer d.turn.mu.Unlock()
	return d.turn.holder
}

// eventually polls cond for up to limit.
func eventually(limit time.Duration, cond func() bool) bool {
	for end := time.Now().Add(limit); time.Now().Before(end); time.Sleep(20 * time.Microsecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// ping sends one inline SEND from e to peer and waits on peer's CQ for it
// and on e's for the send's completion, both with PollWait.
func ping(t *testing.T, e, peer pipeEnd, i int) {
	t.Helper()
	sendInline(t, e, peer, i, SendSignaled, peer, e)
}

// sendInline posts a receive on peer and an inline SEND of one byte from
// e with flags, then waits for one successful completion on each of
// waitOn's CQs, in order.
func sendInline(t *testing.T, e, peer pipeEnd, i int, flags SendFlags, waitOn ...pipeEnd) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, peer.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{peer.mr.SGE(0, 64)}}))
	require.NoError(t, e.qp.PostSend(SendWR{ID: uint64(i), Opcode: WRSend, Flags: flags | SendInline, Inline: []byte{byte(i)}}))
	wc := make([]WorkCompletion, 1)
	for _, end := range waitOn {
		n, err := end.cq.PollWait(ctx, wc)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, WCSuccess, wc[0].Status, "%+v", wc[0])
	}
}

// waitHoldingTheTurn starts a Wait on e's CQ under ctx and returns once
// that waiter holds e's receive turn, retrying with a ping from peer until
// it does (the turn may be back with the receive goroutine when the wait
// starts). The result of the wait comes on the channel.
func waitHoldingTheTurn(t *testing.T, e, peer pipeEnd, ctx context.Context) <-chan error {
	t.Helper()
	for i := range 200 {
		ping(t, peer, e, i) // e's waiter is woken, and is handed the turn
		res := make(chan error, 1)
		go func() { res <- e.cq.Wait(ctx) }()
		if eventually(20*time.Millisecond, func() bool { return e.dev.turnHolder() == turnWaiter }) {
			return res
		}
		e.cq.Wake() // let this wait go, and try again
		require.NoError(t, <-res)
	}
	t.Fatal("no waiter took the receive turn in 200 tries")
	return nil
}

// In a ping-pong, the goroutine that waits for the message receives it:
// the device's receive goroutine hands it the turn and stays out of the
// way.
func TestWaiterReceivesForItself(t *testing.T) {
	a, b := turnQPs(t)
	for i := range 100 {
		ping(t, a, b, i)
		ping(t, b, a, i)
	}
	for _, e := range []pipeEnd{a, b} {
		st := e.dev.Stats()
		assert.Greater(t, st.RxByWaiters, st.RxPackets/2, "of %d packets received", st.RxPackets)
	}
}

// A plain pipe cannot interrupt a receive: the receive goroutine keeps the
// turn, and waiters are woken as before.
func TestWithoutInterruptTheReceiveGoroutineReceives(t *testing.T) {
	a, b := pipeQPs(t)
	for i := range 20 {
		ping(t, a, b, i)
	}
	assert.Zero(t, a.dev.Stats().RxByWaiters)
	assert.Equal(t, turnLoop, a.dev.turnHolder())
}

// A waiter that leaves (here: never waits again) gives the turn back to
// the receive goroutine within the lease: a WRITE the peer sends later,
// which completes nothing on this side, is still received and ACKed.
func TestTurnReturnsToTheDeviceWhenWaitersLeave(t *testing.T) {
	a, b := turnQPs(t)
	target, err := a.qp.pd.RegMR(make([]byte, 64), AccessLocalWrite|AccessRemoteWrite)
	require.NoError(t, err)
	// Whether a waiter takes the turn is the scheduler's to decide, ping
	// by ping (one run in sixty saw none in 20): ping until one has.
	for i := 0; i < 2000 && a.dev.Stats().RxByWaiters == 0; i++ {
		ping(t, b, a, i)
		ping(t, a, b, i)
	}
	require.NotZero(t, a.dev.Stats().RxByWaiters, "a's waiters never received for themselves")
	require.True(t, eventually(5*time.Second, func() bool { return a.dev.turnHolder() == turnLoop }),
		"the receive goroutine did not take the turn back")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, b.qp.PostSend(SendWR{ID: 9, Opcode: WRRDMAWrite, Flags: SendSignaled | SendInline, Inline: []byte("late write"),
		RemoteAddr: target.Addr(), RKey: target.RKey()}))
	wc := make([]WorkCompletion, 1)
	n, err := b.cq.PollWait(ctx, wc)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, WCSuccess, wc[0].Status)
	assert.True(t, bytes.HasPrefix(target.Bytes(), []byte("late write")))
}

// A waiter holding the turn whose context ends returns at once, and the
// device goes on receiving without it.
func TestCancelledWaiterLetsGoOfTheTurn(t *testing.T) {
	a, b := turnQPs(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := waitHoldingTheTurn(t, a, b, ctx)
	cancel()
	select {
	case err := <-res:
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("a cancelled wait holding the turn did not return")
	}
	assert.NotEqual(t, turnWaiter, a.dev.turnHolder())
	ping(t, b, a, 99) // the device still receives
}

// Wake reaches a waiter that is receiving for the device.
func TestWakeReachesAReceivingWaiter(t *testing.T) {
	a, b := turnQPs(t)
	res := waitHoldingTheTurn(t, a, b, context.Background())
	a.cq.Wake()
	select {
	case err := <-res:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Wake did not reach the waiter holding the turn")
	}
}

// A completion pushed by another goroutine (a flush, when the QP is moved
// to the error state) reaches a waiter that is receiving: nothing arrives
// from the network to end its receive.
func TestFlushReachesAReceivingWaiter(t *testing.T) {
	a, b := turnQPs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wcs := make(chan WorkCompletion, 1)
	// One receive more than the pings take: each ping posts one and its
	// SEND takes the oldest, so after ping i the one posted is i's. (One
	// more posted each round left a round that found no waiter holding
	// the turn a receive behind: the flush then began with i-1's.)
	require.NoError(t, a.qp.PostRecv(RecvWR{ID: 1 << 20, SGL: []SGE{a.mr.SGE(0, 64)}}))
	for i := range 200 {
		ping(t, b, a, i) // leaves receive i posted on a
		done := make(chan error, 1)
		go func() {
			err := a.cq.Wait(ctx)
			wc := make([]WorkCompletion, 1)
			if n, _ := a.cq.Poll(wc); n > 0 {
				wcs <- wc[0]
			}
			done <- err
		}()
		if !eventually(20*time.Millisecond, func() bool { return a.dev.turnHolder() == turnWaiter }) {
			a.cq.Wake()
			require.NoError(t, <-done)
			select {
			case wc := <-wcs:
				t.Fatalf("completion %+v before the flush", wc)
			default:
			}
			continue
		}
		require.NoError(t, a.qp.Modify(&QPAttr{State: QPSErr}, QPAttrState))
		select {
		case wc := <-wcs:
			assert.Equal(t, uint64(i), wc.ID, "the receive each ping leaves posted")
			assert.Equal(t, WCWRFlushErr, wc.Status)
		case <-time.After(5 * time.Second):
			t.Fatal("the flushed completion did not reach the waiter holding the turn")
		}
		require.NoError(t, <-done)
		return
	}
	t.Fatal("no waiter took the receive turn in 200 tries")
}

// Closing the device ends a waiter that is receiving for it.
func TestCloseEndsAReceivingWaiter(t *testing.T) {
	a, b := turnQPs(t)
	res := waitHoldingTheTurn(t, a, b, context.Background())
	require.NoError(t, a.dev.Close())
	select {
	case err := <-res:
		assert.True(t, errors.Is(err, ErrClosed), "Wait after Close: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the waiter holding the turn")
	}
}

// A provider that fails while a waiter holds the turn fails the device as
// it would under the receive goroutine, counted once.
func TestProviderFailureUnderAWaiter(t *testing.T) {
	a, b := turnQPs(t)
	res := waitHoldingTheTurn(t, a, b, context.Background())
	close(a.dev.prov.(turnPipe).broken)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := a.dev.AsyncEvent(ctx)
	require.NoError(t, err)
	assert.Equal(t, EventDeviceFatal, ev.Type)
	assert.ErrorIs(t, ev.Err, ErrProviderFailed)
	a.cq.Wake()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter did not return after the provider failed")
	}
	assert.Equal(t, uint64(1), a.dev.Stats().RxErrors)
}

// The lease check gives a free turn back only once it has been free for
// its lease, and leaves a held one alone; a turn a waiter holds at a check
// has its lease doubled, up to maxTurnLease, and an expiry resets it.
func TestTurnLease(t *testing.T) {
	a, _ := turnQPs(t)
	d := a.dev
	tr := &d.turn
	base, gaveBack := freeTurnAnHourAhead(t, d)
	lease := func() time.Duration {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return time.Duration(tr.lease)
	}

	d.checkTurnLease(base + int64(turnLease) - 1)
	assert.False(t, gaveBack(), "the turn went back before its lease ran out")
	d.checkTurnLease(base + int64(turnLease))
	assert.True(t, gaveBack(), "a turn free for the whole lease did not go back")

	tr.mu.Lock()
	tr.holder = turnWaiter
	tr.mu.Unlock()
	for _, want := range []time.Duration{2 * turnLease, 4 * turnLease, 8 * turnLease, maxTurnLease} {
		d.checkTurnLease(base + 10*int64(turnLease))
		assert.False(t, gaveBack(), "a held turn was given back")
		assert.Equal(t, want, lease(), "the lease of a turn found in use")
	}

	tr.mu.Lock()
	tr.holder, tr.freeSince = turnFree, base
	tr.mu.Unlock()
	d.checkTurnLease(base + int64(turnLease))
	assert.False(t, gaveBack(), "the turn went back before its lengthened lease ran out")
	d.checkTurnLease(base + int64(maxTurnLease))
	assert.True(t, gaveBack(), "a turn free for its whole lease did not go back")
	assert.Equal(t, turnLease, lease(), "an expiry resets the lease")
}

// A held ACK that comes due makes the lease check have it sent: a free
// turn goes back to the receive goroutine at once, lease or not, and the
// receive of a waiter holding the turn is interrupted, without doubling
// its lease. Until it is due, neither happens.
func TestTurnLeaseSeesHeldACKsLeave(t *testing.T) {
	var interrupts atomic.Int32
	a, _ := pipeQPsWith(t, func(p *pipeProvider) Provider { return countedTurnPipe{turnPipe{p}, &interrupts} })
	d := a.dev
	tr := &d.turn
	base, gaveBack := freeTurnAnHourAhead(t, d)
	due := base + int64(turnLease)/2 // before the lease runs out

	tr.ackDue.Store(due)
	d.checkTurnLease(due - 1)
	assert.False(t, gaveBack(), "given back before the held ACK was due")
	d.checkTurnLease(due)
	assert.True(t, gaveBack(), "a free turn holding a due ACK stayed free for the rest of its lease")

	tr.mu.Lock()
	tr.holder = turnWaiter
	tr.mu.Unlock()
	before := interrupts.Load()
	d.checkTurnLease(due)
	assert.Equal(t, before+1, interrupts.Load(), "the waiter holding a due ACK was not interrupted")
	assert.False(t, gaveBack())
	tr.mu.Lock()
	assert.Equal(t, int64(turnLease), tr.lease, "a check for a due ACK lengthened the lease")
	tr.mu.Unlock()

	tr.ackDue.Store(0)
	d.checkTurnLease(due)
	assert.Equal(t, before+1, interrupts.Load(), "interrupted with no ACK held")
}

// freeTurnAnHourAhead records d's receive turn as free since an hour
// from now, and returns that time and a probe of whether the lease check
// gave the turn back. The receive goroutine holds the turn and goes on
// receiving: only the record changes, and it is put back (the lease and
// any held ACK's due reset) when the test ends. An hour ahead, the timer
// goroutine's own checks find nothing due.
func freeTurnAnHourAhead(t *testing.T, d *Device) (base int64, gaveBack func() bool) {
	t.Helper()
	tr := &d.turn
	tr.mu.Lock()
	holder := tr.holder
	base = d.now() + int64(time.Hour)
	tr.holder, tr.freeSince = turnFree, base
	tr.mu.Unlock()
	require.Equal(t, turnLoop, holder)
	t.Cleanup(func() {
		tr.ackDue.Store(0)
		tr.mu.Lock()
		tr.holder, tr.lease = holder, int64(turnLease)
		tr.mu.Unlock()
	})
	return base, func() bool {
		select {
		case <-tr.back:
			return true
		default:
			return false
		}
	}
}

// countedTurnPipe counts the interrupts of a turnPipe.
type countedTurnPipe struct {
	turnPipe
	n *atomic.Int32
}

func (p countedTurnPipe) InterruptRecv() {
	p.n.Add(1)
	p.turnPipe.InterruptRecv()
}

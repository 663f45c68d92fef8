package vroce

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// receiveTurn says which goroutine receives from the provider: the
// device's receive goroutine (rxLoop), or a goroutine waiting on a CQ.
//
// The receive goroutine alone would wake whoever a batch completed work
// for: between two processes that hand-off is a thread wake-up per
// message (a futex and a spinning thread on the other core, which the
// peer process needed), and a 64-byte ping-pong took three times as long
// as one over a plain UDP socket. With a provider whose receive can be
// cut short (RecvInterrupter), a goroutine waiting on a CQ receives for
// itself instead: the packet that completes its work wakes it directly,
// as a TCP socket wakes its reader, and the reply it posts carries the
// ACK its request is owed.
//
// The turn moves
//   - loop -> free, after a batch that woke a CQ waiter while few
//     goroutines are runnable (yieldGate): the one woken takes it next;
//   - free -> waiter, to a CQ waiter that finds it free or is offered it;
//   - waiter -> free, once its CQ holds something for it, or its wait is
//     cut short (its context, Wake, the CQ destroyed);
//   - free -> loop, once nobody has taken it for its lease: a program that
//     stops waiting does not stop the device receiving for long, and an
//     ACK a reply did not carry leaves no later than that.
//
// Whoever takes the turn first sends the ACKs the last holder left owed.
type receiveTurn struct {
	intr RecvInterrupter // nil: the receive goroutine keeps the turn
	// woke: a batch woke a CQ waiter, who could take the turn (set by
	// CQ.wakeLocked, read by the holder after its batch).
	woke atomic.Bool
	// ackDue: when the first ACK the turn holds for an answer comes due
	// (holdAcks), 0 for none: set by the turn's holder, read by the timer
	// goroutine (checkTurnLease), which has it sent.
	ackDue atomic.Int64

	mu        sync.Mutex
	holder    turnHolder
	freeSince int64         // device time the turn went free
	lease     int64         // how long it may stay free (turnLease to maxTurnLease)
	parked    int           // CQ waiters that would take an offered turn
	owed      []*QP         // ACKs the last holder left for a reply to carry
	offer     chan struct{} // capacity 1: the turn is free, for a parked waiter
	back      chan struct{} // capacity 1: the receive goroutine may take it

	// The receive buffers, used by whoever holds the turn.
	pkts []Packet
	bufs []byte
	size int
	used int // how many of pkts a provider may have changed since buffers
	// The waiter holding the turn, and its deliver function, made once.
	session waiterSession
	deliver func(n int) bool
}

type turnHolder uint8

const (
	turnLoop turnHolder = iota
	turnFree
	turnWaiter
)

// turnLease is how long the turn may stay free before the receive
// goroutine takes it back, at first. A ping-pong's holder is back within
// microseconds; a program busy elsewhere leaves the device unread, and
// an ACK owed, no longer than the lease. Each check that finds a waiter
// holding the turn doubles the lease, up to maxTurnLease, and the receive
// goroutine taking it back resets it: a check every 500 us cost a
// loopback ping-pong in one process a third of its speed (11 to 16 us),
// however little it did, by waking a thread.
const (
	turnLease    = 500 * time.Microsecond
	maxTurnLease = 4 * time.Millisecond // below minRTO: an ACK left owed never costs a timeout
)

func (t *receiveTurn) init(d *Device, p Provider, mtu MTU) {
	t.deliver = d.deliverToWaiter
	t.intr, _ = p.(RecvInterrupter)
	t.holder, t.lease = turnLoop, int64(turnLease)
	t.offer = make(chan struct{}, 1)
	t.back = make(chan struct{}, 1)
	n := max(p.BatchSize(), 1)
	t.size = packetSize(mtu)
	t.pkts = make([]Packet, n)
	t.bufs = make([]byte, n*t.size)
	t.used = n
}

// buffers gives the holder the device's receive buffers. A provider
// shortens, or replaces by memory of its own, the packets it delivers:
// those, and only those, are set back (every receive call pays for it,
// and a waiter makes one per wait).
func (t *receiveTurn) buffers() []Packet {
	for i := range t.used {
		t.pkts[i].Data = t.bufs[i*t.size : (i+1)*t.size : (i+1)*t.size]
	}
	t.used = 0
	return t.pkts
}

// batch is the first n receive buffers, as a batch the provider
// delivered: buffers sets them back before the next receive.
func (t *receiveTurn) batch(n int) []Packet {
	t.used = max(t.used, n)
	return t.pkts[:n]
}

// takeOwedLocked moves the ACKs the last holder left owed into rb.
func (t *receiveTurn) takeOwedLocked(rb *rxBatch) {
	rb.acks = append(rb.acks, t.owed...)
	clear(t.owed)
	t.owed = t.owed[:0]
}

// release gives the turn up, leaving rb's owed ACKs to the next holder;
// a parked waiter is offered it, and the receive goroutine gets it back
// after its lease if nobody takes it.
func (d *Device) releaseTurn(rb *rxBatch) {
	t := &d.turn
	now := d.now()
	t.mu.Lock()
	t.holder, t.freeSince = turnFree, now
	t.owed = append(t.owed, rb.acks...)
	clear(rb.acks)
	rb.acks = rb.acks[:0]
	parked := t.parked > 0
	lease := t.lease
	t.mu.Unlock()
	if parked {
		select {
		case t.offer <- struct{}{}:
		default:
		}
	}
	d.scheduleTurn(now + lease)
}

// awaitTurn blocks the receive goroutine until the turn is its again; it
// reports false once the device closes.
func (d *Device) awaitTurn(rb *rxBatch) bool {
	t := &d.turn
	for {
		select {
		case <-t.back:
		case <-d.done:
			return false
		}
		t.mu.Lock()
		if t.holder == turnFree {
			t.holder = turnLoop
			t.takeOwedLocked(rb)
			t.mu.Unlock()
			return true
		}
		t.mu.Unlock() // a waiter took it first
	}
}

// giveBack hands a free turn to the receive goroutine at once.
func (t *receiveTurn) giveBack() {
	select {
	case t.back <- struct{}{}:
	default:
	}
}

// checkTurnLease, on the timer goroutine, gives a turn free for its
// lease back to the receive goroutine, and lengthens the lease of a turn
// it finds in use.
//
// It also sees that held ACKs leave once due: a holder is interrupted to
// send them, and a free turn goes back to the receive goroutine at once,
// which sends them as it takes it (sendDueAcks).
func (d *Device) checkTurnLease(now int64) {
	t := &d.turn
	due := t.ackDue.Load()
	acksDue := due != 0 && due <= now
	t.mu.Lock()
	if t.holder != turnFree {
		if t.holder == turnWaiter && !acksDue {
			t.lease = min(2*t.lease, int64(maxTurnLease))
		}
		t.mu.Unlock()
		if acksDue {
			d.interruptTurn()
		} else if due != 0 {
			d.scheduleTurn(due)
		}
		return
	}
	at := t.freeSince + t.lease
	if acksDue {
		at = now
	}
	if at <= now {
		t.lease = int64(turnLease)
	}
	t.mu.Unlock()
	if at > now {
		if due != 0 && due < at {
			at = due
		}
		d.scheduleTurn(at)
		return
	}
	t.giveBack()
}

// handOver reports whether the receive goroutine, after a batch, gives
// the turn to the CQ waiter the batch woke.
func (d *Device) handOver() bool {
	return d.turn.intr != nil && d.turn.woke.Swap(false) && d.yield.open()
}

// takeTurnFree gives a CQ waiter the turn if it is free; receiveFor then
// takes the ACKs the last holder left owed.
func (d *Device) takeTurnFree() bool {
	t := &d.turn
	if t.intr == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.holder != turnFree {
		return false
	}
	t.holder = turnWaiter
	return true
}

// park counts a CQ waiter that would take an offered turn, and returns
// the channel the offer comes on (nil, which never fires, without an
// interruptible provider); unpark undoes it.
func (d *Device) park() <-chan struct{} {
	t := &d.turn
	if t.intr == nil {
		return nil
	}
	t.mu.Lock()
	t.parked++
	free := t.holder == turnFree
	t.mu.Unlock()
	if free { // released while we were on our way here
		select {
		case t.offer <- struct{}{}:
		default:
		}
	}
	return t.offer
}

func (d *Device) unpark() {
	t := &d.turn
	if t.intr == nil {
		return
	}
	t.mu.Lock()
	t.parked--
	t.mu.Unlock()
}

// receiveHolding is a waiter's turn (CQ.Wait, Signal.Wait), once
// takeTurnFree gave it: it receives for the device until done
// (receiveFor). receiving counts the waiter among those a wake-up from
// another goroutine must interrupt (wakeHolder) before receiveFor first
// looks at done, so that such a wake-up is either seen by that look or
// cuts the receive short.
func (d *Device) receiveHolding(ctx context.Context, done func() bool, receiving *atomic.Int32) error {
	receiving.Add(1)
	defer receiving.Add(-1)
	out := d.getBatch()
	defer d.putBatch(out)
	return d.receiveFor(ctx, out, done)
}

// wakeHolder interrupts the receive of a waiter holding the turn, when
// one of those receiving counts holds it, unless the holder is in a batch
// or its handlers, after which it looks at done anyway.
func (d *Device) wakeHolder(receiving *atomic.Int32) {
	if receiving.Load() > 0 && !d.handlers.looking.Load() {
		d.interruptTurn()
	}
}

// receiveFor is a waiter's turn: it receives for the whole device, batch
// after batch, until done reports true (before a receive, and after each
// batch) or the receive is interrupted (the caller arranges for ctx's
// end to interrupt it; Wake, Notify, Close). The turn is free again when it returns. An error from the
// provider goes to the receive goroutine with the turn, which deals with
// it; receiveFor reports it so that the waiter waits the ordinary way
// instead. Once the device is closed it reports ErrClosed.
func (d *Device) receiveFor(ctx context.Context, out *txBatch, done func() bool) error {
	t := &d.turn
	w := &t.session
	rb := &w.rb // the turn's: one waiter holds it at a time, until releaseTurn
	rb.out = out
	t.mu.Lock()
	t.takeOwedLocked(rb)
	t.mu.Unlock()
	d.sendDueAcks(rb)
	w.done, w.keep = done, false
	var err error
	for ctx.Err() == nil && !d.isClosed() && !done() {
		if err = d.recvInto(t.buffers(), t.deliver); err != nil || w.keep {
			break
		}
		d.sendDueAcks(rb)
	}
	clear(rb.due)
	w.done, rb.out = nil, nil
	d.releaseTurn(rb) // the last look at the session: the turn is free after it
	if err != nil {
		t.giveBack()
	}
	if d.isClosed() {
		// Whatever the provider said: a waiter that tried again would
		// take the free turn and return at once, round and round.
		return ErrClosed
	}
	return err
}

// waiterSession is the state of the waiter holding the turn, kept in the
// turn so that a receive allocates nothing: one waiter holds it at a time.
type waiterSession struct {
	rb   rxBatch
	done func() bool
	keep bool // the batch that ends the turn leaves its ACKs owed
}

// deliverToWaiter handles a batch the waiter holding the turn received.
func (d *Device) deliverToWaiter(n int) bool {
	w := &d.turn.session
	d.stats.rxByWaiters.Add(uint64(n))
	d.handleBatch(d.turn.batch(n), &w.rb)
	w.keep = w.done()
	d.settle(&w.rb, w.keep)
	return !w.keep
}

// interruptTurn cuts short the receive of a waiter holding the turn, for
// the CQ it waits on (Wake, Destroy).
func (d *Device) interruptTurn() {
	if d.turn.intr != nil {
		d.turn.intr.InterruptRecv()
	}
}

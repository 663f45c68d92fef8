package vroce

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// CQ is a completion queue (ibv_cq). Its ring grows with use up to the
// depth it was created with, so a deep, idle CQ costs little. A completion
// that finds the CQ full is an overflow: the CQ enters an error state, the
// device reports EventCQErr and Poll returns ErrCQOverflow after the
// completions it holds. Completions are never dropped silently.
type CQ struct {
	dev   *Device
	depth int

	mu       sync.Mutex
	ring     []WorkCompletion
	head, n  int
	overflow bool
	users    int // QPs and SRQs attached
	gone     bool
	// A lone waiter sleeps on bell, a channel kept for the CQ's life, so
	// that waiting allocates nothing; waiters that come while another
	// waits share others, closed (and made anew) on each wake.
	bell   chan struct{} // capacity 1
	others chan struct{}
	nwait  int
	woken  bool // Wake was called: the next Wait returns at once
	// receiving counts waiters holding the device's receive turn for
	// this CQ (receiveTurn): a completion another goroutine pushes
	// interrupts their receive.
	receiving atomic.Int32
	// The context whose end interrupts a receiving waiter, and how to
	// stop it doing so: kept from one Wait to the next with the same
	// context, since registering costs an allocation and a map insert.
	turnCtx  context.Context
	turnStop func() bool
	// done is turnDone as a func value, made once: a method value made
	// at each Wait is an allocation per wait.
	done func() bool
	// onCompletion, when set, runs on the goroutine receiving for the device
	// after a receive batch that pushed completions here; those do not
	// wake waiters (see OnCompletion). handlerDue: it is to run.
	onCompletion func()
	handlerDue   bool
}

// CreateCQ creates a completion queue that holds up to depth completions.
func (d *Device) CreateCQ(depth int) (*CQ, error) {
	if depth < 1 {
		return nil, invalidf("create CQ: depth %d must be at least 1", depth)
	}
	if err := checkLimit("create CQ", "max_cqe", depth, d.attr.MaxCQE); err != nil {
		return nil, err
	}
	if err := d.reserve("create CQ", "max_cq", &d.count.cq, d.attr.MaxCQ); err != nil {
		return nil, err
	}
	cq := &CQ{dev: d, depth: depth}
	cq.done = cq.turnDone
	return cq, nil
}

// Depth is the number of completions the CQ holds.
func (cq *CQ) Depth() int { return cq.depth }

// Destroy frees the CQ; it fails with ErrBusy while QPs use it.
func (cq *CQ) Destroy() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.gone {
		return ErrClosed
	}
	if cq.users > 0 {
		return fmt.Errorf("vroce: destroy CQ: %d QPs still use it: %w", cq.users, ErrBusy)
	}
	cq.gone = true
	cq.wakeLocked()
	cq.ring = nil
	if cq.turnStop != nil {
		cq.turnStop()
		cq.turnCtx, cq.turnStop = nil, nil
	}
	cq.dev.events.drop(nil, func(ev AsyncEvent) bool { return ev.CQ == cq })
	cq.dev.release(&cq.dev.count.cq)
	return nil
}

func (cq *CQ) attach() error {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.gone {
		return fmt.Errorf("vroce: CQ destroyed: %w", ErrClosed)
	}
	cq.users++
	return nil
}

func (cq *CQ) detach() {
	cq.mu.Lock()
	cq.users--
	cq.mu.Unlock()
}

// push adds a completion. It reports false on overflow.
func (cq *CQ) push(wc *WorkCompletion) bool {
	cq.mu.Lock()
	if cq.overflow || cq.gone {
		cq.mu.Unlock()
		return false
	}
	if cq.n == cq.depth {
		cq.overflow = true
		cq.wakeLocked()
		cq.mu.Unlock()
		cq.dev.events.push(AsyncEvent{Type: EventCQErr, CQ: cq})
		return false
	}
	if cq.n == len(cq.ring) {
		cq.grow()
	}
	cq.ring[(cq.head+cq.n)%len(cq.ring)] = *wc
	cq.n++
	if cq.onCompletion != nil && cq.dev.handlers.add(cq) {
		cq.mu.Unlock()
		return true
	}
	cq.wakeLocked()
	cq.mu.Unlock()
	return true
}

// OnCompletion has f run on the goroutine receiving for the device (its
// receive goroutine, or a CQ waiter holding the receive turn), outside every
// lock of the device, after a batch of received packets that pushed
// completions to the CQ: a program that takes completions as events (an
// rsocket stack, say) handles them there, without a goroutine hand-off
// per message. Those completions do not wake Wait; completions that other
// goroutines push (a timer's, a flush's) still do, and a Wait on a CQ
// with a handler never receives for the device. f must not block for
// long: the whole device waits for it. nil removes the handler.
func (cq *CQ) OnCompletion(f func()) {
	cq.mu.Lock()
	cq.onCompletion = f
	cq.mu.Unlock()
}

// handlerQueue is the device's list of CQs whose completion handler is to
// run at the end of the receive batch in progress.
type handlerQueue struct {
	mu  sync.Mutex
	due []*CQ
	// inBatch: a receive batch is in progress, and a handler it makes
	// due is queued.
	inBatch bool
	// looking: a receive batch or the handlers it made due are running,
	// after which the receive turn's holder looks whether its wait is
	// over; so a wake-up meant for it need not interrupt its receive
	// (read by CQ.wakeLocked and Signal.Notify).
	looking atomic.Bool
}

// add queues cq's handler if a receive batch is in progress (under
// cq.mu), reporting whether it did: if not, the caller wakes waiters.
func (h *handlerQueue) add(cq *CQ) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.inBatch {
		return false
	}
	if !cq.handlerDue {
		cq.handlerDue = true
		h.due = append(h.due, cq)
	}
	return true
}

// begin marks a receive batch in progress.
func (h *handlerQueue) begin() {
	h.looking.Store(true)
	h.mu.Lock()
	h.inBatch = true
	h.mu.Unlock()
}

// end closes the batch and runs the handlers it made due; due is the
// caller's scratch slice, returned for reuse, its length how many ran.
func (h *handlerQueue) end(due []*CQ) []*CQ {
	defer h.looking.Store(false)
	h.mu.Lock()
	h.inBatch = false
	due, h.due = h.due, due[:0]
	h.mu.Unlock()
	for i, cq := range due {
		cq.mu.Lock()
		cq.handlerDue = false
		f := cq.onCompletion
		if f == nil {
			cq.wakeLocked() // removed since: the completions still need a waiter
		}
		cq.mu.Unlock()
		if f != nil {
			f()
		}
		due[i] = nil
	}
	return due
}

func (cq *CQ) grow() {
	size := min(max(2*len(cq.ring), 16), cq.depth)
	ring := make([]WorkCompletion, size)
	for i := 0; i < cq.n; i++ {
		ring[i] = cq.ring[(cq.head+i)%len(cq.ring)]
	}
	cq.ring, cq.head = ring, 0
}

func (cq *CQ) wakeLocked() {
	cq.dev.wakeHolder(&cq.receiving)
	if cq.nwait == 0 {
		return
	}
	cq.dev.handedOff.Store(true)
	cq.dev.turn.woke.Store(true)
	select {
	case cq.bell <- struct{}{}:
	default:
	}
	if cq.others != nil {
		close(cq.others)
		cq.others = nil
	}
}

// Poll moves up to len(wc) completions into wc, oldest first, and returns
// how many (ibv_poll_cq). Once the CQ has overflowed and is empty it
// returns ErrCQOverflow.
func (cq *CQ) Poll(wc []WorkCompletion) (int, error) {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	n := 0
	for n < len(wc) && cq.n > 0 {
		wc[n] = cq.ring[cq.head]
		cq.head = (cq.head + 1) % len(cq.ring)
		cq.n--
		n++
	}
	if n == 0 && cq.overflow {
		return 0, ErrCQOverflow
	}
	if n == 0 && cq.gone {
		return 0, ErrClosed
	}
	return n, nil
}

// Wait blocks until the CQ holds a completion, has overflowed, or ctx ends
// (a completion channel and ibv_req_notify_cq in one call). It also
// returns, with nothing to poll, once after each Wake.
//
// While it waits, the calling goroutine may receive for the whole device
// (receiveTurn), so that the packet that completes its work wakes it
// directly; completion handlers (OnCompletion) then run on it too.
func (cq *CQ) Wait(ctx context.Context) error {
	d := cq.dev
	turn := d.turn.intr != nil // this Wait may take the receive turn
	for {
		cq.mu.Lock()
		if ready, err := cq.readyLocked(); ready {
			cq.mu.Unlock()
			return err
		}
		if cq.onCompletion != nil {
			// Whoever receives runs the handler, which takes the
			// completions: this waiter has nothing to gain from
			// receiving, and would take the turn from one that has (a
			// stream's reader waiting on a Signal).
			turn = false
		}
		if turn {
			if err := ctx.Err(); err != nil {
				cq.mu.Unlock()
				return err
			}
			if d.takeTurnFree() {
				cq.interruptOnDoneLocked(ctx)
				cq.mu.Unlock()
				err := d.receiveHolding(ctx, cq.done, &cq.receiving)
				if errors.Is(err, ErrClosed) {
					return err
				}
				turn = err == nil // the receive goroutine deals with the provider's error
				continue
			}
		}
		var bell, others chan struct{} // a nil channel never fires
		if cq.nwait == 0 {
			if cq.bell == nil {
				cq.bell = make(chan struct{}, 1)
			}
			bell = cq.bell
		} else {
			if cq.others == nil {
				cq.others = make(chan struct{})
			}
			others = cq.others
		}
		cq.nwait++
		cq.mu.Unlock()
		var offer <-chan struct{}
		if turn {
			offer = d.park()
		}
		var err error
		select {
		case <-bell: // may be a wake meant for a waiter gone since: look again
		case <-others:
		case <-offer: // the receive turn is free: take it, if it still is
		case <-ctx.Done():
			err = ctx.Err()
		case <-d.done:
			err = ErrClosed
		}
		if turn {
			d.unpark()
		}
		cq.mu.Lock()
		cq.nwait--
		cq.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// interruptOnDoneLocked makes ctx's end interrupt this CQ's receiving
// waiter.
func (cq *CQ) interruptOnDoneLocked(ctx context.Context) {
	if ctx == cq.turnCtx || ctx.Done() == nil {
		return
	}
	if cq.turnStop != nil {
		cq.turnStop()
	}
	cq.turnCtx = ctx
	cq.turnStop = context.AfterFunc(ctx, func() {
		if cq.receiving.Load() > 0 {
			cq.dev.interruptTurn()
		}
	})
}

// readyLocked reports whether Wait returns now, and with what; it takes
// a Wake it returns for.
func (cq *CQ) readyLocked() (bool, error) {
	if !cq.waitOverLocked() {
		return false, nil
	}
	switch {
	case cq.n > 0:
		return true, nil
	case cq.overflow:
		return true, ErrCQOverflow
	case cq.gone:
		return true, ErrClosed
	}
	cq.woken = false
	return true, nil
}

// waitOverLocked reports whether a Wait would return now.
func (cq *CQ) waitOverLocked() bool { return cq.n > 0 || cq.overflow || cq.gone || cq.woken }

// turnDone reports whether a waiter receiving for the device has what it
// waits for.
func (cq *CQ) turnDone() bool {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return cq.waitOverLocked()
}

// Wake makes a blocked Wait return, or the next one return at once, with
// nothing to poll: for a program that sleeps on the CQ and has other
// news to attend to.
func (cq *CQ) Wake() {
	cq.mu.Lock()
	cq.woken = true
	cq.wakeLocked()
	cq.mu.Unlock()
}

// PollWait polls, waiting first if the CQ is empty: the usual loop body of
// a program that blocks for completions.
func (cq *CQ) PollWait(ctx context.Context, wc []WorkCompletion) (int, error) {
	for {
		n, err := cq.Poll(wc)
		if n > 0 || err != nil {
			return n, err
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

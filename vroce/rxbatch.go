package vroce

import "time"

// A receive batch: the packets one receive call delivered, handed to
// their QPs by whoever holds the receive turn (the device's receive
// goroutine, or a goroutine waiting on a CQ or a Signal; turn.go). It
// owes, when it ends: the ACKs its requests asked for, coalesced to one
// per QP (sent twice when two or more asked: responder.ackRequested); the
// sends those ACKs clocked out (QP.pumpInto); the completion handlers it
// made due; and, when it woke a goroutine whose reply could carry an
// ACK, a yield to that goroutine.
// The responses it produced (ACKs, READ responses, NAKs) go out in its
// send batch, at the latest when it ends.

// rxBatch is what a receive batch owes until it ends, and its send
// batch. Owned by the holder of the receive turn.
type rxBatch struct {
	out  *txBatch // the responses and ACKs it sends
	acks []*QP    // QPs owing a coalesced ACK (responder.ackQueued)
	// QPs whose sends out holds (QP.pumpInto), released when it is sent
	pumped []*QP
	piggy  bool  // one of them could piggyback it on a reply
	due    []*CQ // completion handlers it made due (scratch, reused)
	now    int64 // device time the batch began (handleBatch)
}

// oweAck queues qp's coalesced ACK, under qp.mu: it is sent when the
// batch ends, or left for a reply to carry.
func (b *rxBatch) oweAck(qp *QP) {
	b.piggy = b.piggy || qp.attr.PiggybackACK
	if !qp.resp.ackQueued {
		qp.resp.ackQueued = true
		b.acks = append(b.acks, qp)
	}
}

// handleBatch hands each received packet to its QP and runs the
// completion handlers the batch made due.
func (d *Device) handleBatch(pkts []Packet, rb *rxBatch) {
	rb.now = d.now()
	d.handlers.begin()
	for i := range pkts {
		d.receive(&pkts[i], rb)
	}
	if rb.due = d.handlers.end(rb.due); len(rb.due) > 0 {
		d.handedOff.Store(true) // a handler may have woken someone
	}
}

// settle sends what a receive batch owes: its coalesced ACKs, then the
// batch. The ACK of a QP whose program answers what it receives
// (responder.replies) is held instead, for up to ackHold, for the answer
// to carry (wire.PiggyACK): by whoever holds the receive turn, across
// batches and from one holder to the next (holdAcks). When the batch
// woke a goroutine and the holder keeps the turn, it first lets that
// goroutine run, for the same reason.
func (d *Device) settle(rb *rxBatch, keep bool) {
	if d.handedOff.Swap(false) && rb.piggy && !keep {
		d.yield.yield()
	}
	rb.piggy = false
	d.holdAcks(rb, rb.now, !keep)
	d.transmit(rb.out)
	d.releaseHeld(rb)
}

// holdAcks goes through the ACKs rb owes: those that may still wait
// for an answer stay in rb.acks, the rest go into rb.out. The turn's
// holder keeps the held ones (releaseTurn leaves them to the next), and
// with watch, the timer goroutine has it send them once the first comes
// due (checkTurnLease), should nothing else bring it back first. A holder
// about to give the turn up does not watch, nor leave a due for the timer
// to find: the turn's lease bounds what it leaves, as before ACKs were
// held, and in a ping-pong the answer has taken the ACK long before (a
// check every ackHold cost a timerfd_settime for every eight round trips,
// and a due left behind woke the timer goroutine again after each lease
// check). A now of 0 is read from the clock when a QP still owes its
// ACK.
func (d *Device) holdAcks(rb *rxBatch, now int64, watch bool) {
	kept := rb.acks[:0]
	due := int64(0)
	for i, qp := range rb.acks {
		rb.acks[i] = nil
		if at, held := qp.holdOrSendAck(&now, rb.out); held {
			kept = append(kept, qp)
			if due == 0 || at < due {
				due = at
			}
		}
	}
	rb.acks = kept
	if !watch {
		due = 0
	}
	d.turn.ackDue.Store(due)
	if due != 0 {
		d.scheduleTurn(due)
	}
}

// releaseHeld lets the QPs whose packets rb.out held, now sent, pump
// again from any goroutine.
func (d *Device) releaseHeld(rb *rxBatch) {
	for i, qp := range rb.pumped {
		rb.pumped[i] = nil
		qp.releaseHeld()
	}
	rb.pumped = rb.pumped[:0]
}

// sendDueAcks sends the ACKs in rb.acks that may wait no longer and
// keeps the rest, watched: those the last holder of the turn left owed,
// taken with the turn, and those a holder keeps after a receive that
// returned no batch (interrupted by the timer goroutine for a held ACK
// come due, or by anything else).
func (d *Device) sendDueAcks(rb *rxBatch) {
	// The clock is read only for an ACK still owed (holdOrSendAck): in a
	// ping-pong the answer has taken the held ACK by the time its sender
	// waits again, and a reading costs 44 ns on a first Zen.
	d.holdAcks(rb, 0, true)
	d.transmit(rb.out)
}

// ackHold is how long an owed ACK may wait for an answer to carry it:
// long enough for a program to answer through another process (a proxy
// writing to its server and reading the reply: a few hundred
// microseconds on a loaded host, milliseconds with hundreds of streams
// queued behind one another). The peer's loss probe waits it out
// (heldAckProbeFloor), and its RTO for such a flight is longer still
// (heldAckRTO). Eight 1 KiB echo streams through two rsock-proxys sent
// an ACK alone for every message each way when only a turn handed back
// held them; 200 sent 1.93 datagrams a request each way with a 500 us
// hold, 1.53-1.59 with 2 ms and 1.06-1.12 with 5 ms (22,800-23,900
// requests a second against 21,500-22,700, three interleaved pairs). At
// 1,000 streams and more answers take longer still: a hold that expires
// stops the holding only until the program's next answer
// (responder.replies), so there nearly every hold waits in vain, as it
// did at 2 ms; learning from how soon the answer came instead cost more
// datagrams at 200 than it saved (docs/performance-history.md).
const ackHold = 5 * time.Millisecond

// holdOrSendAck holds the QP's owed ACK for an answer to carry, reporting
// when it comes due, or sends it into out. *now, when 0, is read from the
// device clock once an ACK is owed. An ACK held until it came due
// teaches the responder that its program does not answer in time
// (responder.replies).
func (qp *QP) holdOrSendAck(now *int64, out *txBatch) (due int64, held bool) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	r := &qp.resp
	if r.ackPending {
		if *now == 0 {
			*now = qp.dev.now()
		}
		due = r.ackOwedAt + int64(ackHold)
		if *now < due && r.mayHoldAck(qp) {
			return due, true
		}
		if r.replies && *now >= due {
			r.replies = false // nothing answered in time
		}
	}
	r.ackQueued = false
	qp.sendOwedAckLocked(out)
	return 0, false
}

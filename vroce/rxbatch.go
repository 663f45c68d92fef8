package vroce

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
	d.handlers.begin()
	for i := range pkts {
		d.receive(&pkts[i], rb)
	}
	if rb.due = d.handlers.end(rb.due); len(rb.due) > 0 {
		d.handedOff.Store(true) // a handler may have woken someone
	}
}

// settle sends what a receive batch owes: its coalesced ACKs, then the
// batch. A holder that gives up the turn to the goroutine whose work the
// batch completed (keep) leaves owed the ACKs of QPs whose program
// answers before it waits again (responder.replies): the answer carries
// them (wire.PiggyACK), and the next holder sends what is left. Otherwise,
// when the batch woke a goroutine, it first lets it run, for the same
// reason.
func (d *Device) settle(rb *rxBatch, keep bool) {
	if d.handedOff.Swap(false) && rb.piggy && !keep {
		d.yield.yield()
	}
	rb.piggy = false
	kept := rb.acks[:0]
	for i, qp := range rb.acks {
		rb.acks[i] = nil
		if keep && qp.leavesAckOwed() {
			kept = append(kept, qp)
			continue
		}
		qp.sendOwedAck(rb.out)
	}
	rb.acks = kept
	d.transmit(rb.out)
	d.releaseHeld(rb)
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

// sendLeftOwed sends the ACKs a holder of the turn left owed (taken into
// rb.acks with the turn), learning from each whether a request carried
// it in the meantime.
func (d *Device) sendLeftOwed(rb *rxBatch) {
	for i, qp := range rb.acks {
		qp.mu.Lock()
		if qp.resp.ackPending {
			qp.resp.replies = false // nothing answered in time
		}
		qp.resp.ackQueued = false
		qp.sendOwedAckLocked(rb.out)
		qp.mu.Unlock()
		rb.acks[i] = nil
	}
	rb.acks = rb.acks[:0]
	d.transmit(rb.out)
}

// leavesAckOwed reports whether the QP's owed ACK may wait for a request
// to carry it.
func (qp *QP) leavesAckOwed() bool {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.resp.replies && qp.attr.PiggybackACK && qp.resp.ackPending
}

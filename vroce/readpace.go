package vroce

import (
	"time"

	"vroce.dev/vroce/wire"
)

// Pacing READ responses. A READ's answer has no ACK to clock it: the
// responder sends it whole, as RoCE hardware does, and a requester that
// asks for much at once (rxe and hardware ask a whole READ in one request;
// a vRoCE requester asks readChunk packets at a time, inside its window)
// can be sent more than the path or the requester's own receive queue
// takes. The requester then asks again from the first packet it missed,
// for the whole rest, which overruns it again: rxe in a qemu guest read
// 1 MiB from us at 1.7 MB/s so.
//
// So a responder whose requester has lost part of a large answer paces
// its large answers from then on. The loss shows as a duplicate READ
// that asks again from inside an answer: the packets the requester had
// before it, over the time since the answer began to leave, is what the
// requester took, and the pacer sends at that rate (not below
// minReadRate), in bursts of readBurst packets. A large READ that comes
// with no such duplicate since the last, an answer's time at the rate
// after the rate last changed, raises it by a quarter (from the floor to
// unpaced in 18; by half it overshot rxe's pace threefold and lost
// again); above maxPacedReadRate the pacer stops and answers leave whole
// again.
// A READ of at most readChunk packets, which is what vRoCE peers ask, is
// neither a signal nor paced unless the pacer already is: random loss on
// its 64 packets must not slow it. Nor is a duplicate that asks from an
// answer's first packet, which says nothing of the rate. ib_read_bw -a
// in the qemu guest reading from us, three runs each: 1, 2, 4 and 8 MiB
// at 25-38, 16-33, 19-27 and 19-28 MB/s, against 16-21, 9-15, 10-11 and
// 10-11 with every answer whole and duplicates cut at 1,024 packets.
//
// Answers not yet sent wait in PSN order (readRun), and every other
// response waits behind them: an ACK beyond a READ's PSN would tell the
// requester that READ's responses were lost. A request that is not a
// READ sends whatever is queued first (flushReads); an owed ACK waits
// until the queue empties. A duplicate READ supersedes what is queued
// from its PSN on: the requester asks again for all of that.
//
// The queue holds at most the READs the requester may have outstanding,
// max_dest_rd_atomic: every answer in it is one the requester still
// waits for, and a requester that keeps the limit it agreed to never
// fills it. One that does not (a replay of READs at PSN after PSN, or new
// READs while its answers wait) would grow it without bound, so a READ
// that finds it full is not executed: it is dropped as if lost, and
// counted (ReadsRefused). rxe bounds its READ resources the same way,
// recycling them.
//
// A duplicate READ is read again (memory reads are idempotent), but it
// costs us its whole length in responses for a few dozen bytes of
// request: replayed, one 44-byte request drew 8 MiB. So the packets all
// duplicates of a QP draw are metered by a token bucket of dupReadBurst
// packets, refilled at dupReadRate a second (dupReadBudget): loss
// recovery at 1-5% stays well inside it, a replay flood does not. The
// bucket paces a duplicate's answer rather than cutting it short: rxe
// asks again for the whole rest of its READ, and for every READ after
// it, and an answer cut short leaves it waiting for its retransmission
// timer (67 ms at perftest's timeout 14) before it asks for more. Cut
// at 1,024 packets a duplicate, rxe read 8 MiB from us in 1,024-packet
// steps, one a timer: 10 MB/s. Only a duplicate's answer sent at once,
// ahead of a request that is not a READ (flushReads), is cut to what
// the bucket holds, the rest counted (DupReadLimited).

const (
	readBurst        = 16       // packets a paced answer sends back to back
	minReadRate      = 10_000.0 // packets a second, the slowest a paced answer goes
	maxPacedReadRate = 500_000.0
	readRateGain     = 1.25

	dupReadBurst = 1024
	dupReadRate  = 100_000.0 // packets a second
)

// perNs turns packets a second into the token bucket's packets a
// nanosecond.
func perNs(perSecond float64) float64 { return perSecond / float64(time.Second) }

// readRun is an answer to a READ not yet all sent: packets [next, end) of
// the n that answer the READ at psn from s.
type readRun struct {
	s         span
	psn       uint32
	n         int
	next, end int
	msn       uint32
	dup       bool // a duplicate's: drawn from the duplicate budget
}

// readPacer is a responder's READ answers in waiting, and their pace.
type readPacer struct {
	runs []readRun
	rate float64     // packets a second; 0: unpaced
	pace tokenBucket // at rate, holding at most readBurst
	// dups meters what duplicates draw: dupReadBurst, refilled at
	// dupReadRate (dupReadBudget); full from the responder's reset.
	dups tokenBucket
	due  int64 // when the queue may send again (0: not waiting)
	// The large answers that began to leave lately, for a duplicate to
	// find the one it asks inside of: several READs may be outstanding,
	// and a loss in the first shows while the later ones leave.
	began     [answersKept]answerStart
	beganNext int
	lossSince bool  // a duplicate showed a loss since the last large READ
	gainAt    int64 // when the rate last rose, or was set by a loss
}

// answersKept is how many answers' starts a pacer keeps: the most READs
// a requester may have outstanding (max_rd_atomic) is 16.
const answersKept = 16

// answerStart is when a large answer's first packet left (at: 0 for none,
// or once a duplicate asked inside it: one loss signal an answer).
type answerStart struct {
	psn uint32
	n   int
	at  int64
}

// answerRead answers a READ at psn, executed now, from s: n packets, at
// once or paced.
func (r *responder) answerRead(qp *QP, out *txBatch, s span, psn uint32, n int, now int64) {
	pc := &r.pace
	if n > readChunk && pc.rate > 0 {
		// At most once for each answer's worth of time at the rate: a
		// requester with several READs outstanding asks for the next
		// ones before the first is answered.
		if !pc.lossSince && now-pc.gainAt >= int64(float64(n)/perNs(pc.rate)) {
			pc.rate *= readRateGain
			pc.gainAt = now
			if pc.rate > maxPacedReadRate {
				pc.rate = 0
			}
		}
		pc.lossSince = false
	}
	run := readRun{s: s, psn: psn, n: n, end: n, msn: r.msn}
	if pc.rate == 0 && len(pc.runs) == 0 {
		r.sendReadPackets(qp, out, &run, run.end)
		return
	}
	pc.runs = append(pc.runs, run)
	r.pumpReads(qp, out, now)
}

// answerDuplicateRead answers a duplicate READ at psn from s, n packets,
// within the duplicate budget: queued, always, so that the budget paces
// it, unless the queue is full.
func (r *responder) answerDuplicateRead(qp *QP, out *txBatch, s span, psn uint32, n int, now int64) {
	if r.refuseRead(qp) {
		return
	}
	r.pace.runs = append(r.pace.runs, readRun{s: s, psn: psn, n: n, end: n, msn: r.msn, dup: true})
	r.pumpReads(qp, out, now)
}

// refuseRead reports whether a READ must be refused because the queue
// holds as many answers as the requester may have READs outstanding,
// and counts it.
func (r *responder) refuseRead(qp *QP) bool {
	if len(r.pace.runs) < max(qp.attr.MaxDestRdAtomic, 1) {
		return false
	}
	qp.stats.ReadsRefused++
	return true
}

// onReadLoss learns from a duplicate READ at psn, asking again from
// inside a large answer that began lately, what the requester takes: the
// packets of that answer before psn, over the time since it began.
func (r *responder) onReadLoss(psn uint32, now int64) {
	pc := &r.pace
	for i := range pc.began {
		b := &pc.began[i]
		// A duplicate from an answer's first packet tells nothing of
		// the rate: the whole answer was lost, or the requester asks
		// again for every READ after the one that lost packets (rxe
		// goes back to it and resends them all).
		got := psnDiff(psn, b.psn)
		if b.at == 0 || got <= 0 || int(got) >= b.n {
			continue
		}
		pc.lossSince = true
		took := minReadRate
		if elapsed := now - b.at; elapsed > 0 {
			took = max(minReadRate, float64(got)*float64(time.Second)/float64(elapsed))
		}
		if pc.rate == 0 || took < pc.rate {
			pc.rate = took
		}
		pc.gainAt = now
		clear(pc.began[:]) // the answers after it leave again, as duplicates
		return
	}
}

// noteStart records that a large answer's first packet leaves now.
func (pc *readPacer) noteStart(run *readRun, now int64) {
	pc.began[pc.beganNext] = answerStart{psn: run.psn, n: run.end, at: now}
	pc.beganNext = (pc.beganNext + 1) % answersKept
}

// supersedeReads drops the queued answers a duplicate READ at psn asks
// for again: those from psn on. What comes before psn is still owed: rxe,
// going back to a READ that lost packets, resends every READ after it,
// each a duplicate of its own, and each must not drop the one before.
func (r *responder) supersedeReads(qp *QP, psn uint32) {
	pc := &r.pace
	kept := pc.runs[:0]
	for _, run := range pc.runs {
		k := int(psnDiff(psn, run.psn)) // the run's packets before psn
		if k >= run.end {
			kept = append(kept, run) // all before psn: still owed
			continue
		}
		from := max(k, run.next) // asked again from here on
		qp.stats.ReadResponsesSuperseded += uint64(run.end - from)
		run.end = from
		if run.next < run.end {
			kept = append(kept, run)
		}
	}
	clear(pc.runs[len(kept):])
	pc.runs = kept
}

// pumpReads sends the queued answers as the pace allows, then, once none
// is left, the ACK that waited for them.
func (r *responder) pumpReads(qp *QP, out *txBatch, now int64) {
	pc := &r.pace
	pc.due = 0
	if pc.rate > 0 {
		pc.pace.refill(now, perNs(pc.rate), readBurst)
	} else {
		pc.pace.fill(now, readBurst)
	}
	for len(pc.runs) > 0 {
		run := &pc.runs[0]
		k := run.end - run.next
		if k > 0 && (pc.rate > 0 || run.dup) {
			if pc.rate > 0 {
				if k = min(k, int(pc.pace.tokens)); k == 0 {
					pc.due = pc.pace.whenOne(perNs(pc.rate))
				}
			}
			if run.dup && k > 0 {
				if k = r.dupReadBudget(qp, k); k == 0 {
					pc.due = pc.dups.whenOne(perNs(dupReadRate))
				}
			}
			if k == 0 {
				qp.req.schedule(qp)
				return
			}
			if pc.rate > 0 {
				pc.pace.take(k)
			}
		}
		r.sendReadPackets(qp, out, run, run.next+k)
		if run.next == run.end {
			last := len(pc.runs) - 1
			copy(pc.runs, pc.runs[1:])
			pc.runs[last] = readRun{}
			pc.runs = pc.runs[:last]
		}
	}
	qp.sendOwedAckLocked(out)
}

// flushReads sends every queued answer now, ahead of a response to a
// request that is not a READ.
func (r *responder) flushReads(qp *QP, out *txBatch) {
	pc := &r.pace
	if len(pc.runs) == 0 {
		return
	}
	for i := range pc.runs {
		run := &pc.runs[i]
		to := run.end
		if run.dup {
			k := r.dupReadBudget(qp, run.end-run.next)
			qp.stats.DupReadLimited += uint64(run.end - run.next - k)
			to = run.next + k
		}
		r.sendReadPackets(qp, out, run, to)
		*run = readRun{}
	}
	pc.runs, pc.due = pc.runs[:0], 0
}

// readsWaiting reports whether answers are queued, which every other
// response must wait behind.
func (r *responder) readsWaiting() bool { return len(r.pace.runs) > 0 }

// onReadTimer sends what the pace allows once it is due, unless a
// receive batch holds answers of the QP's not yet sent (the first of a
// READ's, sent as the request was executed): the rest would overtake
// them, and a requester takes READ responses out of order as lost
// (rxe asks for the READ again). The batch's release pumps them
// (QP.releaseHeld, kickAt).
func (r *responder) onReadTimer(qp *QP, now int64, out *txBatch) {
	if r.pace.due == 0 || now < r.pace.due {
		return
	}
	if qp.heldBehind(out) {
		return
	}
	r.pumpReads(qp, out, now)
}

// sendReadPackets sends run's packets [next, to) and moves next to to.
// Only an answer's last packet is a LAST: one cut short by the duplicate
// budget ends without one.
func (r *responder) sendReadPackets(qp *QP, out *txBatch, run *readRun, to int) {
	if run.next == 0 && run.end > readChunk {
		r.pace.noteStart(run, qp.dev.now())
	}
	mtu := qp.mtu
	for i := run.next; i < to; i++ {
		op := wire.RCReadResponseMiddle
		switch {
		case run.n == 1:
			op = wire.RCReadResponseOnly
		case i == 0:
			op = wire.RCReadResponseFirst
		case i == run.n-1:
			op = wire.RCReadResponseLast
		}
		off := i * mtu
		size := min(mtu, run.s.n-off)
		buf := qp.packetBuf(out)
		p := wire.Packet{
			BTH:  wire.BTH{Opcode: op, PKey: wire.DefaultPKey, DestQP: qp.attr.DestQPN, PSN: psnAdd(run.psn, i)},
			AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: run.msn},
		}
		hl, _ := p.EncodeHeaders(buf, size)
		out.addCopied(qp, hl, run.s.bytes()[off:off+size], 0)
	}
	run.next = to
}

// dupReadBudget takes up to n packets from the QP's duplicate READ
// budget and returns how many it may send.
func (r *responder) dupReadBudget(qp *QP, n int) int {
	pc := &r.pace
	pc.dups.refill(qp.dev.now(), perNs(dupReadRate), dupReadBurst)
	return pc.dups.take(n)
}

package vroce

import (
	"fmt"
	"math/bits"
)

// The send queue: the ring of a QP's posted send work requests, in the
// order they complete (IBA 10.8). RC and UD both post into it. RC's
// requester sends from next and its completer retires from head; UD's
// sender sends and retires at once.

// sendWQE is a posted send work request and its transport state.
type sendWQE struct {
	id           uint64
	op           WROpcode
	flags        SendFlags
	signaled     bool
	first        span
	more         []span // further SGEs, capacity reused with the slot
	inline       []byte // SendInline data, capacity reused with the slot
	length       int
	imm          uint32
	raddr        uint64
	rkey         uint32
	cmpAdd, swap uint64
	ud           udDest

	assigned bool   // has PSNs
	psn      uint32 // first PSN
	npsn     int    // PSNs the message uses
}

// lendMin is the smallest payload a packet carries straight from
// registered memory: below it, copying costs less than the kernel's
// handling of two more iovecs per segment. A 1 KiB payload (RoCE's MTU
// under a 1500-byte link) is below it: write_bw 64 KiB between two
// namespaces at MTU 1500 went from 1,435-1,592 to 1,594-1,687 MiB/s
// when it was copied (5 interleaved runs, each faster; CPU per GiB 0.64
// to 0.63; 4 more in a noisier hour split 2 and 2), and a stream's
// ACK-clocked sends of 1 KiB were faster copied than lent (990 MiB/s
// against 935). The 1344-byte packets of vRoCE peers on such a link
// too: lent, write_bw 1,916-2,124 against 1,961-2,129 copied, stream_bw
// 1,518-1,811 against 1,774-1,994 (3 interleaved runs).
const lendMin = 2048

// lend returns the message bytes [off, off+n) as registered memory itself
// when one SGE holds them all, for the packet to carry without a copy
// (from lendMin bytes on) or to be copied from in one piece.
func (w *sendWQE) lend(off, n int) ([]byte, bool) {
	if w.flags&SendInline != 0 || w.first.mr == nil {
		return nil, false
	}
	s := w.first
	for i := 0; off >= s.n; i++ {
		if i == len(w.more) {
			return nil, false
		}
		off -= s.n
		s = w.more[i]
	}
	if off+n > s.n {
		return nil, false
	}
	return s.bytes()[off : off+n], true
}

// gather copies the message bytes [off, off+len(dst)) into dst.
func (w *sendWQE) gather(dst []byte, off int) {
	if w.flags&SendInline != 0 {
		copy(dst, w.inline[off:])
		return
	}
	gather(w.first, w.more, dst, off)
}

// scatter copies src into the message's local buffers at offset off (READ
// responses and atomic results).
func (w *sendWQE) scatter(src []byte, off int) { scatter(w.first, w.more, src, off) }

func (w *sendWQE) packets(mtu int) int {
	if w.op.isAtomic() || w.length == 0 {
		return 1
	}
	return (w.length + mtu - 1) / mtu
}

func (w *sendWQE) lastPSN() uint32 { return psnAdd(w.psn, w.npsn-1) }

// sendQueue is a QP's ring of posted send work requests, a power of two
// long, growing to hold max. The QP owns it, under qp.mu: PostSend adds
// at tail, the sender moves next, retiring moves head.
type sendQueue struct {
	ring             []sendWQE
	head, next, tail uint64 // complete < head <= next (being sent) <= tail
	max              int
}

func (q *sendQueue) init(max int) { *q = sendQueue{max: max} }

func (q *sendQueue) slot(i uint64) *sendWQE { return &q.ring[i&uint64(len(q.ring)-1)] }

// posted is how many work requests are posted and not yet complete.
func (q *sendQueue) posted() int { return int(q.tail - q.head) }

// reserve returns a cleared slot at the tail, growing the ring if needed;
// the slot is posted once tail moves past it.
func (q *sendQueue) reserve() *sendWQE {
	if q.posted() == len(q.ring) {
		size := max(4, 2*len(q.ring))
		size = min(size, 1<<bits.Len(uint(q.max)))
		ring := make([]sendWQE, size)
		for i := q.head; i < q.tail; i++ {
			ring[i&uint64(size-1)] = *q.slot(i)
		}
		q.ring = ring
	}
	w := q.slot(q.tail)
	more, inline := w.more[:0], w.inline[:0]
	*w = sendWQE{more: more, inline: inline}
	return w
}

// popHead retires the work request at the head, letting go of the
// memory it referred to, and returns it.
func (q *sendQueue) popHead() *sendWQE {
	w := q.slot(q.head)
	w.first, w.ud = span{}, udDest{}
	clear(w.more)
	q.head++
	return w
}

// find returns the work request that psn belongs to, among those that
// have PSNs.
func (q *sendQueue) find(psn uint32) *sendWQE {
	for i := q.head; i < q.tail; i++ {
		w := q.slot(i)
		if !w.assigned {
			break
		}
		if psnDiff(psn, w.psn) >= 0 && psnDiff(psn, w.lastPSN()) <= 0 {
			return w
		}
	}
	return nil
}

// PostSend posts send work requests (ibv_post_send). On error the requests
// before the bad one are posted and the error names the bad one.
func (qp *QP) PostSend(wrs ...SendWR) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	switch qp.state {
	case QPSRTS, QPSSQD, QPSSQE, QPSErr:
	default:
		return statef("post send: QP %#x is in %v", qp.qpn, qp.state)
	}
	var err error
	for i := range wrs {
		if err = qp.postOne(&wrs[i]); err != nil {
			err = fmt.Errorf("work request %d: %w", i, err)
			break
		}
	}
	if qp.state == QPSErr {
		qp.req.flush(qp)
	} else {
		qp.kick()
	}
	return err
}

func (qp *QP) postOne(wr *SendWR) error {
	const op = "post send"
	q := &qp.sq
	if wr.Opcode > WRAtomicFetchAndAdd {
		return invalidf("%s: unknown opcode %d", op, wr.Opcode)
	}
	if qp.typ == UD && !wr.Opcode.isSend() {
		return invalidf("%s: %v on a UD QP", op, wr.Opcode)
	}
	if q.posted() >= qp.cap.MaxSendWR {
		return fmt.Errorf("vroce: %s: %d outstanding: %w", op, qp.cap.MaxSendWR, ErrQueueFull)
	}
	if err := checkLimit(op, "max_send_sge", len(wr.SGL), qp.cap.MaxSendSGE); err != nil {
		return err
	}
	inline := wr.Flags&SendInline != 0
	if inline {
		if wr.Opcode.awaitsResponse() {
			return invalidf("%s: %v cannot be inline", op, wr.Opcode)
		}
		if err := checkLimit(op, "max_inline_data", len(wr.Inline), qp.cap.MaxInlineData); err != nil {
			return err
		}
	}
	w := q.reserve()
	w.id, w.op, w.flags, w.imm = wr.ID, wr.Opcode, wr.Flags, wr.Imm
	w.signaled = qp.sigAll || wr.Flags&SendSignaled != 0
	w.raddr, w.rkey, w.cmpAdd, w.swap = wr.RemoteAddr, wr.RKey, wr.CompareAdd, wr.Swap
	if inline {
		w.inline = append(w.inline, wr.Inline...)
		w.length = len(wr.Inline)
	} else {
		need := Access(0)
		if wr.Opcode.awaitsResponse() {
			need = AccessLocalWrite
		}
		for i, sge := range wr.SGL {
			s, ok := qp.dev.lookupLocal(sge.LKey, qp.pd, need, sge.Addr, uint64(sge.Length))
			if !ok {
				return invalidf("%s: SGE %d (lkey %#x, addr %#x, length %d) is not registered memory of this PD with the access it needs", op, i, sge.LKey, sge.Addr, sge.Length)
			}
			if i == 0 {
				w.first = s
			} else {
				w.more = append(w.more, s)
			}
			w.length += s.n
		}
	}
	switch {
	case w.length > qp.dev.attr.MaxMsgSize:
		return checkLimit(op, "max_msg_sz", w.length, qp.dev.attr.MaxMsgSize)
	case wr.Opcode.isAtomic() && (w.length != 8 || wr.RemoteAddr%8 != 0):
		return invalidf("%s: %v needs one 8-byte local buffer and an 8-byte aligned remote address", op, wr.Opcode)
	case qp.typ == UD:
		if err := qp.resolveUD(w, wr); err != nil {
			return err
		}
	}
	q.tail++
	return nil
}

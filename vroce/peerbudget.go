package vroce

import (
	"net/netip"
	"sync"
	"sync/atomic"

	"vroce.dev/internal/fifo"
)

// A peer budget bounds what all of a device's RC QPs to one peer address
// keep in flight together. Each QP's window is sized for the path, but
// the QPs to one peer land in one receiving socket, whose buffer is the
// bottleneck they share and none of them sees: 200 streams from one
// process to another, each within its window, overran the receiver's
// 8 MiB socket buffer (RcvbufErrors), and since every QP lost its tail
// at once, the losses were timeouts (41 MiB/s against 1,500 with 2
// streams). The budget is flow control, not congestion control: it
// assumes of the peer what this device asks of its own socket (a vRoCE
// peer's udp provider asks for the same 8 MiB) and leaves the path to
// the windows.
//
// Packets are charged their MTU plus an allowance for the kernel's
// per-datagram overhead (the socket buffer counts an skb's truesize, not
// its payload), so small packets do not overrun it by their number.
const (
	peerBudgetBytes  = 4 << 20 // half the receiver's socket buffer
	peerPacketExtra  = 1 << 10 // truesize beyond the payload, per datagram
	minPeerBudgetPkt = 64      // a peer's share is never under this many packets
)

// peerCost is what one packet of a QP with path MTU mtu is charged.
func peerCost(mtu int) int64 { return int64(mtu + peerPacketExtra) }

// peerLimit is the budget in charged bytes for packets of mtu: at least
// minPeerBudgetPkt of them, whatever the MTU.
func peerLimit(mtu int) int64 { return max(peerBudgetBytes, minPeerBudgetPkt*peerCost(mtu)) }

// peerBudget is one peer's budget. A QP that finds it spent queues itself
// and stops sending; a QP whose ACKs give some back wakes queued ones
// (through the timer goroutine, since it holds its own QP's lock) for as
// much room as the budget has.
//
// A queued QP may be admitted before it is woken (its own ACK pumps it
// again): its entry goes stale rather than being searched for. Each entry
// carries the ticket the QP held when it queued, and the QP's ticket is
// zero once it is admitted or woken, so a waker skips stale entries
// without counting them against the room.
type peerBudget struct {
	addr    netip.AddrPort
	charged atomic.Int64 // bytes charged by packets in flight
	queued  atomic.Int32 // len(waiting), read without mu by whoever gives back
	rtt     peerRTT      // what the peer's QPs measure of it

	mu      sync.Mutex // guards everything below
	waiting fifo.Queue[budgetWaiter]
	tickets uint64 // the last ticket handed out
	users   int    // QPs that joined and have not left
}

// budgetWaiter is a queued QP with its ticket and what its next packet
// costs against which limit (its MTU is its own lock's to read).
type budgetWaiter struct {
	qp          *QP
	ticket      uint64
	cost, limit int64
}

// peerBudgets are a device's budgets by peer address, created with a
// peer's first QP and dropped with its last.
type peerBudgets struct {
	mu sync.Mutex // guards m
	m  map[netip.AddrPort]*peerBudget
}

func (p *peerBudgets) join(addr netip.AddrPort) *peerBudget {
	p.mu.Lock()
	defer p.mu.Unlock()
	b := p.m[addr]
	if b == nil {
		if p.m == nil {
			p.m = map[netip.AddrPort]*peerBudget{}
		}
		b = &peerBudget{addr: addr}
		p.m[addr] = b
	}
	b.mu.Lock()
	b.users++
	b.mu.Unlock()
	return b
}

// leave drops qp's use of b, which holds no charge of qp's any more.
func (p *peerBudgets) leave(b *peerBudget, qp *QP) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b.mu.Lock()
	b.users--
	if qp.req.peerTicket.Swap(0) != 0 {
		b.waiting.RemoveFunc(func(w budgetWaiter) bool { return w.qp == qp })
		b.queued.Store(int32(b.waiting.Len()))
	}
	last := b.users == 0
	b.mu.Unlock()
	if last {
		delete(p.m, b.addr)
	}
}

// fits reports whether n more bytes fit within limit now.
func (b *peerBudget) fits(n, limit int64) bool { return b.charged.Load()+n <= limit }

// admit reports whether a packet costing cost may leave now, within
// limit. If not, qp is queued to be woken when the budget has room.
func (b *peerBudget) admit(qp *QP, cost, limit int64) bool {
	ticket := &qp.req.peerTicket
	if b.fits(cost, limit) {
		if ticket.Load() != 0 {
			ticket.Store(0) // its entry is stale now
		}
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ticket.Load() == 0 {
		b.tickets++
		ticket.Store(b.tickets)
		b.waiting.Push(budgetWaiter{qp: qp, ticket: b.tickets, cost: cost, limit: limit})
		b.queued.Store(int32(b.waiting.Len()))
	}
	// Whoever gave back since the first look may have found nobody
	// queued: look again now that qp is.
	if b.fits(cost, limit) {
		ticket.Store(0)
		return true
	}
	return false
}

// qpWaker has the timer goroutine pump a QP; *Device is one.
type qpWaker interface{ wake(qp *QP, now int64) }

// charge adds delta to what is in flight. A negative delta gives budget
// back and wakes queued QPs for the room there is, charging each the
// packet it waits to send (reserve): room only promised was taken, in
// the time the wake took, by QPs sending without queueing, and the woken
// QP queued again; with 10,000 streams to one peer that was three to
// five wakes (through the timer goroutine) per packet.
func (b *peerBudget) charge(delta int64, d qpWaker, now int64) {
	b.charged.Add(delta)
	if delta >= 0 || b.queued.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.waiting.Len() > 0 {
		w := b.waiting.Front()
		if w.qp.req.peerTicket.Load() != w.ticket {
			b.waiting.Pop() // stale: admitted since, or left
			continue
		}
		if !b.fits(w.cost, w.limit) {
			break
		}
		if w.qp.req.peerTicket.CompareAndSwap(w.ticket, 0) {
			b.reserve(w.qp, w.cost)
			d.wake(w.qp, now)
		}
		b.waiting.Pop()
	}
	b.queued.Store(int32(b.waiting.Len()))
}

// reserve charges cost for qp's next packet before qp runs: the QP takes
// it as its own charge when it next asks (requester.peerAdmits), and
// settlePeer gives back what it then does not send.
func (b *peerBudget) reserve(qp *QP, cost int64) {
	b.charged.Add(cost)
	qp.req.peerReserved.Add(cost)
}

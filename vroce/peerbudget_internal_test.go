package vroce

import (
	"net/netip"
	"testing"
)

// wakes records what a budget schedules.
type wakes []*QP

func (w *wakes) wake(qp *QP, _ int64) { *w = append(*w, qp) }

func TestPeerBudgetQueuesAndWakesForTheRoomGivenBack(t *testing.T) {
	const cost, limit = 10, 30
	var peers peerBudgets
	addr := netip.MustParseAddrPort("10.0.0.2:4791")
	qps := make([]*QP, 5)
	for i := range qps {
		qps[i] = &QP{}
	}
	b := peers.join(addr)
	for range qps[1:] {
		peers.join(addr)
	}
	var w wakes
	b.charge(3*cost, &w, 0) // QP 0 fills the budget
	for _, qp := range qps[1:4] {
		if b.admit(qp, cost, limit) {
			t.Fatal("admitted past the limit")
		}
	}
	if b.admit(qps[1], cost, limit) || b.waiting.Len() != 3 {
		t.Fatalf("a QP refused twice is queued once: %d queued", b.waiting.Len())
	}
	b.charge(-cost, &w, 0)
	if len(w) != 1 || w[0] != qps[1] {
		t.Fatalf("one packet's room given back woke %d QPs, want the first queued", len(w))
	}
	if qps[1].req.peerTicket.Load() != 0 {
		t.Fatal("a woken QP still holds its ticket")
	}
	// The room is QP 1's until it sends: reserved, charged already, so a
	// QP that sends without queueing cannot take it in the meantime.
	if got := qps[1].req.peerReserved.Load(); got != cost || b.charged.Load() != 3*cost {
		t.Fatalf("reserved %d for the woken QP, %d charged; want %d and %d", got, b.charged.Load(), cost, 3*cost)
	}
	if b.admit(qps[2], cost, limit) {
		t.Fatal("QP 2 took the room reserved for QP 1")
	}
	qps[1].req.peerReserved.Store(0) // QP 1 sent: the charge is its own now
	w = w[:0]
	b.charge(-3*cost, &w, 0)
	if len(w) != 2 || w[0] != qps[2] || w[1] != qps[3] {
		t.Fatalf("woke %v, want QPs 2 and 3 in their order", w)
	}
	if b.waiting.Len() != 0 {
		t.Fatalf("%d entries left queued", b.waiting.Len())
	}
	// A QP admitted on its own while queued (its ACK pumped it, in room
	// the front of the queue is too large for) leaves a stale entry,
	// skipped at the next wake.
	qps[2].req.peerReserved.Store(0)
	qps[3].req.peerReserved.Store(0) // both sent: charged 2 x cost
	b.charge(cost, &w, 0)            // 30: full
	w = w[:0]
	if b.admit(qps[1], 2*cost, limit) || b.admit(qps[2], cost, limit) {
		t.Fatal("admitted past the limit")
	}
	b.charge(-cost, &w, 0) // room for one small packet: QP 1 (2 x cost) is too large for it
	if len(w) != 0 {
		t.Fatalf("woke %v for room the first in line cannot use", w)
	}
	if !b.admit(qps[2], cost, limit) {
		t.Fatal("refused with room")
	}
	b.charge(cost, &w, 0)
	b.charge(-3*cost, &w, 0)
	if len(w) != 1 || w[0] != qps[1] {
		t.Fatalf("woke %v, want QP 1 and QP 2's stale entry skipped", w)
	}
	if b.waiting.Len() != 0 {
		t.Fatalf("%d entries left queued", b.waiting.Len())
	}
	qps[1].req.peerReserved.Store(0) // QP 1 sent: 2 x cost in flight
	// A QP that leaves while queued is never woken.
	b.charge(cost, &w, 0)
	w = w[:0]
	if b.admit(qps[4], cost, limit) {
		t.Fatal("admitted past the limit")
	}
	peers.leave(b, qps[4])
	b.charge(-3*cost, &w, 0)
	if len(w) != 0 {
		t.Fatalf("woke a QP that left: %v", w)
	}
	for range qps[:4] {
		peers.leave(b, &QP{})
	}
	if len(peers.m) != 0 {
		t.Fatalf("the budget outlived its last QP: %d left", len(peers.m))
	}
}

func TestPeerLimitHoldsSmallAndLargePackets(t *testing.T) {
	if n := peerLimit(1024) / peerCost(1024); n < 1024 {
		t.Fatalf("a 1 KiB-MTU peer gets %d packets, fewer than one QP's largest window", n)
	}
	if n := peerLimit(32768) / peerCost(32768); n < minPeerBudgetPkt {
		t.Fatalf("a 32 KiB-MTU peer gets %d packets", n)
	}
	if peerLimit(1024) > 8<<20/2 {
		t.Fatal("more than half the peer's 8 MiB socket buffer")
	}
}

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
	// QP 2 is admitted on its own (its ACK pumped it) in the room QP 1
	// was woken for: its entry is stale, and costs QP 3 nothing.
	if !b.admit(qps[2], cost, limit) {
		t.Fatal("refused with room")
	}
	b.charge(cost, &w, 0)
	w = w[:0]
	b.charge(-cost, &w, 0)
	if len(w) != 1 || w[0] != qps[3] {
		t.Fatalf("woke %v, want QP 3 after skipping QP 2's stale entry", w)
	}
	if b.waiting.Len() != 0 {
		t.Fatalf("%d entries left queued", b.waiting.Len())
	}
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

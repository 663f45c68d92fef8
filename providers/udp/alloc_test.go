package udp

import (
	"runtime"
	"testing"

	"vroce.dev/internal/providertest"
	"vroce.dev/vroce"
)

// TestNoAllocationPerPacket: a steady stream of batches, coalesced and
// not, sent and received between two providers, allocates nothing per
// packet (x/net's receive allocated an address for each).
func TestNoAllocationPerPacket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("recvmmsg without allocation is Linux's")
	}
	tx, rx := providerPair(t)
	out := make([]vroce.Packet, 32)
	for i := range out {
		out[i] = vroce.Packet{Data: make([]byte, 1000), Addr: rx.LocalAddr(), Coalesce: i%8 != 7}
	}
	// Zero without the race detector. With it, sync.Pool (inside x/net's
	// send path) drops what it is given a quarter of the time, which costs
	// an allocation or two a batch; one per datagram (eight here) or per
	// packet would still fail.
	limit := 0.0
	if raceEnabled {
		limit = 3
	}
	if a := providertest.AllocsPerBatch(t, tx, rx, out); a > limit {
		t.Fatalf("%.1f allocations per batch of %d packets", a, len(out))
	}
}

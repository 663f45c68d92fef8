package udp

import (
	"runtime"
	"testing"

	"vroce.dev/internal/testkit/providertest"
	"vroce.dev/vroce"
)

// TestNoAllocationPerPacket: a steady stream of batches, coalesced and
// not, sent and received between two providers, allocates nothing (x/net's
// receive allocated an address for each datagram, and its send path's
// sync.Pool allocated now and then under the race detector).
func TestNoAllocationPerPacket(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("recvmmsg and sendmmsg without allocation are Linux's")
	}
	tx, rx := providerPair(t)
	out := make([]vroce.Packet, 32)
	for i := range out {
		out[i] = vroce.Packet{Data: make([]byte, 1000), Addr: rx.LocalAddr(), Coalesce: i%8 != 7}
	}
	if a := providertest.AllocsPerBatch(t, tx, rx, out); a > 0 {
		t.Fatalf("%.1f allocations per batch of %d packets", a, len(out))
	}
}

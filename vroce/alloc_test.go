package vroce_test

import (
	"context"
	"testing"

	"vroce.dev/internal/testkit/race"
	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

// TestVerbsPingPongNoAllocationPerRoundTrip: a steady 64-byte SEND ping-pong,
// each end waiting in CQ.PollWait (and so receiving for its device while
// it waits), allocates nothing per round trip anywhere in the process.
func TestVerbsPingPongNoAllocationPerRoundTrip(t *testing.T) {
	a, peer, _ := simPair(t, defaultOpts())
	ctx := context.Background()
	msg := make([]byte, 64)
	send := vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: msg}
	recvOf := func(n *node) vroce.RecvWR { return vroce.RecvWR{SGL: []vroce.SGE{n.MR.SGE(0, 64)}} }
	aRecv, peerRecv := recvOf(a), recvOf(peer)
	const warm, rounds = 200, 1000
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.QP.PostRecv(aRecv))
	must(peer.QP.PostRecv(peerRecv))
	echoed := make(chan error, 1)
	go func() { // the peer answers every ping, a PollWait each
		wc := make([]vroce.WorkCompletion, 1)
		for range warm + rounds + 1 { // AllocsPerRun runs its function once more to warm up
			if err := verbstest.AwaitRecv(ctx, peer, wc); err != nil {
				echoed <- err
				return
			}
			if err := peer.QP.PostRecv(peerRecv); err != nil {
				echoed <- err
				return
			}
			if err := peer.QP.PostSend(send); err != nil {
				echoed <- err
				return
			}
		}
		echoed <- nil
	}()
	wc := make([]vroce.WorkCompletion, 1)
	round := func() {
		must(a.QP.PostSend(send))
		must(verbstest.AwaitRecv(ctx, a, wc))
		must(a.QP.PostRecv(aRecv))
	}
	for range warm { // queues, pools and timers reach their size
		round()
	}
	// With the race detector, sync.Pool drops what it is given a quarter
	// of the time on purpose; make test runs this again without it.
	limit := 0.0
	if race.Enabled {
		limit = 20
	}
	if n := testing.AllocsPerRun(rounds, round); n > limit {
		t.Errorf("%.2f allocations per round trip", n)
	}
	must(<-echoed)
}

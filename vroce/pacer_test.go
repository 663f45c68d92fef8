package vroce

import (
	"context"
	"testing"
	"time"
)

// TestPacedPumpWithNothingInFlightIsWoken: a small window paces the pump;
// when it stops with nothing in flight, the pacer's deadline must still
// wake it (once it did not, and the QP hung forever).
func TestPacedPumpWithNothingInFlightIsWoken(t *testing.T) {
	a, b := pipeQPs(t)
	da := a.dev
	for i := 0; i < 8; i++ {
		if err := b.qp.PostRecv(RecvWR{ID: uint64(i), SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	// A window of 2 with an RTT of 20 ms and no tokens: every packet
	// waits for the pacer, and nothing is in flight when the pump stops.
	a.qp.mu.Lock()
	a.qp.req.cc.cwnd, a.qp.req.cc.slowStart = 2, false
	a.qp.req.cc.tokens, a.qp.req.cc.tokensAt = 0, da.now()
	a.qp.req.rec.rtt.SRTT, a.qp.req.rec.rtt.MinRTT = 20_000_000, 20_000_000
	a.qp.mu.Unlock()
	for i := 0; i < 4; i++ {
		if err := a.qp.PostSend(SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled | SendInline, Inline: []byte("paced")}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]WorkCompletion, 4)
	for got := 0; got < 4; {
		n, err := a.cq.PollWait(ctx, wc)
		if err != nil {
			t.Fatalf("after %d of 4 paced sends: %v", got, err)
		}
		got += n
	}
}

package vroce

import (
	"context"
	"net/netip"
	"sync/atomic"
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
	a.qp.req.cc.pacer = tokenBucket{tokens: 0, at: da.now()}
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

// TestARetryIsNotHeldByThePacer: a QP whose window is one packet and
// whose SRTT is 2 s (a host that stalled) may send a packet every 2 s,
// but its ACK timeout is 67 ms and it fails after retry_cnt + 1 of them,
// 536 ms, without progress. Its first packet is lost: the retry must
// leave at the timeout, not when the pacer next has a token. (It waited
// for the pacer, and the QP failed with "retry exceeded" having retried
// nothing: 32 QPs sending into a 2-receive SRQ on a loaded host, whose
// RNR waits and stalls had grown their SRTTs to 600 ms.)
func TestARetryIsNotHeldByThePacer(t *testing.T) {
	a, b := pipeQPsWith(t, func(p *pipeProvider) Provider {
		if p.addr == netip.MustParseAddrPort("127.0.0.1:4791") {
			return &losesFirst{pipeProvider: p}
		}
		return p
	})
	if err := b.qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{b.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	a.qp.mu.Lock()
	a.qp.req.cc.cwnd, a.qp.req.cc.slowStart = 1, false
	a.qp.req.cc.pacer = tokenBucket{tokens: 1, at: a.dev.now()} // the first packet's, and no more
	a.qp.req.rec.rtt.SRTT, a.qp.req.rec.rtt.MinRTT = int64(2*time.Second), int64(2*time.Second)
	a.qp.mu.Unlock()
	if err := a.qp.PostSend(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled | SendInline, Inline: []byte("lost once")}); err != nil {
		t.Fatal(err)
	}
	wc := nextCompletion(t, a.cq)
	if wc.Status != WCSuccess {
		t.Fatalf("the SEND completed with %v (%+v)", wc.Status, a.qp.Stats())
	}
	if s := a.qp.Stats(); s.Retransmits == 0 {
		t.Fatalf("the SEND completed without a retry, though its first packet was lost: %+v", s)
	}
}

// losesFirst is a pipe that loses the first packet sent through it.
type losesFirst struct {
	*pipeProvider
	lost atomic.Bool
}

func (p *losesFirst) Send(pkts []Packet) error {
	if len(pkts) > 0 && !p.lost.Swap(true) {
		pkts = pkts[1:]
	}
	return p.pipeProvider.Send(pkts)
}

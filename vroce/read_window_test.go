package vroce

import (
	"bytes"
	"testing"
)

// A READ asks for no more responses than the window has room for. Its
// responses are the flow's data: a request for a whole 64-packet chunk
// under a window of one (after timeouts, on a receiver that was overrun)
// sent the responder's burst straight back into the overrun.
func TestReadRequestsStayInTheWindow(t *testing.T) {
	a, b := pipeQPs(t)
	const packets = 4 // at the pipe's 1 KiB path MTU
	src := bytes.Repeat([]byte("window"), packets*1024/6+1)[:packets*1024]
	remote, err := b.qp.pd.RegMR(src, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	local, err := a.qp.pd.RegMR(make([]byte, len(src)), AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// A window of one with a short RTT: the pacer lets each request go
	// soon, one at a time.
	a.qp.mu.Lock()
	a.qp.req.cc.cwnd, a.qp.req.cc.slowStart = 1, false
	a.qp.req.rec.rtt.SRTT, a.qp.req.rec.rtt.MinRTT = 20_000, 20_000
	requests := a.qp.stats.TxPackets
	a.qp.mu.Unlock()
	err = a.qp.PostSend(SendWR{ID: 1, Opcode: WRRDMARead, Flags: SendSignaled, SGL: []SGE{local.SGE(0, len(src))}, RemoteAddr: remote.Addr(), RKey: remote.RKey()})
	if err != nil {
		t.Fatal(err)
	}
	wc := nextCompletion(t, a.cq)
	if wc.Status != WCSuccess || !bytes.Equal(local.Bytes(), src) {
		t.Fatalf("READ: %v, data equal: %v", wc.Status, bytes.Equal(local.Bytes(), src))
	}
	a.qp.mu.Lock()
	requests = a.qp.stats.TxPackets - requests
	a.qp.mu.Unlock()
	// The window may have grown as responses came, but a first request
	// for all four would have been one packet.
	if requests < 2 {
		t.Fatalf("a %d-packet READ under a window of one went as %d request(s)", packets, requests)
	}
}

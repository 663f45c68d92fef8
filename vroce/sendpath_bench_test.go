package vroce

import (
	"net"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// discardProvider counts what it is handed and sends nothing: the send
// path's user-space cost without the kernel's.
type discardProvider struct {
	done    chan struct{}
	packets atomic.Int64 // the timer's goroutine sends too (a probe)
}

func (p *discardProvider) Recv([]Packet) (int, error) { <-p.done; return 0, net.ErrClosed }
func (p *discardProvider) Send(pkts []Packet) error   { p.packets.Add(int64(len(pkts))); return nil }
func (p *discardProvider) LocalAddr() netip.AddrPort {
	return netip.MustParseAddrPort("127.0.0.1:4791")
}
func (p *discardProvider) MTU() int       { return 1500 }
func (p *discardProvider) BatchSize() int { return 64 }
func (p *discardProvider) Close() error   { close(p.done); return nil }

// BenchmarkSendPath64KiBAt1344 is the requester's user-space work for a
// 64 KiB RDMA WRITE in 1344-byte packets, a 1500-byte link's, each
// message acknowledged whole once it has left: building, sealing and
// batching its packets, then the ACK's retirement and completion. It
// reports the cost a packet, the figure the bulk sender at MTU 1500 pays
// about 49 times a message.
func BenchmarkSendPath64KiBAt1344(b *testing.B) {
	sink := &discardProvider{done: make(chan struct{})}
	qp, cq, mr := rtsQP(b, sink, MTU1344, false)
	d := qp.dev
	qp.mu.Lock()
	qp.req.cc.cwnd, qp.req.cc.slowStart = maxWindow, false
	qp.mu.Unlock()

	wr := SendWR{Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, 64<<10)}, RemoteAddr: 0x1000, RKey: 7}
	wcs := make([]WorkCompletion, 16)
	perMessage := (64<<10 + int(MTU1344) - 1) / int(MTU1344)
	psn := uint32(benchSQPSN)
	b.SetBytes(64 << 10)
	b.ResetTimer()
	for i := range b.N {
		wr.ID = uint64(i)
		wr.Flags = 0
		if i%16 == 15 {
			wr.Flags = SendSignaled
		}
		require.NoError(b, qp.PostSend(wr))
		psn = psnAdd(psn, perMessage)
		qp.mu.Lock()
		// The ACK as it comes back from a responder that took the whole
		// message; the window stays open whatever its RTT sample says.
		qp.req.onAck(qp, ack{psn: psnAdd(psn, -1), aeth: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: uint32(i + 1)}}, d.now())
		qp.req.cc.cwnd = maxWindow
		qp.mu.Unlock()
		if i%16 == 15 {
			for {
				n, err := cq.Poll(wcs)
				require.NoError(b, err)
				if n == 0 {
					break
				}
			}
		}
	}
	b.StopTimer()
	// Every packet of every message left; a tail probe or two may have
	// too, when the device's timer ran while the benchmark was held up.
	sent := int(sink.packets.Load())
	require.GreaterOrEqual(b, sent, b.N*perMessage)
	require.LessOrEqual(b, sent, b.N*perMessage*101/100)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perMessage), "ns/packet")
}

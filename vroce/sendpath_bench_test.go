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

// BenchmarkReceivePath64KiBAt1344 is the responder's user-space work for
// a 64 KiB SEND in 1344-byte packets into a receive posted for it:
// parsing and checking each packet, placing its payload, the message's
// completion and the batch's ACK. It reports the cost a packet, which a
// stream's receiver at MTU 1500 pays about 49 times a message. The same
// sealed packets arrive again for each message, the QP told to expect
// their PSNs anew.
func BenchmarkReceivePath64KiBAt1344(b *testing.B) {
	sink := &discardProvider{done: make(chan struct{})}
	qp, cq, mr := rtsQP(b, sink, MTU1344, false)
	d := qp.dev
	const size = 64 << 10
	mtu := int(MTU1344)
	var pkts []Packet
	for off, psn := 0, uint32(benchRQPSN); off < size; off, psn = off+mtu, psn+1 {
		n := min(mtu, size-off)
		p := wire.Packet{BTH: wire.BTH{Opcode: requestOpcode(WRSend, off == 0, off+n >= size), PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: psn, AckReq: off+n >= size}, Payload: make([]byte, n)}
		for i := range p.Payload {
			p.Payload[i] = byte(off + i)
		}
		buf := make([]byte, wire.Len(p.BTH.Opcode, n))
		_, err := p.Encode(buf)
		require.NoError(b, err)
		require.True(b, (wire.Flow{Src: benchPeer, Dst: d.local}).Seal(buf))
		pkts = append(pkts, Packet{Data: buf, Addr: benchPeer})
	}
	batch := make([]Packet, len(pkts))
	rx := &rxBatch{out: d.getBatch()}
	wcs := make([]WorkCompletion, 4)
	b.SetBytes(size)
	b.ResetTimer()
	for range b.N {
		require.NoError(b, qp.PostRecv(RecvWR{SGL: []SGE{mr.SGE(0, size)}}))
		qp.mu.Lock()
		qp.resp.ePSN = benchRQPSN
		qp.mu.Unlock()
		for i := 0; i < len(pkts); i += 16 { // batches as recvmmsg hands them over
			n := copy(batch, pkts[i:min(i+16, len(pkts))])
			d.handleBatch(batch[:n], rx)
			d.settle(rx, false)
		}
		n, err := cq.Poll(wcs)
		require.NoError(b, err)
		require.Equal(b, 1, n)
		require.Equal(b, WCSuccess, wcs[0].Status)
	}
	b.StopTimer()
	require.Equal(b, byte((size-1)%256), mr.Bytes()[size-1], "the payload was placed")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(pkts)), "ns/packet")
}

// BenchmarkPingPongTurn64 is one end's user-space work for a turn of a
// 64-byte SEND ping-pong between vRoCE peers (vroce-perf send_lat): the
// peer's SEND arrives in a receive batch of its own, carrying the ACK of
// our last SEND; its completion is polled and the receive posted again;
// our answer is posted and leaves. The kernel's part and the wake-ups
// are not in it.
func BenchmarkPingPongTurn64(b *testing.B) {
	sink := &discardProvider{done: make(chan struct{})}
	qp, cq, mr := rtsQP(b, sink, MTU1024, true)
	d := qp.dev
	const size = 64
	pkts := make([]Packet, b.N)
	for i := range pkts {
		p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: psnAdd(benchRQPSN, i), PiggyACK: i > 0},
			Payload: make([]byte, size)}
		if i > 0 {
			p.Piggy = wire.PiggyACK{PSN: psnAdd(benchSQPSN, i-1), AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits, MSN: uint32(i)}}
		}
		buf := make([]byte, wire.Len(p.BTH.Opcode, size)+wire.PiggyACKLen)
		n, err := p.Encode(buf)
		if err != nil || !(wire.Flow{Src: benchPeer, Dst: d.local}).Seal(buf[:n]) {
			b.Fatal("encoding", err)
		}
		pkts[i] = Packet{Data: buf[:n], Addr: benchPeer}
	}
	rx := &rxBatch{out: d.getBatch()}
	defer d.putBatch(rx.out)
	wcs := make([]WorkCompletion, 4)
	recv := RecvWR{SGL: []SGE{mr.SGE(0, size)}}
	send := SendWR{Opcode: WRSend, SGL: []SGE{mr.SGE(4096, size)}}
	require.NoError(b, qp.PostRecv(recv))
	b.ResetTimer()
	// No testify in the loop: its Helper calls cost more than the turn.
	for i := range b.N {
		d.handleBatch(pkts[i:i+1], rx)
		d.settle(rx, false)
		got := false
		for !got {
			n, err := cq.Poll(wcs)
			if err != nil {
				b.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != WCSuccess {
					b.Fatalf("turn %d: %v", i, wc.Status)
				}
				got = got || wc.Opcode == WCRecv
			}
		}
		if err := qp.PostRecv(recv); err != nil {
			b.Fatal(err)
		}
		send.ID, send.Flags = uint64(i), 0
		if i%16 == 15 {
			send.Flags = SendSignaled
		}
		if err := qp.PostSend(send); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	require.GreaterOrEqual(b, int(sink.packets.Load()), b.N, "every answer left")
}

package vroce_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
	"vroce.dev/vroce/wire"
)

// fakePeer is the far end of a QP, played by hand on the sim network: it
// reads the QP's requests at the peer's device address and answers from a
// port of its own choosing, as any RoCEv2 peer may.
type fakePeer struct {
	*rxeLike
	ep *sim.Endpoint
	qp *vroce.QP
	cq *vroce.CQ
	mr *vroce.MR
}

var (
	fakeDevice = netip.MustParseAddrPort("10.0.0.1:4791")
	fakeSource = netip.MustParseAddrPort("10.0.0.1:49441")
)

func newFakePeer(t *testing.T) *fakePeer {
	t.Helper()
	network, ep := fakePeerNetwork(t, sim.Config{})
	qp, cq, mr := rcQPTo(t, network, fakeDevice, false)
	return &fakePeer{rxeLike: &rxeLike{t: t, network: network}, ep: ep, qp: qp, cq: cq, mr: mr}
}

// fakePeerNetwork is a sim network of cfg with the fake peer's device
// attached to it, both closed when the test ends.
func fakePeerNetwork(t *testing.T, cfg sim.Config) (*sim.Network, *sim.Endpoint) {
	t.Helper()
	network := sim.NewNetwork(cfg)
	t.Cleanup(network.Close)
	ep, err := network.Attach(fakeDevice)
	require.NoError(t, err)
	t.Cleanup(func() { ep.Close() })
	return network, ep
}

// request reads the next request the QP sent.
func (f *fakePeer) request() wire.Packet {
	f.t.Helper()
	pkts := []vroce.Packet{{Data: make([]byte, vroce.MaxPacketSize)}}
	n, err := f.ep.Recv(pkts)
	require.NoError(f.t, err)
	require.Equal(f.t, 1, n)
	var p wire.Packet
	require.NoError(f.t, wire.Parse(&p, pkts[0].Data))
	return p
}

// answer sends an RC_ACKNOWLEDGE with syndrome syn for psn.
func (f *fakePeer) answer(psn uint32, syn wire.Syndrome) {
	f.t.Helper()
	f.send(fakeSource, f.qp, 0x2a, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: psn}, AETH: wire.AETH{Syndrome: syn, MSN: 1}})
}

// postSend posts a signaled 64-byte SEND and returns the request's PSN as
// the peer saw it.
func (f *fakePeer) postSend() uint32 {
	f.t.Helper()
	require.NoError(f.t, f.qp.PostSend(vroce.SendWR{ID: 9, Opcode: vroce.WRSend, Flags: vroce.SendSignaled, SGL: []vroce.SGE{f.mr.SGE(0, 64)}}))
	return f.request().BTH.PSN
}

// completion waits for the next send completion.
func (f *fakePeer) completion() vroce.WorkCompletion {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]vroce.WorkCompletion, 1)
	_, err := f.cq.PollWait(ctx, wc)
	require.NoError(f.t, err)
	return wc[0]
}

// TestForgedResponsesAreDropped: a response must name a request in flight
// (rxe's check_psn). A NAK, an RNR NAK or a sequence NAK for a PSN never
// sent, or long acknowledged, is counted and dropped: the QP stays in RTS,
// nothing is resent or stalled. The positive control: the same response
// naming the request in flight acts.
func TestForgedResponsesAreDropped(t *testing.T) {
	cases := []struct {
		name    string
		syn     wire.Syndrome
		control func(t *testing.T, f *fakePeer, psn uint32)
	}{
		{"remote access NAK", wire.NAK(wire.NAKRemoteAccessError), func(t *testing.T, f *fakePeer, psn uint32) {
			f.answer(psn, wire.NAK(wire.NAKRemoteAccessError))
			assert.Equal(t, vroce.WCRemAccessErr, f.completion().Status)
			assert.Equal(t, vroce.QPSErr, f.qp.State())
		}},
		{"invalid request NAK", wire.NAK(wire.NAKInvalidRequest), func(t *testing.T, f *fakePeer, psn uint32) {
			f.answer(psn, wire.NAK(wire.NAKInvalidRequest))
			assert.Equal(t, vroce.WCRemInvReqErr, f.completion().Status)
		}},
		{"RNR NAK", wire.RNRNAK(20), func(t *testing.T, f *fakePeer, psn uint32) {
			f.answer(psn, wire.RNRNAK(1)) // 10 us
			require.Equal(t, psn, f.request().BTH.PSN, "the refused request again, after the RNR wait")
			f.answer(psn, wire.AckSyndromeNoCredits)
			assert.Equal(t, vroce.WCSuccess, f.completion().Status)
			assert.Equal(t, uint64(1), f.qp.Stats().RNRNAKsRecv)
		}},
		{"sequence NAK", wire.NAK(wire.NAKPSNSequenceError), func(t *testing.T, f *fakePeer, psn uint32) {
			f.answer(psn, wire.NAK(wire.NAKPSNSequenceError))
			require.Equal(t, psn, f.request().BTH.PSN, "resent from the NAKed PSN")
			f.answer(psn, wire.AckSyndromeNoCredits)
			assert.Equal(t, vroce.WCSuccess, f.completion().Status)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakePeer(t)
			f.answer(50, c.syn) // an idle QP: nothing is in flight
			psn := f.postSend()
			for _, forged := range []uint32{psn - 1, psn - 600, psn + 1, psn + 5000} {
				f.answer(forged&0xffffff, c.syn)
			}
			c.control(t, f, psn)
			s := f.qp.Stats()
			assert.Equal(t, uint64(5), s.ForgedResponses, "responses dropped as naming nothing in flight")
			if c.name != "RNR NAK" {
				assert.Zero(t, s.RNRNAKsRecv)
			}
			if c.name != "sequence NAK" && c.name != "RNR NAK" {
				// A loaded host may delay the answers past the QP's tail
				// probe or timeout: what those resend is theirs.
				assert.LessOrEqual(t, s.Retransmits, s.TailProbes+s.Timeouts, "resent for the forged responses: %+v", s)
			}
		})
	}
}

// TestPartitionKeyIsChecked: a request with a P_Key outside the port's
// partition (0xFFFF, full membership) is dropped and counted, as rxe
// drops it; the same request with 0xFFFF, or with 0x7FFF (the same
// partition, limited membership, which a full member talks to), lands.
func TestPartitionKeyIsChecked(t *testing.T) {
	f := newFakePeer(t)
	psn := uint32(500)
	for _, bad := range []uint16{0x0000, 0x8000, 0x1234, 0x8001, 0xfffe, 0x7ffe} {
		p := &wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: psn, AckReq: true}, Payload: []byte("refused")}
		f.sendKey(p, bad)
	}
	require.NoError(t, f.qp.PostRecv(vroce.RecvWR{ID: 2, SGL: []vroce.SGE{f.mr.SGE(2048, 2048)}}))
	for i, good := range []uint16{0xffff, 0x7fff} {
		f.sendKey(&wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: psn + uint32(i), AckReq: true}, Payload: []byte("in the partition")}, good)
	}
	for i := range 2 {
		wc := received(t, f.cq)
		assert.Equal(t, vroce.WCSuccess, wc.Status)
		assert.Equal(t, uint64(i+1), wc.ID, "the refused requests took no receive")
		assert.Equal(t, len("in the partition"), int(wc.ByteLen))
	}
	assert.Equal(t, uint64(6), f.qp.Device().Stats().RxBadPKey)
}

// sendKey sends p with P_Key key (send fills in the default).
func (f *fakePeer) sendKey(p *wire.Packet, key uint16) {
	f.t.Helper()
	f.rxeLike.sendWith(fakeSource, f.qp, 0, p, func(p *wire.Packet) { p.BTH.PKey = key })
}

// srQPTo is qpTo for a QP that negotiated selective repeat, with a path
// MTU of mtu, and a 1 MiB MR the peer may write and read.
func srQPTo(t *testing.T, network *sim.Network, addr netip.AddrPort, mtu vroce.MTU) (*vroce.QP, *vroce.MR) {
	t.Helper()
	qp, _, mr := qpTo(t, network, cm.Peer{QPN: 0x11, PSN: 500, Addr: addr, MTU: mtu, SelectiveRepeat: true},
		vroce.AccessRemoteWrite|vroce.AccessRemoteRead, 1<<20)
	return qp, mr
}

// writeOnly is a WRITE_ONLY of payload to off in mr at psn.
func writeOnly(mr *vroce.MR, psn uint32, off int, payload []byte) *wire.Packet {
	return &wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PSN: psn}, Payload: payload,
		RETH: wire.RETH{VA: mr.Addr() + uint64(off), RKey: mr.RKey(), DMALen: uint32(len(payload))}}
}

// TestOutOfOrderRequestsHoldWhatArrived: a stranger that opens a
// selective-repeat connection and sends a window of tiny requests out of
// order (the first never comes) pins 256 bytes a request, not a full
// packet buffer (it was 40 MiB for 1,023 16-byte WRITEs); a window of full
// 8 KiB requests stops at the QP's 8 MiB and the rest are dropped and
// counted. The positive control: once the gap fills, every held request
// executes, and nothing stays held.
func TestOutOfOrderRequestsHoldWhatArrived(t *testing.T) {
	network := sim.NewNetwork(sim.Config{MTU: 9000})
	t.Cleanup(network.Close)
	r := &rxeLike{t: t, network: network}
	qp, mr := srQPTo(t, network, fakeDevice, vroce.MTU8192)
	const window = 1023
	for i := 1; i <= window; i++ {
		r.send(fakeSource, qp, 0, writeOnly(mr, 500+uint32(i), 16*i, []byte("sixteen bytes..!")))
	}
	// The device takes the packets on its own goroutine; nothing
	// completes for them to wait on, so their counters are watched.
	var s vroce.QPStats
	stats := func() vroce.QPStats { s = qp.Stats(); return s }
	waitFor(t, "the tiny requests held", func() bool { return stats().HeldOutOfOrder == window })
	assert.Equal(t, window*256, s.HeldBytes, "bytes held for %d 16-byte requests", window)

	r.send(fakeSource, qp, 0, writeOnly(mr, 500, 0, []byte("the gap, filled."))) // the control
	waitFor(t, "the held requests executed", func() bool { return stats().HeldBytes == 0 })
	verbsSync(qp)
	assert.Equal(t, "sixteen bytes..!", string(mr.Bytes()[16*window:16*window+16]), "the last held WRITE executed")

	big := make([]byte, 8192)
	first := uint32(500 + window + 1)
	for i := 1; i <= window; i++ {
		r.send(fakeSource, qp, 0, writeOnly(mr, first+uint32(i), 0, big))
	}
	waitFor(t, "the full requests held or dropped", func() bool { return stats().HeldOutOfOrder+stats().HeldDrops >= 2*window })
	assert.LessOrEqual(t, s.HeldBytes, 8<<20, "bytes held for full packets")
	assert.Equal(t, uint64(window-(8<<20)/16384), s.HeldDrops, "full packets past the QP's bound")
}

// TestHeldRequestsInsideAReadAreDropped: requests a broken or hostile
// requester numbers inside a READ's PSNs, held because they arrived
// ahead of it, are let go when the READ passes them, unexecuted. The
// positive control: a WRITE at the PSN after the READ's lands.
func TestHeldRequestsInsideAReadAreDropped(t *testing.T) {
	network := sim.NewNetwork(sim.Config{MTU: 1500})
	t.Cleanup(network.Close)
	r := &rxeLike{t: t, network: network}
	qp, mr := srQPTo(t, network, fakeDevice, vroce.MTU1024)
	var s vroce.QPStats
	stats := func() vroce.QPStats { s = qp.Stats(); return s }

	r.send(fakeSource, qp, 0, writeOnly(mr, 502, 0, []byte("inside the READ")))
	r.send(fakeSource, qp, 0, writeOnly(mr, 503, 64, []byte("inside it too..")))
	r.send(fakeSource, qp, 0, writeOnly(mr, 504, 128, []byte("after the READ.")))
	waitFor(t, "the three requests held", func() bool { return stats().HeldOutOfOrder == 3 })
	assert.Equal(t, 3*256, s.HeldBytes)

	// A READ of 4 KiB takes PSNs 500 to 503.
	r.send(fakeSource, qp, 0, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 500},
		RETH: wire.RETH{VA: mr.Addr() + 4096, RKey: mr.RKey(), DMALen: 4096}})
	waitFor(t, "nothing held", func() bool { return stats().HeldBytes == 0 })
	verbsSync(qp)
	assert.Equal(t, "after the READ.", string(mr.Bytes()[128:143]), "the WRITE after the READ")
	assert.Equal(t, make([]byte, 128), mr.Bytes()[:128], "a request inside the READ executed")
}

// verbsSync orders the test's reads of MR memory after the device's
// writes to it (taken under the QP's lock).
func verbsSync(qp *vroce.QP) { _ = qp.State() }

// TestReplayedReadIsBounded: a READ of 4 MiB draws its 4,096 responses
// (the positive control); the same request replayed, a duplicate, draws
// at most 1,024 (what rxe may ask for again at once), and a flood of
// replays no more than the QP's budget, the rest counted. It was 32 MiB
// for one 44-byte replay. (The replays also set the QP's READ answers
// paced, and each supersedes what the one before had yet to send: a
// flood gets less still.)
func TestReplayedReadIsBounded(t *testing.T) {
	// Room for everything the replays may draw, counted as it comes.
	network, peer := fakePeerNetwork(t, sim.Config{RecvQueue: 1 << 17})
	r := &rxeLike{t: t, network: network}
	const packets = 4096
	qp, _, mr := qpTo(t, network, cm.Peer{QPN: 0x11, PSN: 500, Addr: fakeDevice, MTU: vroce.MTU1024, SelectiveRepeat: true},
		vroce.AccessRemoteWrite|vroce.AccessRemoteRead, packets*1024+4096)
	read := func() *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: 500, AckReq: true},
			RETH: wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: packets * 1024}}
	}
	responses := func(want int) (n int, last wire.Opcode) {
		pkts := make([]vroce.Packet, 32)
		for i := range pkts {
			pkts[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		for n < want {
			k, err := peer.Recv(pkts)
			require.NoError(t, err)
			for _, pk := range pkts[:k] {
				var p wire.Packet
				require.NoError(t, wire.Parse(&p, pk.Data))
				n, last = n+1, p.BTH.Opcode
			}
		}
		return n, last
	}
	r.send(fakeSource, qp, 0, read())
	n, last := responses(packets)
	require.Equal(t, packets, n)
	assert.Equal(t, wire.RCReadResponseLast, last)

	// The responses are counted as they come, so that however many the
	// replays draw, none is lost to the peer's full receive queue.
	type counted struct {
		sent int
		ack  wire.Packet
		err  error
	}
	done := make(chan counted, 1)
	go func() {
		var c counted
		pkts := make([]vroce.Packet, 64)
		for i := range pkts {
			pkts[i].Data = make([]byte, vroce.MaxPacketSize)
		}
		for c.err == nil && c.ack.BTH.Opcode != wire.RCAcknowledge {
			var k int
			k, c.err = peer.Recv(pkts)
			for _, pk := range pkts[:k] {
				if c.err = wire.Parse(&c.ack, pk.Data); c.err != nil || c.ack.BTH.Opcode == wire.RCAcknowledge {
					break
				}
				c.sent++
			}
		}
		done <- c
	}()
	start := time.Now()
	r.send(fakeSource, qp, 0, read()) // one replay
	const replays = 50
	for range replays {
		r.send(fakeSource, qp, 0, read())
	}
	// A control the flood must not starve: a WRITE, which is ACKed.
	w := writeOnly(mr, 500+packets, 0, []byte("after the replays"))
	w.BTH.AckReq = true
	r.send(fakeSource, qp, 0, w)
	var c counted
	select {
	case c = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("no ACK for the WRITE after the replays: %d packets dropped by the peer's queue, %+v", peer.Dropped(), qp.Stats())
	}
	require.NoError(t, c.err)
	require.Zero(t, peer.Dropped(), "responses the peer's receive queue dropped")
	sent, ack := c.sent, c.ack
	s := qp.Stats()
	// The budget: a burst of 1,024, refilled at 100,000 a second while
	// the replays came.
	budget := 1024 + int(time.Since(start).Seconds()*100_000) + 1
	assert.LessOrEqual(t, sent, budget, "responses drawn by %d replays in %v", replays+1, time.Since(start))
	assert.GreaterOrEqual(t, sent+int(s.ReadResponsesSuperseded), 1024, "the first replay restarts the READ")
	assert.Equal(t, uint64((replays+1)*packets-sent), s.DupReadLimited+s.ReadResponsesSuperseded)
	assert.Equal(t, uint32(500+packets), ack.BTH.PSN)
}

// TestReadAnswersWaitingAreBounded: a requester may have as many READs
// outstanding as it agreed to (max_dest_rd_atomic, 16 here), and the
// answers a responder keeps waiting are bounded by that. A peer that
// has its answers paced (a duplicate READ from inside a large answer)
// and then replays READs at PSN after PSN while the long answer waits,
// and asks a new READ, would have grown the queue by one answer a
// request; the READs beyond 16 are refused, counted, and never answered.
// The positive controls: the 15 that found room are answered in order
// after the long one, and once the queue has drained the refused new
// READ, asked again, is answered, as is a refused duplicate.
func TestReadAnswersWaitingAreBounded(t *testing.T) {
	network, peer := fakePeerNetwork(t, sim.Config{RecvQueue: 1 << 14})
	const long, replays, mtu, psnA = 2048, 100, 1024, 100_000
	const psnB = psnA + long    // a READ of replays packets, whose PSNs the replays reuse
	const ePSN = psnB + replays // expected once both are answered
	const room = 16 - 1         // the long answer holds one place
	qp, _, mr := qpTo(t, network, cm.Peer{QPN: 0x11, PSN: psnA, Addr: fakeDevice, MTU: vroce.MTU1024},
		vroce.AccessRemoteRead, long*mtu)
	arrivals := responsesAt(peer, 4*long)
	r := &rxeLike{t: t, network: network}
	readAt := func(psn uint32, packets int) *wire.Packet {
		return &wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest, PSN: psn, AckReq: true},
			RETH: wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: uint32(packets * mtu)}}
	}
	longGot := 0
	// answered reads arrivals until psn's response comes, and returns
	// the PSNs from psnB on that it saw in order (the rest it counts).
	answered := func(psn uint32) []uint32 {
		var got []uint32
		for {
			select {
			case a := <-arrivals:
				if a.psn >= psnB {
					got = append(got, a.psn)
				} else {
					longGot++
				}
				if a.psn == psn {
					return got
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no response for PSN %d; stats %+v", psn, qp.Stats())
			}
		}
	}
	r.sendAll(fakeSource, qp, 0, []*wire.Packet{readAt(psnA, long), readAt(psnB, replays)}, nil)
	require.Len(t, answered(ePSN-1), replays)
	require.Equal(t, long, longGot)

	// Asked again from the second packet, long after the first left: the
	// requester took little, and the rest is paced at the floor, 10,000
	// packets a second, 0.2 s. The replays and the new READ go in the
	// same batch, which the device takes in far less time.
	flood := []*wire.Packet{readAt(psnA+1, long-1)}
	for i := range replays {
		flood = append(flood, readAt(psnB+uint32(i), 1))
	}
	flood = append(flood, readAt(ePSN, 1))
	longGot = 0
	r.sendAll(fakeSource, qp, 0, flood, nil)
	waitFor(t, "the READs beyond the queue's room refused", func() bool { return qp.Stats().ReadsRefused == replays-room+1 })
	assert.NotZero(t, qp.Stats().ReadPace, "the long answer paced")

	var want []uint32
	for i := range room {
		want = append(want, psnB+uint32(i))
	}
	assert.Equal(t, want, answered(psnB+room-1), "the replays that found room, in order, and nothing refused")
	assert.Equal(t, long-1, longGot, "the long answer, whole, before them")
	r.send(fakeSource, qp, 0, readAt(ePSN, 1))
	assert.Equal(t, []uint32{ePSN}, answered(ePSN), "the refused new READ, asked again")
	r.send(fakeSource, qp, 0, readAt(psnB+replays-1, 1))
	assert.Equal(t, []uint32{psnB + replays - 1}, answered(psnB+replays-1), "a refused replay, asked again")
	assert.Equal(t, uint64(replays-room+1), qp.Stats().ReadsRefused)
}

package vroce

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// A request flagged as carrying a piggybacked ACK, on a QP that did not
// negotiate them, is dropped as malformed: its last eight bytes could be
// payload. The same request unflagged is delivered.
func TestPiggyACKOnlyWhereNegotiated(t *testing.T) {
	d, err := OpenWithProvider(&nullProvider{done: make(chan struct{})}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(16)
	buf := make([]byte, 4096)
	mr, _ := pd.RegMR(buf, AccessLocalWrite)
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	peer := netip.MustParseAddrPort("127.0.0.2:4791")
	const rqPSN = 100
	for _, s := range []struct {
		a QPAttr
		m QPAttrMask
	}{
		{QPAttr{State: QPSInit, AccessFlags: AccessLocalWrite}, QPAttrState | QPAttrAccessFlags},
		{QPAttr{State: QPSRTR, Dest: peer, PathMTU: MTU1024, DestQPN: 7, RQPSN: rqPSN, MaxDestRdAtomic: 1, MinRNRTimer: 1, SelectiveRepeat: true},
			QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer | QPAttrSelectiveRepeat},
	} {
		if err := qp.Modify(&s.a, s.m); err != nil {
			t.Fatal(err)
		}
	}
	if err := qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	deliver := func(piggy bool) {
		p := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: rqPSN, PiggyACK: piggy}, Payload: []byte("12345678abcdefgh")}
		b := make([]byte, 128)
		n, err := p.Encode(b)
		if err != nil {
			t.Fatal(err)
		}
		(wire.Flow{Src: peer, Dst: d.local}).Seal(b[:n])
		rb := &rxBatch{out: d.getBatch()}
		d.receive(&Packet{Data: b[:n], Addr: peer}, rb)
		d.settle(rb, false)
		d.putBatch(rb.out)
	}
	wc := make([]WorkCompletion, 1)
	deliver(true)
	if n, _ := cq.Poll(wc); n != 0 || d.Stats().RxMalformed != 1 {
		t.Fatalf("flagged, not negotiated: %d completions, %d malformed; want 0 and 1", n, d.Stats().RxMalformed)
	}
	deliver(false)
	if n, _ := cq.Poll(wc); n != 1 || wc[0].Status != WCSuccess || wc[0].ByteLen != 16 {
		t.Fatalf("unflagged: %d completions %+v", n, wc[0])
	}
}

// A SEND of several packets, sent while an ACK is owed, carries the ACK
// on its LAST: a GSO datagram's segments are one size (the last may be
// shorter), so the ACK's eight bytes on the FIRST split the message into
// two datagrams and the peer woke for each. A WRITE's FIRST differs in
// size anyway (its RETH) and carries it at once; so does a one-packet
// SEND (the positive control: the ACK rides at all).
func TestPiggyACKKeepsAMessageOneDatagram(t *testing.T) {
	const rqPSN = 100
	for _, c := range []struct {
		name    string
		op      WROpcode
		length  int
		carrier int // which packet carries the ACK
	}{
		{"send of three packets", WRSend, 600, 2},
		{"send with immediate of three packets", WRSendWithImm, 600, 2},
		{"write of three packets", WRRDMAWrite, 600, 0},
		{"send of one packet", WRSend, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			prov := &sinkProvider{done: make(chan struct{})}
			d, err := OpenWithProvider(prov, Config{})
			require.NoError(t, err)
			defer d.Close()
			pd, err := d.AllocPD()
			require.NoError(t, err)
			cq, err := d.CreateCQ(16)
			require.NoError(t, err)
			mr, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite)
			require.NoError(t, err)
			qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			peer := netip.MustParseAddrPort("127.0.0.2:4791")
			require.NoError(t, qp.Modify(&QPAttr{State: QPSInit, AccessFlags: AccessLocalWrite}, QPAttrState|QPAttrAccessFlags))
			require.NoError(t, qp.Modify(&QPAttr{State: QPSRTR, Dest: peer, PathMTU: MTU256, DestQPN: 7, RQPSN: rqPSN, MaxDestRdAtomic: 1, MinRNRTimer: 1, SelectiveRepeat: true, PiggybackACK: true},
				QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer|QPAttrSelectiveRepeat|QPAttrPiggybackACK))
			require.NoError(t, qp.Modify(&QPAttr{State: QPSRTS, SQPSN: 500, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				QPAttrState|QPAttrSQPSN|QPAttrTimeout|QPAttrRetryCnt|QPAttrRNRRetry|QPAttrMaxQPRdAtomic))
			require.NoError(t, qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 64)}}))

			// The peer's request asks for an ACK; the batch has not ended.
			rb := &rxBatch{out: d.getBatch()}
			req := wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: rqPSN, AckReq: true}, Payload: []byte("request")}
			b := make([]byte, 128)
			n, err := req.Encode(b)
			require.NoError(t, err)
			(wire.Flow{Src: peer, Dst: d.local}).Seal(b[:n])
			d.receive(&Packet{Data: b[:n], Addr: peer}, rb)

			require.NoError(t, qp.PostSend(SendWR{ID: 2, Opcode: c.op, SGL: []SGE{mr.SGE(1024, c.length)}, RemoteAddr: 0x1000, RKey: 1, Flags: SendSignaled}))
			sent, sizes := prov.takeSized()
			require.Len(t, sent, (c.length+255)/256)
			for i, p := range sent {
				assert.Equal(t, i == c.carrier, p.BTH.PiggyACK, "packet %d (%v) carries the ACK", i, p.BTH.Opcode)
				if p.BTH.PiggyACK {
					assert.Equal(t, uint32(rqPSN), p.Piggy.PSN)
				}
			}
			if c.op != WRRDMAWrite {
				for i := 1; i < len(sizes); i++ {
					assert.LessOrEqual(t, sizes[i], sizes[0], "packet %d is no longer than the first: one GSO run", i)
					if i < len(sizes)-1 {
						assert.Equal(t, sizes[0], sizes[i], "packet %d", i)
					}
				}
			}
			d.settle(rb, false)
			d.putBatch(rb.out)
			assert.Empty(t, ackPSNs(prov.take()), "the request carried the ACK: none left to send alone")
		})
	}
}

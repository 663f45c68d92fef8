package vroce

import (
	"net/netip"
	"testing"

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

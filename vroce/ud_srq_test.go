package vroce_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

type udNode struct {
	dev *vroce.Device
	pd  *vroce.PD
	cq  *vroce.CQ
	qp  *vroce.QP
	mr  *vroce.MR
}

func newUD(t *testing.T, network *sim.Network, addr string, qkey uint32) *udNode {
	t.Helper()
	d := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: addr, ProviderOptions: network})
	n := &udNode{dev: d}
	n.pd, _ = d.AllocPD()
	n.cq, _ = d.CreateCQ(64)
	n.mr, _ = n.pd.RegMR(make([]byte, 1<<16), vroce.AccessLocalWrite)
	var err error
	n.qp, err = n.pd.CreateQP(vroce.QPInitAttr{Type: vroce.UD, SendCQ: n.cq, RecvCQ: n.cq, Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		st   vroce.QPState
		mask vroce.QPAttrMask
	}{{vroce.QPSInit, vroce.QPAttrState | vroce.QPAttrQKey}, {vroce.QPSRTR, vroce.QPAttrState}, {vroce.QPSRTS, vroce.QPAttrState | vroce.QPAttrSQPSN}} {
		if err := n.qp.Modify(&vroce.QPAttr{State: s.st, QKey: qkey}, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestUDDatagramsWithGRHAndQKey(t *testing.T) {
	// A link that carries 32 KiB packets: UD keeps to an IB MTU anyway.
	network := sim.NewNetwork(sim.Config{MTU: 40000})
	t.Cleanup(network.Close)
	a := newUD(t, network, "127.0.0.1:7000", 0x11111111)
	b := newUD(t, network, "127.0.0.2:7000", 0x11111111)
	for i := 0; i < 2; i++ {
		if err := b.qp.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{b.mr.SGE(i*2048, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	ah, err := a.pd.CreateAH(b.dev.LocalAddr())
	if err != nil {
		t.Fatal(err)
	}
	payload := a.mr.Bytes()[:1000]
	fill(payload, 3)
	send := vroce.SendWR{ID: 9, Opcode: vroce.WRSendWithImm, Imm: 77, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(0, 1000)}, AH: ah, RemoteQPN: b.qp.QPN(), RemoteQKey: 0x11111111}
	wrongKey := send
	wrongKey.RemoteQKey = 0x22222222
	if err := a.qp.PostSend(wrongKey, send); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, waitCompletions(t, a.cq, 2, 5*time.Second))
	wc := waitCompletions(t, b.cq, 1, 5*time.Second)[0]
	if wc.Status != vroce.WCSuccess || wc.ByteLen != 40+1000 || wc.Flags&vroce.WCGRH == 0 || wc.Imm != 77 || wc.SrcQP != a.qp.QPN() || wc.Src != a.dev.LocalAddr() {
		t.Fatalf("receive completion %+v", wc)
	}
	got := b.mr.Bytes()[:wc.ByteLen]
	if got[20]>>4 != 4 || !bytes.Equal(got[40:], payload) {
		t.Fatal("GRH area or payload wrong")
	}
	if n, _ := b.cq.Poll(make([]vroce.WorkCompletion, 2)); n != 0 {
		t.Fatal("the datagram with the wrong Q_Key was delivered")
	}
	// Larger than the (IB) MTU: refused at post time.
	big := send
	big.SGL = []vroce.SGE{a.mr.SGE(0, 8192)}
	expectLimit(t, a.qp.PostSend(big), "UD message size (path MTU)", 8192, 4096)
	if err := ah.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestSRQFeedsSeveralQPsAndReportsItsLimit(t *testing.T) {
	a, b, _ := simPair(t, defaultOpts())
	srq, err := b.PD.CreateSRQ(vroce.SRQAttr{MaxWR: 64, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Two RC QPs on b that receive from the SRQ, each connected to a new
	// QP on a.
	var senders []*vroce.QP
	for i := 0; i < 2; i++ {
		rq, err := b.PD.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: b.CQ, RecvCQ: b.CQ, SRQ: srq, Cap: vroce.QPCap{MaxSendWR: 8, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		sq, err := a.PD.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: a.CQ, RecvCQ: a.CQ, Cap: vroce.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		verbstest.Connect(t, rq, sq, a.Dev, defaultOpts())
		verbstest.Connect(t, sq, rq, b.Dev, defaultOpts())
		if err := rq.PostRecv(vroce.RecvWR{}); err == nil {
			t.Fatal("PostRecv on a QP with an SRQ succeeded")
		}
		senders = append(senders, sq)
	}
	for i := 0; i < 4; i++ {
		if err := srq.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{b.MR.SGE(i*64, 64)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := srq.Arm(3); err != nil {
		t.Fatal(err)
	}
	for i, sq := range senders {
		if err := sq.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSend, Flags: vroce.SendSignaled | vroce.SendInline, Inline: []byte{byte('A' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	mustSucceed(t, waitCompletions(t, a.CQ, 2, 5*time.Second))
	rwcs := waitCompletions(t, b.CQ, 2, 5*time.Second)
	mustSucceed(t, rwcs)
	if srq.Len() != 2 {
		t.Fatalf("SRQ holds %d receives, want 2", srq.Len())
	}
	waitEvent(t, b.Dev, vroce.EventSRQLimitReached, func(ev vroce.AsyncEvent) bool { return ev.SRQ == srq })
	if err := srq.Destroy(); !errors.Is(err, vroce.ErrBusy) {
		t.Fatalf("destroying an SRQ in use: %v", err)
	}
}

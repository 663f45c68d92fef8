package vroce_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// TestManyQPsToOnePeerStayWithinItsReceiveBuffer: QPs to one peer land in
// one receive queue, which their windows, each sized for the path, would
// overrun together. 64 QPs each WRITE 256 KiB at once (512 packets of
// 32 KiB, each within its QP's initial window) to a peer that holds 192
// packets unread, over a path whose delay makes them arrive in one burst:
// every byte lands, and the receive queue overflows by no more than the
// budget allows. The budget holds 124 such packets, resends included;
// beyond it, a QP whose timer fires may resend its oldest packet, to make
// progress, so the queue may hold 124 packets and one more for each
// timeout. Unloaded, the timers fire at most once a QP
// (188 packets: nothing is dropped); on a loaded machine under the race
// detector the peer drains its queue slowly enough that they fire twice
// or more, and those resends, but only they, may overflow it. Without the
// budget all 512 arrive at once and about 320 are dropped.
func TestManyQPsToOnePeerStayWithinItsReceiveBuffer(t *testing.T) {
	const pairs, size, mtu = 64, 256 << 10, 32 << 10
	const budgetPackets, recvQueue = 124, 192 // 4 MiB / (32 KiB + 1 KiB); the peer's receive queue
	network := sim.NewNetwork(sim.Config{Delay: 2 * time.Millisecond, RecvQueue: recvQueue, MTU: mtu + 200})
	t.Cleanup(network.Close)
	o := verbstest.DefaultOpts()
	o.MTU, o.BufSize = vroce.MTU(mtu), size
	da := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: network})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.2:4791", ProviderOptions: network})
	var as, bs []*verbstest.Node
	for i := range pairs {
		a, b := verbstest.Pair(t, da, db, o)
		verbstest.Fill(a.Buf, byte(i))
		as, bs = append(as, a), append(bs, b)
	}
	for i, a := range as {
		err := a.QP.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{a.MR.SGE(0, size)}, RemoteAddr: bs[i].MR.Addr(), RKey: bs[i].MR.RKey()})
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, a := range as {
		verbstest.MustSucceed(t, verbstest.WaitCompletions(t, a.CQ, 1, 30*time.Second))
		verbstest.Sync(bs[i])
		if string(a.Buf) != string(bs[i].Buf) {
			t.Fatalf("QP %d: the WRITE's data differs at the peer", i)
		}
	}
	st, qps := network.Stats(), da.Stats().QPs
	// Each timeout resends its QP's oldest packet, whatever the budget.
	allowed := uint64(max(budgetPackets+int(qps.Timeouts)-recvQueue, 0))
	drops := max(st.RecvQueueDrops, db.Stats().RxProviderDrops)
	t.Logf("%d packets sent, %d dropped at the receiver (%d allowed), %d retransmitted after %d timeouts and %d tail probes",
		st.Sent, drops, allowed, qps.Retransmits, qps.Timeouts, qps.TailProbes)
	if drops > allowed {
		t.Fatal("the receiver dropped more than the timeouts' resends beyond the budget: its QPs' windows overran it together")
	}
	if st.Delivered < pairs*size/mtu {
		t.Fatalf("%d packets delivered, want at least %d", st.Delivered, pairs*size/mtu)
	}
}

// TestAQPJoiningBusyOnesGetsItsTurn: a QP that starts while others keep
// the peer's budget spent is queued for it and served in turn, not left
// the budget's leftovers: with 16 QPs streaming to one peer, whose
// initial windows alone outgrow the budget, a 17th one's WRITE completes
// while they are still busy.
func TestAQPJoiningBusyOnesGetsItsTurn(t *testing.T) {
	const busy, writes, size = 16, 16, 1 << 20
	network := sim.NewNetwork(sim.Config{Delay: time.Millisecond})
	t.Cleanup(network.Close)
	o := verbstest.DefaultOpts()
	o.MTU, o.BufSize = vroce.MTU4096, size
	da := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: network})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.2:4791", ProviderOptions: network})
	var as, bs []*verbstest.Node
	for range busy + 1 {
		a, b := verbstest.Pair(t, da, db, o)
		as, bs = append(as, a), append(bs, b)
	}
	write := func(i, n int) {
		for k := range n {
			err := as[i].QP.PostSend(vroce.SendWR{ID: uint64(k), Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled,
				SGL: []vroce.SGE{as[i].MR.SGE(0, size)}, RemoteAddr: bs[i].MR.Addr(), RKey: bs[i].MR.RKey()})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range busy {
		write(i, writes)
	}
	// Once the busy QPs have been stopped by the budget, the ninth
	// starts.
	verbstest.WaitFor(t, "the busy QPs to spend the peer's budget", func() bool {
		return da.Stats().QPs.PeerBudgetStops > 0
	})
	late := as[busy]
	fill := byte(0x5a)
	verbstest.Fill(late.Buf, fill)
	write(busy, 1)
	verbstest.MustSucceed(t, verbstest.WaitCompletions(t, late.CQ, 1, 30*time.Second))
	unfinished := 0
	for i := range busy {
		unfinished += writes - len(pollAll(as[i].CQ))
	}
	if unfinished == 0 {
		t.Fatalf("the late QP's one WRITE finished after all %d of the busy QPs' (%+v)", busy*writes, late.QP.Stats())
	}
	verbstest.Sync(bs[busy])
	if string(late.Buf) != string(bs[busy].Buf) {
		t.Fatal("the late WRITE's data differs at the peer")
	}
	t.Logf("%d of %d busy WRITEs still unfinished; stops: %d", unfinished, busy*writes, da.Stats().QPs.PeerBudgetStops)
}

// pollAll takes every completion cq holds now.
func pollAll(cq *vroce.CQ) []vroce.WorkCompletion {
	var all []vroce.WorkCompletion
	wcs := make([]vroce.WorkCompletion, 64)
	for {
		n, err := cq.Poll(wcs)
		if err != nil || n == 0 {
			return all
		}
		all = append(all, wcs[:n]...)
	}
}

// TestSendsToASharedSRQOutlastRNR: many QPs to one peer SEND into that
// peer's SRQ, which has receives for only a few messages at a time and
// gets one back as each message completes (as rsock keeps its SRQ). The
// first packets that find it empty draw RNR NAKs and wait; the messages
// that got a receive must still be able to finish, or no receive ever
// comes back. They used to stop: every RNR retry counted as a copy the
// peer might hold unread, and every packet the peer held out of order
// behind the refused one as in its socket buffer, so the QPs waiting
// out RNR filled the device's budget for the peer, and the messages
// holding the receives could send no more of their packets (seen with
// 200 streams through rsock-proxy: no byte moved for seconds, while
// 500,000 RNR NAKs went back and forth).
func TestSendsToASharedSRQOutlastRNR(t *testing.T) {
	const qps, msg, receives = 32, 256 << 10, 2
	network := sim.NewNetwork(sim.Config{Delay: 100 * time.Microsecond})
	t.Cleanup(network.Close)
	o := verbstest.DefaultOpts()
	da := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.1:4791", ProviderOptions: network})
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "127.0.0.2:4791", ProviderOptions: network})

	// The senders: one CQ and one MR, a message's worth for each QP.
	spd := mustPD(t, da)
	scq := mustCQ(t, da)
	src := make([]byte, qps*msg)
	for i := range qps {
		verbstest.Fill(src[i*msg:(i+1)*msg], byte(i))
	}
	smr, err := spd.RegMR(src, vroce.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	// The receiver: every QP on one SRQ, a buffer per receive.
	rpd := mustPD(t, db)
	rcq := mustCQ(t, db)
	srq, err := rpd.CreateSRQ(vroce.SRQAttr{MaxWR: receives, MaxSGE: 1})
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, receives*msg)
	rmr, err := rpd.RegMR(dst, vroce.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	post := func(slot int) {
		if err := srq.PostRecv(vroce.RecvWR{ID: uint64(slot), SGL: []vroce.SGE{rmr.SGE(slot*msg, msg)}}); err != nil {
			t.Fatal(err)
		}
	}
	for slot := range receives {
		post(slot)
	}

	senders, receivers := make([]*vroce.QP, qps), make([]*vroce.QP, qps)
	byQPN := map[uint32]int{}
	for i := range qps {
		s, err := spd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: scq, RecvCQ: scq,
			Cap: vroce.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		r, err := rpd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: rcq, RecvCQ: rcq, SRQ: srq,
			Cap: vroce.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		verbstest.Connect(t, s, r, db, o)
		verbstest.Connect(t, r, s, da, o)
		senders[i], receivers[i], byQPN[r.QPN()] = s, r, i
	}
	for i, s := range senders {
		err := s.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSend, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{smr.SGE(i*msg, msg)}})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Take each message as it lands, check it, and give its receive back.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wcs := make([]vroce.WorkCompletion, 16)
	for got := 0; got < qps; {
		n, err := rcq.PollWait(ctx, wcs)
		if err != nil {
			var failed []string
			for _, wc := range pollAll(scq) {
				if wc.Status != vroce.WCSuccess {
					failed = append(failed, fmt.Sprintf("QP %d: %v", wc.ID, wc.Status))
				}
			}
			var waiting []string
			for i, s := range senders {
				waiting = append(waiting, fmt.Sprintf("QP %d %v: %+v\n\tits peer: %+v", i, s.State(), s.Stats(), receivers[i].Stats()))
			}
			t.Fatalf("%d of %d messages landed: %v (RNR NAKs sent %d; the senders stopped %d times for the peer budget)\nsends failed: %v\nsenders:\n%s",
				got, qps, err, db.Stats().QPs.RNRNAKsSent, da.Stats().QPs.PeerBudgetStops, failed, strings.Join(waiting, "\n"))
		}
		for _, wc := range wcs[:n] {
			if wc.Status != vroce.WCSuccess {
				t.Fatalf("receive: %v", wc.Status)
			}
			i, slot := byQPN[wc.QPN], int(wc.ID)
			if wc.ByteLen != msg || !bytes.Equal(dst[slot*msg:(slot+1)*msg], src[i*msg:(i+1)*msg]) {
				t.Fatalf("QP %d's message arrived as %d bytes, or not as sent", i, wc.ByteLen)
			}
			got++
			post(slot)
		}
	}
	verbstest.MustSucceed(t, verbstest.WaitCompletions(t, scq, qps, 10*time.Second))
	if db.Stats().QPs.RNRNAKsSent == 0 {
		t.Fatal("no RNR NAK was sent: the test did not exercise what it is for")
	}
}

func mustPD(t *testing.T, d *vroce.Device) *vroce.PD {
	t.Helper()
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	return pd
}

func mustCQ(t *testing.T, d *vroce.Device) *vroce.CQ {
	t.Helper()
	cq, err := d.CreateCQ(1024)
	if err != nil {
		t.Fatal(err)
	}
	return cq
}

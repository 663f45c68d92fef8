package vroce_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

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

	senders := make([]*vroce.QP, qps)
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
		senders[i], byQPN[r.QPN()] = s, i
	}
	for i, s := range senders {
		err := s.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSend, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{smr.SGE(i*msg, msg)}})
		if err != nil {
			t.Fatal(err)
		}
	}

	// Take each message as it lands, check it, and give its receive back.
	got := 0
	wcs := make([]vroce.WorkCompletion, 16)
	deadline := time.Now().Add(30 * time.Second)
	for got < qps {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages landed in 30 s (RNR NAKs sent %d; the senders stopped %d times for the peer budget)",
				got, qps, db.Stats().QPs.RNRNAKsSent, da.Stats().QPs.PeerBudgetStops)
		}
		n, err := rcq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			waitCQ(t, rcq, 100*time.Millisecond)
			continue
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

// waitCQ waits up to within for cq to hold something.
func waitCQ(t *testing.T, cq *vroce.CQ, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := cq.Wait(ctx); err != nil && ctx.Err() == nil {
		t.Fatalf("cq wait: %v", err)
	}
}

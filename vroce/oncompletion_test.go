package vroce_test

import (
	"context"
	"testing"
	"time"

	"vroce.dev/vroce"
)

// A completion handler runs on the device's receive goroutine for what a
// receive batch completes, and may poll there; completions pushed by
// other goroutines (a flush) still wake Wait, as do all of them once the
// handler is removed.
func TestOnCompletionHandlesReceivedCompletions(t *testing.T) {
	a, b, _ := simPair(t, defaultOpts())
	handled := make(chan vroce.WorkCompletion, 16)
	wcs := make([]vroce.WorkCompletion, 4)
	b.CQ.OnCompletion(func() {
		n, _ := b.CQ.Poll(wcs)
		for _, wc := range wcs[:n] {
			handled <- wc
		}
	})
	send := func(id uint64) {
		if err := b.QP.PostRecv(vroce.RecvWR{ID: id, SGL: []vroce.SGE{b.MR.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := a.QP.PostSend(vroce.SendWR{ID: id, Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: []byte("hi")}); err != nil {
			t.Fatal(err)
		}
	}
	send(1)
	select {
	case wc := <-handled:
		if wc.ID != 1 || wc.Status != vroce.WCSuccess || wc.Opcode != vroce.WCRecv {
			t.Fatalf("the handler polled %+v", wc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not run")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.CQ.OnCompletion(nil)
	send(2)
	if n, err := b.CQ.PollWait(ctx, wcs); err != nil || n != 1 || wcs[0].ID != 2 {
		t.Fatalf("without the handler: %d completions, %v, %+v", n, err, wcs[0])
	}

	b.CQ.OnCompletion(func() { t.Error("the handler ran for a flush") })
	if err := b.QP.PostRecv(vroce.RecvWR{ID: 3, SGL: []vroce.SGE{b.MR.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := b.QP.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if n, err := b.CQ.PollWait(ctx, wcs); err != nil || n != 1 || wcs[0].ID != 3 || wcs[0].Status != vroce.WCWRFlushErr {
		t.Fatalf("the flush: %d completions, %v, %+v", n, err, wcs[0])
	}
	b.CQ.OnCompletion(nil)
}

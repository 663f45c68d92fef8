package vroce

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A provider that can never receive again (its interface gone) ends the
// device: EventDeviceFatal with the provider's error, and every QP in the
// error state with its work requests flushed, rather than a device that
// waits forever or spins on the error.
func TestProviderFailureIsDeviceFatal(t *testing.T) {
	a, _ := pipeQPs(t)
	if err := a.qp.PostRecv(RecvWR{ID: 7, SGL: []SGE{a.mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	close(a.dev.prov.(*pipeProvider).broken)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := a.dev.AsyncEvent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Type != EventDeviceFatal || !errors.Is(ev.Err, ErrProviderFailed) {
		t.Fatalf("event %v, error %v", ev.Type, ev.Err)
	}
	if st := a.qp.State(); st != QPSErr {
		t.Fatalf("QP in %v, want the error state", st)
	}
	wc := make([]WorkCompletion, 1)
	if n, err := a.cq.PollWait(ctx, wc); n != 1 || err != nil || wc[0].ID != 7 || wc[0].Status != WCWRFlushErr {
		t.Fatalf("receive WR: %d completions, %v, %+v", n, err, wc[0])
	}
	if a.dev.Stats().RxErrors != 1 {
		t.Fatalf("%d receive errors counted, want 1 (no spinning on a dead provider)", a.dev.Stats().RxErrors)
	}
}

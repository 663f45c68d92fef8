package vroce_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

// An RC QP on an SRQ queues EventQPLastWQEReached as it goes to ERR. One
// destroyed before its owner took the event takes the event with it, and
// with it the last reference to the QP's memory: an owner that reads no
// events (rsock) would otherwise keep every QP it ever destroyed, up to
// the queue's 65,536.
func TestDestroyDropsTheQPsUntakenEvents(t *testing.T) {
	d := verbstest.OpenDevice(t, vroce.Config{Provider: "sim"})
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.CreateCQ(16)
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(vroce.SRQAttr{MaxWR: 8, MaxSGE: 1})
	require.NoError(t, err)
	failedQP := func() *vroce.QP {
		qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: vroce.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, qp.Modify(rcAttr(vroce.QPSInit), rcInit))
		require.NoError(t, qp.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState))
		return qp
	}
	next := func(wait time.Duration) (vroce.AsyncEvent, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return d.AsyncEvent(ctx)
	}

	// The control: a QP kept has its event to take.
	kept := failedQP()
	ev, err := next(5 * time.Second)
	require.NoError(t, err)
	require.Equal(t, vroce.EventQPLastWQEReached, ev.Type)
	require.Same(t, kept, ev.QP)

	gone := failedQP()
	ref := weak.Make(gone)
	require.NoError(t, gone.Destroy())
	gone = nil
	_, err = next(50 * time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded, "an event of a destroyed QP was delivered")
	runtime.GC()
	require.Nil(t, ref.Value(), "the destroyed QP is still reachable")
	require.NoError(t, kept.Destroy())
}

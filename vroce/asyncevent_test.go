package vroce_test

import (
	"context"
	"runtime"
	"testing"
	"weak"

	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

// An object destroyed before its owner took its async events takes them
// with it, and with them the last reference to its memory: an owner that
// reads no events (rsock) would otherwise keep every QP it ever destroyed,
// up to the queue's 65,536. An RC QP on an SRQ queues
// EventQPLastWQEReached as it goes to ERR; a CQ that overflows, EventCQErr.
// Each case's control: the same object kept has its event to take.
func TestDestroyDropsUntakenEvents(t *testing.T) {
	type object struct {
		destroy func() error
		is      func(vroce.AsyncEvent) bool // the event is this object's
		ref     func() bool                 // reports whether it is still reachable
	}
	for _, tc := range []struct {
		name string
		typ  vroce.EventType
		make func(t *testing.T, d *vroce.Device, pd *vroce.PD) object
	}{
		{"QP", vroce.EventQPLastWQEReached, func(t *testing.T, d *vroce.Device, pd *vroce.PD) object {
			cq, err := d.CreateCQ(16)
			require.NoError(t, err)
			srq, err := pd.CreateSRQ(vroce.SRQAttr{MaxWR: 8, MaxSGE: 1})
			require.NoError(t, err)
			qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, SRQ: srq, Cap: vroce.QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
			require.NoError(t, err)
			require.NoError(t, qp.Modify(rcAttr(vroce.QPSInit), rcInit))
			require.NoError(t, qp.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState))
			w := weak.Make(qp)
			return object{qp.Destroy, func(ev vroce.AsyncEvent) bool { return ev.QP == w.Value() }, func() bool { return w.Value() != nil }}
		}},
		{"CQ", vroce.EventCQErr, func(t *testing.T, d *vroce.Device, pd *vroce.PD) object {
			// Two flushed receives overflow a CQ of one entry.
			mr, err := pd.RegMR(make([]byte, 64), vroce.AccessLocalWrite)
			require.NoError(t, err)
			sendCQ, err := d.CreateCQ(16)
			require.NoError(t, err)
			cq, err := d.CreateCQ(1)
			require.NoError(t, err)
			qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: sendCQ, RecvCQ: cq, Cap: vroce.QPCap{MaxSendWR: 1, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			require.NoError(t, qp.Modify(rcAttr(vroce.QPSInit), rcInit))
			for i := range 2 {
				require.NoError(t, qp.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{mr.SGE(0, 64)}}))
			}
			require.NoError(t, qp.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState))
			require.NoError(t, qp.Destroy())
			w := weak.Make(cq)
			return object{cq.Destroy, func(ev vroce.AsyncEvent) bool { return ev.CQ == w.Value() }, func() bool { return w.Value() != nil }}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := verbstest.OpenDevice(t, vroce.Config{Provider: "sim"})
			pd, err := d.AllocPD()
			require.NoError(t, err)
			// Both events are queued by the time make returns (the move to
			// ERR pushes them), so the queue is read without waiting: an
			// AsyncEvent with a done context still returns what is queued.
			queued := func() (vroce.AsyncEvent, error) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return d.AsyncEvent(ctx)
			}

			kept := tc.make(t, d, pd)
			ev, err := queued()
			require.NoError(t, err)
			require.Equal(t, tc.typ, ev.Type)
			require.True(t, kept.is(ev), "the kept object's event")
			ev = vroce.AsyncEvent{}

			gone := tc.make(t, d, pd)
			require.NoError(t, gone.destroy())
			gone.destroy = nil // the method value holds the object
			_, err = queued()
			require.ErrorIs(t, err, context.Canceled, "an event of a destroyed %s was delivered", tc.name)
			runtime.GC()
			require.False(t, gone.ref(), "the destroyed %s is still reachable", tc.name)
			require.NoError(t, kept.destroy())
		})
	}
}

package vroce_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"vroce.dev/vroce"
)

func newQP(t *testing.T, typ vroce.QPType) (*vroce.Device, *vroce.PD, *vroce.CQ, *vroce.QP) {
	t.Helper()
	d := openSim(t, 0)
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(64)
	qp, err := pd.CreateQP(vroce.QPInitAttr{Type: typ, SendCQ: cq, RecvCQ: cq, Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	return d, pd, cq, qp
}

var (
	rcInit = vroce.QPAttrState | vroce.QPAttrAccessFlags
	rcRTR  = vroce.QPAttrState | vroce.QPAttrAV | vroce.QPAttrPathMTU | vroce.QPAttrDestQPN | vroce.QPAttrRQPSN | vroce.QPAttrMaxDestRdAtomic | vroce.QPAttrMinRNRTimer
	rcRTS  = vroce.QPAttrState | vroce.QPAttrSQPSN | vroce.QPAttrTimeout | vroce.QPAttrRetryCnt | vroce.QPAttrRNRRetry | vroce.QPAttrMaxQPRdAtomic
)

func rcAttr(s vroce.QPState) *vroce.QPAttr {
	return &vroce.QPAttr{State: s, Dest: netip.MustParseAddrPort("127.0.0.9:4791"), PathMTU: vroce.MTU1024, DestQPN: 0x42, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
}

func TestRCStateMachineRequiresEachTransitionsAttributes(t *testing.T) {
	_, _, _, qp := newQP(t, vroce.RC)
	steps := []struct {
		to   vroce.QPState
		mask vroce.QPAttrMask
	}{{vroce.QPSInit, rcInit}, {vroce.QPSRTR, rcRTR}, {vroce.QPSRTS, rcRTS}}
	for _, s := range steps {
		for bit := vroce.QPAttrMask(1); bit < 1<<16; bit <<= 1 {
			if s.mask&bit == 0 || bit == vroce.QPAttrState {
				continue
			}
			err := qp.Modify(rcAttr(s.to), s.mask&^bit)
			if !errors.Is(err, vroce.ErrInvalid) || !strings.Contains(err.Error(), "missing required attributes "+bit.String()) {
				t.Fatalf("to %v without %v: %v", s.to, bit, err)
			}
		}
		if err := qp.Modify(rcAttr(s.to), s.mask|vroce.QPAttrQKey); !errors.Is(err, vroce.ErrInvalid) {
			t.Fatalf("to %v with Q_Key on an RC QP: %v, want ErrInvalid", s.to, err)
		}
		if err := qp.Modify(rcAttr(s.to), s.mask); err != nil {
			t.Fatalf("to %v: %v", s.to, err)
		}
		if got := qp.State(); got != s.to {
			t.Fatalf("state %v, want %v", got, s.to)
		}
	}
	for _, bad := range []vroce.QPState{vroce.QPSInit, vroce.QPSRTR, vroce.QPSSQE} {
		if err := qp.Modify(rcAttr(bad), vroce.QPAttrState); !errors.Is(err, vroce.ErrState) {
			t.Errorf("RTS to %v: %v, want ErrState", bad, err)
		}
	}
	// RTS -> SQD -> RTS -> ERR -> RESET -> INIT.
	for _, to := range []vroce.QPState{vroce.QPSSQD, vroce.QPSRTS, vroce.QPSErr, vroce.QPSReset} {
		if err := qp.Modify(&vroce.QPAttr{State: to}, vroce.QPAttrState); err != nil {
			t.Fatalf("to %v: %v", to, err)
		}
	}
	if err := qp.Modify(rcAttr(vroce.QPSInit), rcInit); err != nil {
		t.Fatalf("RESET to INIT again: %v", err)
	}
}

func TestQPAttributeValuesAreChecked(t *testing.T) {
	toRTR := func(t *testing.T) *vroce.QP {
		_, _, _, qp := newQP(t, vroce.RC)
		if err := qp.Modify(rcAttr(vroce.QPSInit), rcInit); err != nil {
			t.Fatal(err)
		}
		return qp
	}
	cases := []struct {
		name   string
		mask   vroce.QPAttrMask
		to     vroce.QPState
		mutate func(*vroce.QPAttr)
	}{
		{"path MTU 1500", rcRTR, vroce.QPSRTR, func(a *vroce.QPAttr) { a.PathMTU = 1500 }},
		{"min RNR timer 40", rcRTR, vroce.QPSRTR, func(a *vroce.QPAttr) { a.MinRNRTimer = 40 }},
		{"RQ PSN of 25 bits", rcRTR, vroce.QPSRTR, func(a *vroce.QPAttr) { a.RQPSN = 1 << 24 }},
		{"no destination", rcRTR, vroce.QPSRTR, func(a *vroce.QPAttr) { a.Dest = netip.AddrPort{} }},
		{"timeout 32", rcRTS, vroce.QPSRTS, func(a *vroce.QPAttr) { a.Timeout = 32 }},
		{"retry count 8", rcRTS, vroce.QPSRTS, func(a *vroce.QPAttr) { a.RetryCnt = 8 }},
		{"RNR retry 8", rcRTS, vroce.QPSRTS, func(a *vroce.QPAttr) { a.RNRRetry = 8 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			qp := toRTR(t)
			if c.to == vroce.QPSRTS {
				if err := qp.Modify(rcAttr(vroce.QPSRTR), rcRTR); err != nil {
					t.Fatal(err)
				}
			}
			before := qp.State()
			a := rcAttr(c.to)
			c.mutate(a)
			if err := qp.Modify(a, c.mask); !errors.Is(err, vroce.ErrInvalid) || qp.State() != before {
				t.Fatalf("accepted or wrong error: %v (state %v)", err, qp.State())
			}
		})
	}
	qp := toRTR(t)
	a := rcAttr(vroce.QPSRTR)
	a.MaxDestRdAtomic = 129
	expectLimit(t, qp.Modify(a, rcRTR), "max_qp_init_rd_atom", 129, 128)
}

func TestUDStateMachine(t *testing.T) {
	_, _, _, qp := newQP(t, vroce.UD)
	if err := qp.Modify(&vroce.QPAttr{State: vroce.QPSInit}, vroce.QPAttrState); !errors.Is(err, vroce.ErrInvalid) {
		t.Fatalf("UD to INIT without Q_Key: %v", err)
	}
	for _, s := range []struct {
		to   vroce.QPState
		mask vroce.QPAttrMask
	}{
		{vroce.QPSInit, vroce.QPAttrState | vroce.QPAttrQKey},
		{vroce.QPSRTR, vroce.QPAttrState},
		{vroce.QPSRTS, vroce.QPAttrState | vroce.QPAttrSQPSN},
	} {
		if err := qp.Modify(&vroce.QPAttr{State: s.to, QKey: 0x11111111}, s.mask); err != nil {
			t.Fatalf("UD to %v: %v", s.to, err)
		}
	}
	if err := qp.Modify(&vroce.QPAttr{State: vroce.QPSRTS, PathMTU: vroce.MTU1024}, vroce.QPAttrPathMTU); !errors.Is(err, vroce.ErrInvalid) {
		t.Fatalf("path MTU on a UD QP: %v", err)
	}
}

func TestPostingFollowsTheState(t *testing.T) {
	_, pd, cq, qp := newQP(t, vroce.RC)
	mr, _ := pd.RegMR(make([]byte, 64), vroce.AccessLocalWrite)
	send := vroce.SendWR{ID: 1, Opcode: vroce.WRSend, SGL: []vroce.SGE{mr.SGE(0, 8)}}
	recv := vroce.RecvWR{ID: 2, SGL: []vroce.SGE{mr.SGE(0, 8)}}
	if err := qp.PostSend(send); !errors.Is(err, vroce.ErrState) {
		t.Fatalf("send in RESET: %v", err)
	}
	if err := qp.PostRecv(recv); !errors.Is(err, vroce.ErrState) {
		t.Fatalf("receive in RESET: %v", err)
	}
	if err := qp.Modify(rcAttr(vroce.QPSInit), rcInit); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostRecv(recv); err != nil {
		t.Fatalf("receive in INIT: %v", err)
	}
	if err := qp.PostSend(send); !errors.Is(err, vroce.ErrState) {
		t.Fatalf("send in INIT: %v", err)
	}
	// ERR flushes what was posted, and anything posted after.
	if err := qp.Modify(&vroce.QPAttr{State: vroce.QPSErr}, vroce.QPAttrState); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(send); err != nil {
		t.Fatalf("send in ERR: %v", err)
	}
	wcs := waitCompletions(t, cq, 2, time.Second)
	for _, wc := range wcs {
		if wc.Status != vroce.WCWRFlushErr {
			t.Fatalf("completion %+v, want a flush error", wc)
		}
	}
	if wcs[0].ID != 2 || wcs[0].Opcode != vroce.WCRecv || wcs[1].ID != 1 || wcs[1].Opcode != vroce.WCSend {
		t.Fatalf("flushed %+v", wcs)
	}
	// Flushes complete inside Modify and PostSend: nothing more can come.
	if n, err := cq.Poll(make([]vroce.WorkCompletion, 4)); n != 0 || err != nil {
		t.Fatalf("%d more completions (%v), want the two flushes only", n, err)
	}
}

package vroce_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

func openSim(t *testing.T, maxQP int) *vroce.Device {
	t.Helper()
	return verbstest.OpenDevice(t, vroce.Config{Provider: "sim", MaxQP: maxQP})
}

// expectLimit checks err is a *LimitError for limit with the value asked.
func expectLimit(t *testing.T, err error, limit string, value, max int) {
	t.Helper()
	var le *vroce.LimitError
	if !errors.As(err, &le) || !errors.Is(err, vroce.ErrLimit) {
		t.Fatalf("%s: got %v, want a *LimitError", limit, err)
	}
	if le.Limit != limit || le.Value != value || le.Max != max {
		t.Fatalf("got %+v, want limit %s value %d max %d", *le, limit, value, max)
	}
	if msg := err.Error(); !strings.Contains(msg, limit) || !strings.Contains(msg, fmt.Sprint(value)) || !strings.Contains(msg, fmt.Sprint(max)) {
		t.Fatalf("message %q does not name the limit, the value and the maximum", msg)
	}
}

func TestDeviceAttrFollowSpec(t *testing.T) {
	d := openSim(t, 0)
	a := d.Attr()
	want := vroce.DeviceAttr{MaxQP: 262144, MaxCQ: 524288, MaxMR: 524288, MaxQPWR: 8191, MaxSendSGE: 12, MaxRecvSGE: 16, MaxCQE: 8388607}
	got := vroce.DeviceAttr{MaxQP: a.MaxQP, MaxCQ: a.MaxCQ, MaxMR: a.MaxMR, MaxQPWR: a.MaxQPWR, MaxSendSGE: a.MaxSendSGE, MaxRecvSGE: a.MaxRecvSGE, MaxCQE: a.MaxCQE}
	if got != want {
		t.Fatalf("attributes %+v, want %+v", got, want)
	}
	if a.MaxBacklogCM != 1024 {
		t.Fatalf("default max_backlog %d, want 1024", a.MaxBacklogCM)
	}
	small := openSim(t, 10)
	if a := small.Attr(); a.MaxQP != 10 || a.MaxCQ != 20 || a.MaxMR != 20 {
		t.Fatalf("max_qp 10 gives %+v", a)
	}
}

// TestEverySpecLimitIsEnforcedAtCreation: one case per row of SPEC.md.
func TestEverySpecLimitIsEnforcedAtCreation(t *testing.T) {
	d := openSim(t, 4)
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qpWith := func(c vroce.QPCap) error {
		qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, Cap: c})
		if err == nil {
			qp.Destroy()
		}
		return err
	}
	t.Run("max_send_wr", func(t *testing.T) {
		if err := qpWith(vroce.QPCap{MaxSendWR: 8191}); err != nil {
			t.Fatalf("8191 send WRs refused: %v", err)
		}
		expectLimit(t, qpWith(vroce.QPCap{MaxSendWR: 8192}), "max_send_wr", 8192, 8191)
	})
	t.Run("max_recv_wr", func(t *testing.T) {
		if err := qpWith(vroce.QPCap{MaxRecvWR: 8191}); err != nil {
			t.Fatalf("8191 receive WRs refused: %v", err)
		}
		expectLimit(t, qpWith(vroce.QPCap{MaxRecvWR: 9000}), "max_recv_wr", 9000, 8191)
	})
	t.Run("max_send_sge", func(t *testing.T) {
		if err := qpWith(vroce.QPCap{MaxSendSGE: 12}); err != nil {
			t.Fatal(err)
		}
		expectLimit(t, qpWith(vroce.QPCap{MaxSendSGE: 13}), "max_send_sge", 13, 12)
	})
	t.Run("max_recv_sge", func(t *testing.T) {
		if err := qpWith(vroce.QPCap{MaxRecvSGE: 16}); err != nil {
			t.Fatal(err)
		}
		expectLimit(t, qpWith(vroce.QPCap{MaxRecvSGE: 17}), "max_recv_sge", 17, 16)
	})
	t.Run("max_cqe", func(t *testing.T) {
		big, err := d.CreateCQ(8388607)
		if err != nil {
			t.Fatalf("a CQ of the maximum depth: %v", err)
		}
		big.Destroy()
		_, err = d.CreateCQ(8388608)
		expectLimit(t, err, "max_cqe", 8388608, 8388607)
	})
	t.Run("max_qp", func(t *testing.T) {
		var qps []*vroce.QP
		for i := 0; i < 4; i++ {
			qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.UD, SendCQ: cq, RecvCQ: cq})
			if err != nil {
				t.Fatalf("QP %d of 4: %v", i+1, err)
			}
			qps = append(qps, qp)
		}
		_, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq})
		expectLimit(t, err, "max_qp", 5, 4)
		qps[0].Destroy()
		qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq})
		if err != nil {
			t.Fatalf("a destroyed QP's slot is not reusable: %v", err)
		}
		for _, q := range append(qps[1:], qp) {
			q.Destroy()
		}
	})
	t.Run("max_cq is 2 x max_qp", func(t *testing.T) {
		var cqs []*vroce.CQ
		for i := 1; i < 8; i++ { // one CQ exists already
			c, err := d.CreateCQ(1)
			if err != nil {
				t.Fatalf("CQ %d of 8: %v", i+1, err)
			}
			cqs = append(cqs, c)
		}
		_, err := d.CreateCQ(1)
		expectLimit(t, err, "max_cq", 9, 8)
		for _, c := range cqs {
			c.Destroy()
		}
	})
	t.Run("max_mr is 2 x max_qp", func(t *testing.T) {
		var mrs []*vroce.MR
		for i := 0; i < 8; i++ {
			mr, err := pd.RegMR(make([]byte, 64), vroce.AccessLocalWrite)
			if err != nil {
				t.Fatalf("MR %d of 8: %v", i+1, err)
			}
			mrs = append(mrs, mr)
		}
		_, err := pd.RegMR(make([]byte, 64), 0)
		expectLimit(t, err, "max_mr", 9, 8)
		for _, mr := range mrs {
			mr.Dereg()
		}
	})
	t.Run("max_inline_data", func(t *testing.T) {
		expectLimit(t, qpWith(vroce.QPCap{MaxInlineData: 257}), "max_inline_data", 257, 256)
	})
}

func TestLimitsOfPostedWork(t *testing.T) {
	a, _, _ := simPair(t, defaultOpts())
	sges := make([]vroce.SGE, 5)
	for i := range sges {
		sges[i] = a.MR.SGE(i*8, 8)
	}
	err := a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, SGL: sges})
	expectLimit(t, err, "max_send_sge", 5, 4)
	err = a.QP.PostRecv(vroce.RecvWR{SGL: sges})
	expectLimit(t, err, "max_recv_sge", 5, 4)
	err = a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: make([]byte, 65)})
	expectLimit(t, err, "max_inline_data", 65, 64)
	// Fill the receive queue (1024) and check the next one is refused.
	for i := 0; i < 1024; i++ {
		if err := a.QP.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{a.MR.SGE(0, 8)}}); err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
	}
	if err := a.QP.PostRecv(vroce.RecvWR{SGL: []vroce.SGE{a.MR.SGE(0, 8)}}); !errors.Is(err, vroce.ErrQueueFull) {
		t.Fatalf("receive 1025 of 1024: %v, want ErrQueueFull", err)
	}
}

func TestBadArgumentsAreTypedErrors(t *testing.T) {
	a, _, _ := simPair(t, defaultOpts())
	cases := []struct {
		name string
		err  error
	}{
		{"lkey of nothing", a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, SGL: []vroce.SGE{{Addr: a.MR.Addr(), Length: 8, LKey: a.MR.LKey() + 1}}})},
		{"SGE past the MR", a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRSend, SGL: []vroce.SGE{a.MR.SGE(len(a.Buf)-4, 8)}})},
		{"misaligned atomic", a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRAtomicFetchAndAdd, SGL: []vroce.SGE{a.MR.SGE(0, 8)}, RemoteAddr: 4})},
		{"unknown opcode", a.QP.PostSend(vroce.SendWR{Opcode: 99})},
		{"inline READ", a.QP.PostSend(vroce.SendWR{Opcode: vroce.WRRDMARead, Flags: vroce.SendInline})},
		{"remote write without local write", func() error { _, err := a.PD.RegMR(make([]byte, 8), vroce.AccessRemoteWrite); return err }()},
		{"CQ of depth 0", func() error { _, err := a.Dev.CreateCQ(0); return err }()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, vroce.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
	if err := a.PD.Dealloc(); !errors.Is(err, vroce.ErrBusy) {
		t.Errorf("dealloc of a PD in use: %v, want ErrBusy", err)
	}
	if err := a.CQ.Destroy(); !errors.Is(err, vroce.ErrBusy) {
		t.Errorf("destroy of a CQ in use: %v, want ErrBusy", err)
	}
}

// A path MTU vRoCE does not take is refused, typed, where a device opens
// and where a QP's path MTU is set, and the error names what it takes.
func TestAnInvalidPathMTUIsRefused(t *testing.T) {
	_, err := vroce.Open(vroce.Config{Provider: "sim", MTU: 1400})
	if !errors.Is(err, vroce.ErrInvalid) || !strings.Contains(err.Error(), "MTU1344") {
		t.Fatalf("open with MTU 1400: %v, want ErrInvalid naming MTU1344", err)
	}
	_, _, _, qp := newQP(t, vroce.RC)
	a := rcAttr(vroce.QPSInit)
	if err := qp.Modify(a, rcInit); err != nil {
		t.Fatal(err)
	}
	a = rcAttr(vroce.QPSRTR)
	a.PathMTU = 1400
	if err := qp.Modify(a, rcRTR); !errors.Is(err, vroce.ErrInvalid) || !strings.Contains(err.Error(), "MTU1344") {
		t.Fatalf("path MTU 1400: %v, want ErrInvalid naming MTU1344", err)
	}
	a.PathMTU = vroce.MTU1024 // the control: the same transition with an MTU it takes
	if err := qp.Modify(a, rcRTR); err != nil {
		t.Fatal(err)
	}
}

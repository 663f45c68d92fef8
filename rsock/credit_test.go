package rsock

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// hostileClient is a stream peer on the bare verbs API: it connects to an
// rsock listener with RDMA_CM and the stream hello, and sends what it
// likes.
type hostileClient struct {
	qp *vroce.QP
	mr *vroce.MR
	cq *vroce.CQ
}

func dialHostile(t *testing.T, to netip.AddrPort) *hostileClient {
	t.Helper()
	dev, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	m, err := cm.New(dev, cm.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(1024)
	mr, err := pd.RegMR(make([]byte, bufSize), vroce.AccessLocalWrite)
	require.NoError(t, err)
	qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, Cap: vroce.QPCap{MaxSendWR: 1024, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = m.Connect(ctx, qp, to, cm.Params{PrivateData: ourHello().marshal()})
	require.NoError(t, err)
	for range 64 {
		require.NoError(t, qp.PostRecv(vroce.RecvWR{SGL: []vroce.SGE{mr.SGE(0, bufSize)}}))
	}
	return &hostileClient{qp: qp, mr: mr, cq: cq}
}

// sendData sends n full data messages, granting nothing back, and waits
// until the responder has them all (or the stream's reset fails them).
func (h *hostileClient) sendData(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		require.NoError(t, h.qp.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRSendWithImm, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{h.mr.SGE(0, bufSize)}, Imm: immediate(kindData, 0)}))
	}
}

// serverConn accepts the stream the hostile client opened.
func serverConn(t *testing.T, l net.Listener) net.Conn {
	t.Helper()
	c, err := l.Accept()
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestCreditsGrantedAreEnforced: a stream peer may send only as many data
// messages as the receiver granted (the window, 16, while the application
// reads nothing). Sending the 17th resets the stream with
// ErrCreditViolation and counts it; the server holds none of it. The
// positive control: 16, exactly the grant, are all read back.
func TestCreditsGrantedAreEnforced(t *testing.T) {
	for _, over := range []bool{false, true} {
		name := map[bool]string{false: "the grant", true: "one past it"}[over]
		t.Run(name, func(t *testing.T) {
			l := listen(t, &ListenConfig{Mode: ModeCM}, "127.0.0.1:0")
			to := l.Addr().(*net.TCPAddr).AddrPort()
			before := ReadStats().CreditViolations
			h := dialHostile(t, netip.AddrPortFrom(to.Addr().Unmap(), to.Port()))
			srv := serverConn(t, l)
			n := window
			if over {
				n = 768 // as the attack did: 48 MiB against a grant of 1 MiB
			}
			h.sendData(t, n)
			if !over {
				buf := make([]byte, window*bufSize)
				_, err := io.ReadFull(srv, buf)
				require.NoError(t, err, "reading the %d granted messages", window)
				assert.Equal(t, before, ReadStats().CreditViolations)
				return
			}
			srv.SetReadDeadline(time.Now().Add(10 * time.Second))
			var err error
			for err == nil {
				_, err = srv.Read(make([]byte, bufSize))
			}
			assert.True(t, errors.Is(err, ErrCreditViolation), "the server's read ends with %v", err)
			assert.True(t, errors.Is(err, syscall.EPROTO))
			assert.Equal(t, before+1, ReadStats().CreditViolations)
			// The peer hears of it: an RST, or its QP failing.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			wc := make([]vroce.WorkCompletion, 1)
			for {
				_, err := h.cq.PollWait(ctx, wc)
				require.NoError(t, err, "the hostile client heard nothing back")
				if wc[0].Status != vroce.WCSuccess || wc[0].Opcode == vroce.WCRecv && wc[0].Imm>>28 == kindRST {
					break
				}
			}
		})
	}
}

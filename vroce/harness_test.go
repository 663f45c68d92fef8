package vroce_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is one side of a test connection: a device with a PD, a CQ, a QP
// and one registered buffer.
type node struct {
	dev *vroce.Device
	pd  *vroce.PD
	cq  *vroce.CQ
	qp  *vroce.QP
	buf []byte
	mr  *vroce.MR
}

type pairOpts struct {
	sim      sim.Config
	mtu      vroce.MTU
	bufSize  int
	timeout  uint8
	retry    uint8
	rnrRetry uint8
	access   vroce.Access
	srq      bool
}

func defaultPairOpts() pairOpts {
	return pairOpts{mtu: vroce.MTU1024, bufSize: 1 << 20, timeout: 8, retry: 7, rnrRetry: 7,
		access: vroce.AccessLocalWrite | vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic}
}

var simPort uint16 = 10000

// newSimPair opens two devices on a fresh simulated network and connects
// an RC QP between them. Everything is closed when the test ends.
func newSimPair(t *testing.T, o pairOpts) (a, b *node, network *sim.Network) {
	t.Helper()
	network = sim.NewNetwork(o.sim)
	t.Cleanup(network.Close)
	simPort++
	open := func(host string) *node {
		dev, err := vroce.Open(vroce.Config{Provider: "sim", Addr: fmt.Sprintf("%s:%d", host, simPort), ProviderOptions: network})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		n := &node{dev: dev, buf: make([]byte, o.bufSize)}
		if n.pd, err = dev.AllocPD(); err != nil {
			t.Fatal(err)
		}
		if n.cq, err = dev.CreateCQ(4096); err != nil {
			t.Fatal(err)
		}
		if n.mr, err = n.pd.RegMR(n.buf, o.access); err != nil {
			t.Fatal(err)
		}
		init := vroce.QPInitAttr{Type: vroce.RC, SendCQ: n.cq, RecvCQ: n.cq,
			Cap: vroce.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
		if n.qp, err = n.pd.CreateQP(init); err != nil {
			t.Fatal(err)
		}
		return n
	}
	a, b = open("127.0.0.1"), open("127.0.0.2")
	connect(t, a, b, o)
	connect(t, b, a, o)
	return a, b, network
}

// connect moves n's QP to RTS aimed at peer's QP.
func connect(t *testing.T, n, peer *node, o pairOpts) {
	t.Helper()
	steps := []struct {
		attr vroce.QPAttr
		mask vroce.QPAttrMask
	}{
		{vroce.QPAttr{State: vroce.QPSInit, AccessFlags: o.access}, vroce.QPAttrState | vroce.QPAttrAccessFlags},
		{vroce.QPAttr{State: vroce.QPSRTR, Dest: peer.dev.LocalAddr(), PathMTU: o.mtu, DestQPN: peer.qp.QPN(),
			RQPSN: peer.qp.QPN() ^ 0xabcdef, MaxDestRdAtomic: 16, MinRNRTimer: 1},
			vroce.QPAttrState | vroce.QPAttrAV | vroce.QPAttrPathMTU | vroce.QPAttrDestQPN | vroce.QPAttrRQPSN | vroce.QPAttrMaxDestRdAtomic | vroce.QPAttrMinRNRTimer},
		{vroce.QPAttr{State: vroce.QPSRTS, SQPSN: n.qp.QPN() ^ 0xabcdef, Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16},
			vroce.QPAttrState | vroce.QPAttrSQPSN | vroce.QPAttrTimeout | vroce.QPAttrRetryCnt | vroce.QPAttrRNRRetry | vroce.QPAttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := n.qp.Modify(&s.attr, s.mask); err != nil {
			t.Fatalf("modify to %v: %v", s.attr.State, err)
		}
	}
}

// waitCompletions polls cq until it has n completions or the deadline.
func waitCompletions(t *testing.T, cq *vroce.CQ, n int, within time.Duration) []vroce.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var out []vroce.WorkCompletion
	wc := make([]vroce.WorkCompletion, 64)
	for len(out) < n {
		k, err := cq.PollWait(ctx, wc[:min(len(wc), n-len(out))])
		if err != nil {
			t.Fatalf("waiting for completion %d of %d: %v (have %+v)", len(out)+1, n, err, out)
		}
		out = append(out, wc[:k]...)
	}
	return out
}

func mustSucceed(t *testing.T, wcs []vroce.WorkCompletion) {
	t.Helper()
	for _, wc := range wcs {
		if wc.Status != vroce.WCSuccess {
			t.Fatalf("completion %d (%v) failed: %v", wc.ID, wc.Opcode, wc.Status)
		}
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

var _ = netip.AddrPort{}

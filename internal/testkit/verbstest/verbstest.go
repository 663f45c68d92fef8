package verbstest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
)

// Node is one side of a test connection: a device with a PD, a CQ, a QP
// and one registered buffer.
type Node struct {
	Dev *vroce.Device
	PD  *vroce.PD
	CQ  *vroce.CQ
	QP  *vroce.QP
	Buf []byte
	MR  *vroce.MR
}

// Opts shape a pair.
type Opts struct {
	Sim      sim.Config
	MTU      vroce.MTU
	BufSize  int
	Timeout  uint8
	Retry    uint8
	RNRRetry uint8
	Access   vroce.Access
	MinRNR   uint8
	// SelectiveRepeat negotiates SACK between the two ends; off, the QPs
	// behave as rdma_rxe (go-back-N).
	SelectiveRepeat bool
	// PiggybackACK lets ACKs ride on requests both ways.
	PiggybackACK bool
	// UDPChecksum leaves the ICRC to the UDP checksum both ways (both
	// devices' providers must verify it).
	UDPChecksum bool
	// MaxRdAtomic bounds READ and atomic requests in flight each way; 0
	// means the connection manager's default.
	MaxRdAtomic int
}

// DefaultOpts: 1 KiB MTU, 1 MiB buffers, a 67 ms ACK timeout (as
// ibv_rc_pingpong), 7 retries, infinite RNR retries, all access.
func DefaultOpts() Opts {
	return Opts{MTU: vroce.MTU1024, BufSize: 1 << 20, Timeout: 14, Retry: 7, RNRRetry: 7, MinRNR: 1, SelectiveRepeat: true, PiggybackACK: true,
		Access: vroce.AccessLocalWrite | vroce.AccessRemoteWrite | vroce.AccessRemoteRead | vroce.AccessRemoteAtomic}
}

var simPort atomic.Uint32

// SimPair opens two devices on a fresh simulated network and connects an
// RC QP between them. Everything is closed when the test ends.
func SimPair(t testing.TB, o Opts) (a, b *Node, network *sim.Network) {
	t.Helper()
	network = sim.NewNetwork(o.Sim)
	t.Cleanup(network.Close)
	port := 10000 + simPort.Add(1)
	da := OpenDevice(t, vroce.Config{Provider: "sim", Addr: fmt.Sprintf("127.0.0.1:%d", port), ProviderOptions: network})
	db := OpenDevice(t, vroce.Config{Provider: "sim", Addr: fmt.Sprintf("127.0.0.2:%d", port), ProviderOptions: network})
	a, b = Pair(t, da, db, o)
	return a, b, network
}

// OpenDevice opens a device closed at the end of the test.
func OpenDevice(t testing.TB, cfg vroce.Config) *vroce.Device {
	t.Helper()
	dev, err := vroce.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev
}

// NewNode creates the PD, CQ, MR and an RC QP of a node on dev.
func NewNode(t testing.TB, dev *vroce.Device, o Opts) *Node {
	t.Helper()
	var err error
	n := &Node{Dev: dev, Buf: make([]byte, o.BufSize)}
	if n.PD, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.CQ, err = dev.CreateCQ(8192); err != nil {
		t.Fatal(err)
	}
	if n.MR, err = n.PD.RegMR(n.Buf, o.Access); err != nil {
		t.Fatal(err)
	}
	init := vroce.QPInitAttr{Type: vroce.RC, SendCQ: n.CQ, RecvCQ: n.CQ,
		Cap: vroce.QPCap{MaxSendWR: 1024, MaxRecvWR: 1024, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 64}}
	if n.QP, err = n.PD.CreateQP(init); err != nil {
		t.Fatal(err)
	}
	return n
}

// Pair creates a node on each device and connects their QPs.
func Pair(t testing.TB, da, db *vroce.Device, o Opts) (a, b *Node) {
	t.Helper()
	a, b = NewNode(t, da, o), NewNode(t, db, o)
	Connect(t, a.QP, b.QP, b.Dev, o)
	Connect(t, b.QP, a.QP, a.Dev, o)
	return a, b
}

// Connect moves qp through INIT and RTR to RTS, aimed at peer on peerDev.
// Initial PSNs derive from the QPNs, so both sides agree without talking.
func Connect(t testing.TB, qp, peer *vroce.QP, peerDev *vroce.Device, o Opts) {
	t.Helper()
	err := cm.Connect(qp, InitialPSN(qp.QPN()),
		cm.Peer{QPN: peer.QPN(), PSN: InitialPSN(peer.QPN()), Addr: peerDev.LocalAddr(), MTU: o.MTU, SelectiveRepeat: o.SelectiveRepeat, PiggybackACK: o.PiggybackACK,
			StrictSourcePort: true, UDPChecksum: o.UDPChecksum},
		cm.Params{Access: o.Access, Timeout: o.Timeout, RetryCnt: o.Retry, RNRRetry: o.RNRRetry, MinRNRTimer: o.MinRNR, MaxRdAtomic: o.MaxRdAtomic})
	if err != nil {
		t.Fatal(err)
	}
}

// InitialPSN is the start PSN the harness gives a QP: close to the 24-bit
// wrap, so that every test crosses it.
func InitialPSN(qpn uint32) uint32 { return (0xffffff - 40 + qpn%32) & 0xffffff }

// WaitCompletions polls cq until it holds n completions or within passes.
func WaitCompletions(t testing.TB, cq *vroce.CQ, n int, within time.Duration) []vroce.WorkCompletion {
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

// Sync orders the caller's accesses to n's registered memory after the
// device's: the device touches MR memory under the QP's lock, so taking it
// is a synchronisation point in the Go memory model (as polling a CQ is).
func Sync(n *Node) { _ = n.QP.State() }

// AwaitRecv waits in n's CQ.PollWait for a receive completion, skipping
// the send completions before it, and returns it in wc[0]; a completion
// with an error status is an error. It allocates nothing (wc is the
// caller's), so allocation counts may wait with it.
func AwaitRecv(ctx context.Context, n *Node, wc []vroce.WorkCompletion) error {
	for {
		k, err := n.CQ.PollWait(ctx, wc[:1])
		if err != nil {
			return err
		}
		if k == 1 && wc[0].Status != vroce.WCSuccess {
			return fmt.Errorf("completion failed: %v", wc[0].Status)
		}
		if k == 1 && wc[0].Opcode == vroce.WCRecv {
			return nil
		}
	}
}

// MustSucceed fails the test if any completion has an error status.
func MustSucceed(t testing.TB, wcs []vroce.WorkCompletion) {
	t.Helper()
	for _, wc := range wcs {
		if wc.Status != vroce.WCSuccess {
			t.Fatalf("completion %d (%v) failed: %v", wc.ID, wc.Opcode, wc.Status)
		}
	}
}

// Fill writes a pattern that differs per offset and seed.
func Fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7+i>>8) + seed
	}
}

// WaitFor polls cond, which watches what another goroutine moves (a
// device's counters, say), until it holds or 10 s pass.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Eventually(cond, 10*time.Second) {
		t.Fatalf("gave up waiting for %s", what)
	}
}

// Eventually polls cond as WaitFor does, for at most within, and reports
// whether it came to hold: for a test that then asserts what it found,
// with the numbers, whether or not it did.
func Eventually(cond func() bool, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Microsecond)
	}
	return true
}

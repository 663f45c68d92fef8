package cm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// cmEnd is a device with a connection manager, for the RDMA_CM tests.
type cmEnd struct {
	dev *vroce.Device
	m   *Manager
	pd  *vroce.PD
	cq  *vroce.CQ

	mu  sync.Mutex
	qps []*vroce.QP // every QP newQP made
}

var cmPort atomic.Uint32

// simEnds opens two devices on a simulated network with the given faults,
// each with a manager.
func simEnds(t *testing.T, faults sim.Config, cfg Config) (a, b *cmEnd, network *sim.Network) {
	t.Helper()
	network = sim.NewNetwork(faults)
	t.Cleanup(network.Close)
	port := 20000 + cmPort.Add(1)
	a = openEnd(t, vroce.Config{Provider: "sim", Addr: fmt.Sprintf("127.0.0.1:%d", port), ProviderOptions: network}, cfg)
	b = openEnd(t, vroce.Config{Provider: "sim", Addr: fmt.Sprintf("127.0.0.2:%d", port), ProviderOptions: network}, cfg)
	return a, b, network
}

func openEnd(t *testing.T, dc vroce.Config, cfg Config) *cmEnd {
	t.Helper()
	dev, err := vroce.Open(dc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	m, err := New(dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	e := &cmEnd{dev: dev, m: m}
	e.pd, _ = dev.AllocPD()
	if e.cq, err = dev.CreateCQ(1 << 16); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *cmEnd) newQP(t testing.TB) *vroce.QP {
	t.Helper()
	qp, err := e.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
	if err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	e.qps = append(e.qps, qp)
	e.mu.Unlock()
	return qp
}

// serve accepts every request on l with a fresh QP until ctx ends, and
// returns the accepted IDs when it does.
func serve(ctx context.Context, t *testing.T, e *cmEnd, l *Listener, p Params) <-chan []*ID {
	out := make(chan []*ID, 1)
	go func() {
		var ids []*ID
		defer func() { out <- ids }()
		for {
			r, err := l.Accept(ctx)
			if err != nil {
				return
			}
			qp := e.newQP(t)
			id, err := r.Accept(qp, p)
			if err != nil {
				qp.Destroy()
				continue
			}
			ids = append(ids, id)
		}
	}()
	return out
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds: for state another goroutine owns
// that has no completion to wait on (the RTU arriving, say).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRDMACMConnectAcceptDisconnect(t *testing.T) {
	var events sync.Map // EventType -> count
	count := func(e Event) {
		v, _ := events.LoadOrStore(e.Type, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
	}
	// A lossless network and a long response timeout: no message is
	// repeated, however slow the machine, so the counts below are exact.
	a, b, _ := simEnds(t, sim.Config{}, Config{OnEvent: count, ResponseTimeout: 5 * time.Second})
	l, err := b.m.Listen(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if l.Backlog() != DefaultMaxBacklog {
		t.Fatalf("backlog %d, want the default %d", l.Backlog(), DefaultMaxBacklog)
	}
	ctx := ctxFor(t, 10*time.Second)
	type accepted struct {
		id  *ID
		req *Request
		err error
	}
	acc := make(chan accepted, 1)
	bqp := b.newQP(t)
	go func() {
		r, err := l.Accept(ctx)
		if err != nil {
			acc <- accepted{err: err}
			return
		}
		id, err := r.Accept(bqp, Params{Access: vroce.AccessRemoteWrite, PrivateData: []byte("welcome")})
		acc <- accepted{id, r, err}
	}()
	aqp := a.newQP(t)
	id, err := a.m.Connect(ctx, aqp, b.dev.LocalAddr(), Params{PrivateData: []byte("hello")})
	if err != nil {
		t.Fatal(err)
	}
	got := <-acc
	if got.err != nil {
		t.Fatal(got.err)
	}
	if string(id.PrivateData()) != "welcome" || string(got.req.PrivateData) != "hello" || got.req.Peer != a.dev.LocalAddr() {
		t.Fatalf("private data %q and %q, peer %v", id.PrivateData(), got.req.PrivateData, got.req.Peer)
	}
	if aqp.State() != vroce.QPSRTS || bqp.State() != vroce.QPSRTS || !aqp.Attr().SelectiveRepeat || !bqp.Attr().SelectiveRepeat ||
		!aqp.Attr().PiggybackACK || !bqp.Attr().PiggybackACK || aqp.Attr().UDPChecksum || bqp.Attr().UDPChecksum {
		t.Fatalf("QPs in %v and %v, attributes %+v %+v: want RTS, selective repeat and piggybacked ACKs, and the ICRC (the sim verifies no UDP checksum)",
			aqp.State(), bqp.State(), aqp.Attr(), bqp.Attr())
	}
	waitFor(t, "the RTU", got.id.Established)

	// Data moves over the connection.
	mr, _ := b.pd.RegMR(make([]byte, 64), vroce.AccessLocalWrite)
	if err := bqp.PostRecv(vroce.RecvWR{ID: 7, SGL: []vroce.SGE{mr.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := aqp.PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline | vroce.SendSignaled, Inline: []byte("over rdma_cm")}); err != nil {
		t.Fatal(err)
	}
	wcs := make([]vroce.WorkCompletion, 1)
	if _, err := b.cq.PollWait(ctx, wcs); err != nil || wcs[0].Status != vroce.WCSuccess || string(mr.Bytes()[:wcs[0].ByteLen]) != "over rdma_cm" {
		t.Fatalf("receive: %v %+v", err, wcs[0])
	}

	// The active end disconnects: both QPs end in ERR, both IDs are freed.
	if err := id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both managers to forget the connection", func() bool {
		return a.m.Stats().Connections == 0 && b.m.Stats().Connections == 0
	})
	if aqp.State() != vroce.QPSErr || bqp.State() != vroce.QPSErr {
		t.Fatalf("after disconnect QPs in %v and %v", aqp.State(), bqp.State())
	}
	if err := id.Disconnect(); err != nil {
		t.Fatalf("a second disconnect: %v", err)
	}
	for _, want := range []EventType{EventConnectRequest, EventEstablished, EventDisconnected} {
		v, ok := events.Load(want)
		if !ok || v.(*atomic.Int64).Load() == 0 {
			t.Errorf("no %v event", want)
		}
	}
	sa, sb := a.m.Stats(), b.m.Stats()
	if sa.Sent.REQ != 1 || sb.Received.REQ != 1 || sb.Sent.REP != 1 || sa.Sent.RTU != 1 || sa.Sent.DREQ != 1 || sb.Sent.DREP != 1 {
		t.Fatalf("message counts %+v / %+v", sa, sb)
	}
}

func TestRDMACMRejectCarriesReasonAndPrivateData(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	l, _ := b.m.Listen(0, 0)
	ctx := ctxFor(t, 10*time.Second)
	go func() {
		if r, err := l.Accept(ctx); err == nil {
			r.Reject(0, []byte("go away"))
		}
	}()
	qp := a.newQP(t)
	_, err := a.m.Connect(ctx, qp, b.dev.LocalAddr(), Params{})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejectConsumer || string(rej.PrivateData) != "go away" {
		t.Fatalf("%v, want a consumer reject with private data", err)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatal("a reject is not ECONNREFUSED")
	}
	if qp.State() != vroce.QPSReset {
		t.Fatalf("the rejected QP is in %v, want RESET", qp.State())
	}
	waitFor(t, "the IDs to go", func() bool { return a.m.Stats().Connections == 0 && b.m.Stats().Connections == 0 })
}

func TestRDMACMNothingListeningIsConnectionRefused(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	_, err := a.m.Connect(ctxFor(t, 10*time.Second), a.newQP(t), b.dev.LocalAddr(), Params{})
	var rej *RejectError
	if !errors.As(err, &rej) || rej.Reason != RejectInvalidServiceID || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%v, want ECONNREFUSED for an invalid service ID", err)
	}
	// Another service port on the same device is refused the same way.
	l, _ := b.m.Listen(0, 0)
	defer l.Close()
	_, err = a.m.Connect(ctxFor(t, 10*time.Second), a.newQP(t), b.dev.LocalAddr(), Params{Service: 9})
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%v, want ECONNREFUSED for port 9", err)
	}
}

func TestRDMACMSilentPeerIsUnreachable(t *testing.T) {
	var unreachable atomic.Int32
	onEvent := func(e Event) {
		if e.Type == EventUnreachable {
			unreachable.Add(1)
		}
	}
	a, _, network := simEnds(t, sim.Config{}, Config{ResponseTimeout: time.Millisecond, MaxRetries: 3, OnEvent: onEvent})
	network.Partition(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), a.dev.LocalAddr().Port())
	_, err := a.m.Connect(ctxFor(t, 10*time.Second), a.newQP(t), to, Params{})
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("%v, want ErrUnreachable", err)
	}
	if s := a.m.Stats(); s.Sent.REQ != 4 || s.Retransmits != 3 || s.Connections != 0 || unreachable.Load() != 1 {
		t.Fatalf("stats %+v, unreachable events %d: want 4 REQs, 3 of them retransmissions", s, unreachable.Load())
	}
}

func TestRDMACMCancelledConnectWithdrawsTheRequest(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	l, _ := b.m.Listen(0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	qp := a.newQP(t)
	go func() {
		_, err := a.m.Connect(ctx, qp, b.dev.LocalAddr(), Params{})
		errc <- err
	}()
	waitFor(t, "the request to reach the backlog", func() bool { return b.m.Stats().Connections == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
	// The withdrawal frees the request on the passive end; Accept never
	// returns it.
	waitFor(t, "the passive end to free the request", func() bool { return b.m.Stats().Connections == 0 })
	if r, err := l.Accept(ctxFor(t, 50*time.Millisecond)); err == nil {
		t.Fatalf("Accept returned the withdrawn request from %v", r.Peer)
	}
	if a.m.Stats().Connections != 0 {
		t.Fatal("the active end kept its ID")
	}
}

// TestRDMACMSurvivesALossyNetwork connects, uses and disconnects many QPs
// over a network that loses, duplicates and reorders CM messages: every
// connection comes up, every one goes down, nothing is left behind.
func TestRDMACMSurvivesALossyNetwork(t *testing.T) {
	const n = 200
	a, b, network := simEnds(t, sim.Config{Seed: 7, Loss: 0.15, Duplicate: 0.1, Reorder: 0.1, Jitter: 200 * time.Microsecond},
		Config{ResponseTimeout: 2 * time.Millisecond, MaxRetries: 30})
	l, _ := b.m.Listen(0, 16)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := serve(ctx, t, b, l, Params{})
	ids := make([]*ID, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id, err := a.m.Connect(ctxFor(t, 60*time.Second), a.newQP(t), b.dev.LocalAddr(), Params{PrivateData: []byte{byte(i)}})
			if err != nil {
				errs <- err
				return
			}
			ids[i] = id
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	waitFor(t, "every RTU", func() bool {
		st := b.m.Stats()
		return st.Connections == n && countEstablished(b.m) == n
	})
	stop()
	accepted := <-served
	if len(accepted) != n {
		t.Fatalf("%d accepted, want %d", len(accepted), n)
	}
	seen := map[byte]bool{}
	for _, id := range accepted {
		seen[id.PrivateData()[0]] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct requests accepted, want %d", len(seen), n)
	}
	// Half disconnect from each end.
	for i, id := range ids {
		if i%2 == 0 {
			id.Disconnect()
		}
	}
	for _, id := range accepted {
		if id.PrivateData()[0]%2 == 1 {
			id.Disconnect()
		}
	}
	waitFor(t, "every connection to go", func() bool { return a.m.Stats().Connections == 0 && b.m.Stats().Connections == 0 })
	for _, id := range append(ids, accepted...) {
		if st := id.QP().State(); st != vroce.QPSErr {
			t.Fatalf("QP %#x in %v after disconnect", id.QP().QPN(), st)
		}
	}
	if s := network.Stats(); s.Lost == 0 || s.Duplicated == 0 {
		t.Fatalf("the network did no harm: %+v", s)
	}
	sa, sb := a.m.Stats(), b.m.Stats()
	if sa.Retransmits == 0 || sb.Retransmits == 0 {
		t.Fatalf("no retransmissions under loss: %+v / %+v", sa, sb)
	}
	t.Logf("active %+v", sa)
	t.Logf("passive %+v", sb)
	if err := b.m.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

func countEstablished(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, id := range m.ids {
		if id.state == stEstablished {
			n++
		}
	}
	return n
}

// TestRDMACMFullBacklogDropsAndClientsRetry: requests beyond the backlog
// are dropped unanswered, and their senders' retries get them in later.
func TestRDMACMFullBacklogDropsAndClientsRetry(t *testing.T) {
	const n = 64
	a, b, _ := simEnds(t, sim.Config{}, Config{MaxBacklog: 4, ResponseTimeout: 2 * time.Millisecond, MaxRetries: 30})
	l, _ := b.m.Listen(0, 100) // capped at MaxBacklog
	if l.Backlog() != 4 {
		t.Fatalf("backlog %d, want it capped at 4", l.Backlog())
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for range n {
		wg.Go(func() {
			if _, err := a.m.Connect(ctxFor(t, 60*time.Second), a.newQP(t), b.dev.LocalAddr(), Params{}); err != nil {
				t.Error(err)
				failed.Add(1)
			}
		})
	}
	// Nobody accepts until the backlog has overflowed.
	waitFor(t, "the backlog to overflow", func() bool { return b.m.Stats().BacklogDrops > 0 })
	ctx, stop := context.WithCancel(context.Background())
	served := serve(ctx, t, b, l, Params{})
	wg.Wait()
	stop()
	if got := len(<-served); got != n || failed.Load() != 0 {
		t.Fatalf("%d accepted, %d failed, want all %d accepted", got, failed.Load(), n)
	}
	if s := b.m.Stats(); s.Sent.REJ != 0 {
		t.Fatalf("a full backlog rejected requests: %+v", s)
	}
}

func TestRDMACMCloseDisconnectsAndRejects(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	l, _ := b.m.Listen(0, 0)
	ctx, stop := context.WithCancel(context.Background())
	served := serve(ctx, t, b, l, Params{})
	qp := a.newQP(t)
	if _, err := a.m.Connect(ctxFor(t, 10*time.Second), qp, b.dev.LocalAddr(), Params{}); err != nil {
		t.Fatal(err)
	}
	stop()
	<-served
	// A second request waits in the backlog when the passive manager closes.
	errc := make(chan error, 1)
	go func() {
		_, err := a.m.Connect(ctxFor(t, 10*time.Second), a.newQP(t), b.dev.LocalAddr(), Params{})
		errc <- err
	}()
	waitFor(t, "the second request", func() bool { return b.m.Stats().Connections == 2 })
	b.m.Close()
	if err := <-errc; !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("%v, want the queued request refused on close", err)
	}
	waitFor(t, "the DREQ", func() bool { return qp.State() == vroce.QPSErr && a.m.Stats().Connections == 0 })
	if _, err := b.m.Listen(0, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("listen after close: %v", err)
	}
}

func TestRDMACMNegotiatesMTUAndGoBackN(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	l, _ := b.m.Listen(0, 0)
	ctx, stop := context.WithCancel(context.Background())
	served := serve(ctx, t, b, l, Params{MTU: vroce.MTU1024, GoBackN: true})
	qp := a.newQP(t)
	if _, err := a.m.Connect(ctxFor(t, 10*time.Second), qp, b.dev.LocalAddr(), Params{MTU: vroce.MTU2048}); err != nil {
		t.Fatal(err)
	}
	stop()
	ids := <-served
	for _, q := range []*vroce.QP{qp, ids[0].QP()} {
		if at := q.Attr(); at.PathMTU != vroce.MTU1024 || at.SelectiveRepeat || at.PiggybackACK {
			t.Fatalf("QP %#x: MTU %v, selective repeat %v, piggybacked ACKs %v: want 1024 and neither extension", q.QPN(), at.PathMTU, at.SelectiveRepeat, at.PiggybackACK)
		}
	}
}

// Two vRoCE CMs whose providers verify UDP checksums agree to leave the
// ICRC out, unless either end asks to behave as rxe; data then moves.
func TestRDMACMNegotiatesTheUDPChecksumForTheICRC(t *testing.T) {
	for _, goBackN := range []bool{false, true} {
		a := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{})
		b := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{})
		l, _ := b.m.Listen(0, 0)
		ctx, stop := context.WithCancel(context.Background())
		served := serve(ctx, t, b, l, Params{GoBackN: goBackN})
		qp := a.newQP(t)
		if _, err := a.m.Connect(ctxFor(t, 10*time.Second), qp, b.dev.LocalAddr(), Params{}); err != nil {
			t.Fatal(err)
		}
		stop()
		bqp := (<-served)[0].QP()
		for _, q := range []*vroce.QP{qp, bqp} {
			if q.Attr().UDPChecksum == goBackN {
				t.Fatalf("go-back-N %v: QP %#x leaves the ICRC to the UDP checksum: %v", goBackN, q.QPN(), q.Attr().UDPChecksum)
			}
		}
		mr, _ := b.pd.RegMR(make([]byte, 64), vroce.AccessLocalWrite)
		if err := bqp.PostRecv(vroce.RecvWR{ID: 7, SGL: []vroce.SGE{mr.SGE(0, 64)}}); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostSend(vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: []byte("checked once")}); err != nil {
			t.Fatal(err)
		}
		wc := make([]vroce.WorkCompletion, 1)
		if n, err := b.cq.PollWait(ctxFor(t, 10*time.Second), wc); n != 1 || err != nil || wc[0].Status != vroce.WCSuccess ||
			string(mr.Bytes()[:wc[0].ByteLen]) != "checked once" {
			t.Fatalf("go-back-N %v: receive %d %v %+v %q", goBackN, n, err, wc[0], mr.Bytes()[:wc[0].ByteLen])
		}
	}
}

// checkInvariants verifies the manager's tables agree with each other.
func (m *Manager) checkInvariants() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pending := map[*Listener]int{}
	for k, id := range m.ids {
		switch {
		case id.local != k:
			return fmt.Errorf("ID %#x filed under %#x", id.local, k)
		case id.state == stGone:
			return fmt.Errorf("ID %#x gone but still filed", k)
		case !id.active && m.remote[remoteKey{id.peer, id.remote}] != id:
			return fmt.Errorf("passive ID %#x missing from the peer table", k)
		case id.queued:
			pending[id.listener]++
		}
	}
	for k, id := range m.remote {
		if m.ids[id.local] != id || k.id != id.remote || k.peer != id.peer {
			return fmt.Errorf("peer table entry %v/%#x is stale", k.peer, k.id)
		}
	}
	for _, l := range m.listeners {
		if l.pending != pending[l] || l.pending > l.backlog {
			return fmt.Errorf("listener %d counts %d pending, holds %d (backlog %d)", l.port, l.pending, pending[l], l.backlog)
		}
	}
	return nil
}

func TestParseMADRoundTrip(t *testing.T) {
	msgs := []*mad{
		{attr: attrREQ, tid: 1, localID: 2, serviceID: serviceID(4791), guid: 3, qpn: 0xabcdef, psn: 0x123456, respRes: 16, initDepth: 8,
			mtu: vroce.MTU4096, retryCnt: 7, rnrRetry: 6, ackTO: 14, vflags: vFlagSACK | vFlagPresent,
			srcIP: netip.MustParseAddr("10.0.0.1"), dstIP: netip.MustParseAddr("10.0.0.2"), srcPort: 5000, priv: []byte("56 bytes at most")},
		{attr: attrREQ, localID: 2, qpn: 5, mtu: vroce.MTU256, vflags: vFlagPresent, srcIP: netip.MustParseAddr("fd00::1"), dstIP: netip.MustParseAddr("fd00::2"), priv: bytes.Repeat([]byte{9}, MaxPrivateData)},
		{attr: attrREP, localID: 4, remoteID: 2, qpn: 0x10, psn: 0xffffff, mtu: vroce.MTU1024, respRes: 1, initDepth: 2, rnrRetry: 7, srq: true, vflags: vFlagPresent, guid: 9, priv: bytes.Repeat([]byte{1}, MaxAcceptPrivateData)},
		// Extension MTUs, in a vRoCE REQ and REP.
		{attr: attrREQ, localID: 3, qpn: 6, mtu: vroce.MTU32768, vflags: vFlagSACK | vFlagPiggyACK | vFlagPresent, srcIP: netip.MustParseAddr("127.0.0.1"), dstIP: netip.MustParseAddr("127.0.0.1")},
		{attr: attrREQ, localID: 3, qpn: 6, mtu: vroce.MTU8192, vflags: vFlagPresent, srcIP: netip.MustParseAddr("127.0.0.1"), dstIP: netip.MustParseAddr("127.0.0.1")},
		{attr: attrREP, localID: 4, remoteID: 3, qpn: 0x11, psn: 1, mtu: vroce.MTU16384, vflags: vFlagPiggyACK | vFlagPresent},
		{attr: attrREQ, localID: 3, qpn: 6, mtu: vroce.MTU1344, vflags: vFlagPresent, srcIP: netip.MustParseAddr("10.0.0.1"), dstIP: netip.MustParseAddr("10.0.0.2")},
		{attr: attrREP, localID: 4, remoteID: 3, qpn: 0x11, psn: 1, mtu: vroce.MTU1344, vflags: vFlagPresent},
		{attr: attrREJ, localID: 4, remoteID: 2, which: msgREP, reason: RejectConsumer, priv: []byte("no")},
		{attr: attrMRA, localID: 4, remoteID: 2, which: msgREQ, timeout: 18},
		{attr: attrRTU, localID: 2, remoteID: 4},
		{attr: attrDREQ, localID: 2, remoteID: 4, qpn: 0x10},
		{attr: attrDREP, localID: 4, remoteID: 2},
		{attr: attrSIDRReq, localID: 9, serviceID: serviceID(80), vflags: vFlagPresent},
		{attr: attrSIDRRep, localID: 9, serviceID: serviceID(80), status: sidrUnsupported, qpn: 1, qkey: vroce.GSIQKey, priv: vroceMark[:]},
	}
	for _, want := range msgs {
		var b [vroce.MADSize]byte
		want.marshal(&b)
		var got mad
		if err := parseMAD(b[:], &got); err != nil {
			t.Fatalf("%v: %v", want.attr, err)
		}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", *want) {
			t.Fatalf("%v round trip:\n got %+v\nwant %+v", want.attr, got, *want)
		}
	}
}

// offerREQ is a vRoCE REQ offering mtu.
func offerREQ(mtu vroce.MTU) (b [vroce.MADSize]byte) {
	(&mad{attr: attrREQ, localID: 1, qpn: 2, mtu: mtu, vflags: vFlagsOffered, srcIP: netip.MustParseAddr("10.0.0.1"), dstIP: netip.MustParseAddr("10.0.0.2")}).marshal(&b)
	return b
}

// A REQ offering an extension MTU says the largest IB MTU below it in
// the IB field (4096 for 8192 and up, 1024 for 1344), which is all
// another CM (rdma_rxe's) reads; a vRoCE CM reads the offer from the
// marker. Without the marker the offer is not seen, and a code beyond
// 4096 in the IB field is not believed.
func TestExtensionMTUHidesFromOtherCMs(t *testing.T) {
	for _, tc := range []struct {
		offer, shown vroce.MTU
		code         uint8 // the IB field's
	}{
		{vroce.MTU32768, vroce.MTU4096, 5},
		{vroce.MTU1344, vroce.MTU1024, 3},
	} {
		b := offerREQ(tc.offer)
		d := b[madHeaderLen:]
		if code := d[50] >> 4; code != tc.code {
			t.Fatalf("offering %v: IB MTU field %d, want %d (%v)", tc.offer, code, tc.code, tc.shown)
		}
		var m mad
		if err := parseMAD(b[:], &m); err != nil || m.mtu != tc.offer {
			t.Fatalf("as a vRoCE REQ: MTU %v, %v; want %v", m.mtu, err, tc.offer)
		}
		b[markerOff] = 0 // no vRoCE marker: another CM's REQ
		if err := parseMAD(b[:], &m); err != nil || m.mtu != tc.shown {
			t.Fatalf("as another CM's REQ: MTU %v, %v; want %v", m.mtu, err, tc.shown)
		}
		d[50] = 8<<4 | d[50]&0xf // an extension code in the IB field
		if err := parseMAD(b[:], &m); err != nil || m.mtu != 0 {
			t.Fatalf("extension code in the IB field: MTU %v, %v; want none", m.mtu, err)
		}
	}
}

// A vRoCE marker whose MTU code means nothing leaves the REQ's IB MTU
// as it is, the smallest (256) too: it is no extension MTU.
func TestAMarkerWithoutAnMTULeavesTheIBField(t *testing.T) {
	for _, code := range []uint8{0, 10, 15} {
		b := offerREQ(vroce.MTU256)
		b[markerOff+2] = b[markerOff+2]&0xf0 | code
		var m mad
		if err := parseMAD(b[:], &m); err != nil || m.mtu != vroce.MTU256 || m.vflags == 0 {
			t.Errorf("marker MTU code %d: MTU %v, flags %#x, %v; want 256 from the IB field", code, m.mtu, m.vflags, err)
		}
	}
}

// The path MTU a connection takes: the smaller offer, and an IB MTU when
// the peer is not vRoCE (it reads the REQ's IB field alone).
func TestAgreedMTU(t *testing.T) {
	for _, tc := range []struct {
		ours, theirs vroce.MTU
		vroce        bool
		want         vroce.MTU
	}{
		{vroce.MTU1344, vroce.MTU1344, true, vroce.MTU1344},
		{vroce.MTU1344, vroce.MTU8192, true, vroce.MTU1344},
		{vroce.MTU1344, vroce.MTU1024, true, vroce.MTU1024},
		{vroce.MTU1344, vroce.MTU4096, false, vroce.MTU1024},
		{vroce.MTU8192, vroce.MTU4096, false, vroce.MTU4096},
		{vroce.MTU2048, vroce.MTU1024, false, vroce.MTU1024},
	} {
		p := peerInfo{mtu: tc.theirs}
		if tc.vroce {
			p.vflags = vFlagPresent
		}
		if got := p.agreedMTU(tc.ours); got != tc.want {
			t.Errorf("ours %v, theirs %v (vRoCE %v): %v, want %v", tc.ours, tc.theirs, tc.vroce, got, tc.want)
		}
	}
}

// TestParseMADReadsLinuxLayout checks the field positions against a REQ
// laid out by hand from Linux's cm_msgs.h.
func TestParseMADReadsLinuxLayout(t *testing.T) {
	var b [vroce.MADSize]byte
	b[0], b[1], b[2], b[3] = 1, 0x07, 2, 0x03
	b[17] = 0x10 // REQ
	d := b[24:]
	copy(d[0:], []byte{0, 0, 0, 0x2a})                      // local comm ID
	copy(d[8:], []byte{0, 0, 0, 0, 0x01, 0x06, 0x12, 0xb7}) // service ID, RDMA_PS_TCP port 4791
	copy(d[32:], []byte{0x12, 0x34, 0x56, 16})              // QPN, responder resources
	copy(d[44:], []byte{0x0a, 0xbc, 0xde, 20<<3 | 7})       // PSN, CM timeout, retry count
	d[50] = 5<<4 | 7                                        // 4096, RNR retry 7
	copy(d[140:], []byte{0, 0x40, 0x13, 0x88})              // cma_hdr: IPv4, port 5000
	copy(d[140+16:], []byte{192, 0, 2, 1})                  // source
	copy(d[140+32:], []byte{192, 0, 2, 2})                  // destination
	var m mad
	if err := parseMAD(b[:], &m); err != nil {
		t.Fatal(err)
	}
	if m.localID != 42 || m.serviceID != serviceID(4791) || m.qpn != 0x123456 || m.respRes != 16 || m.psn != 0x0abcde ||
		m.retryCnt != 7 || m.mtu != vroce.MTU4096 || m.rnrRetry != 7 || m.srcPort != 5000 ||
		m.srcIP != netip.MustParseAddr("192.0.2.1") || m.dstIP != netip.MustParseAddr("192.0.2.2") || m.vflags != 0 || len(m.priv) != MaxPrivateData {
		t.Fatalf("decoded %+v", m)
	}
}

func FuzzParseMAD(f *testing.F) {
	for _, a := range []attrID{attrREQ, attrMRA, attrREJ, attrREP, attrRTU, attrDREQ, attrDREP, attrSIDRReq, attrSIDRRep} {
		var b [vroce.MADSize]byte
		(&mad{attr: a, localID: 1, remoteID: 2, qpn: 3, mtu: vroce.MTU1024, vflags: vFlagPresent, priv: []byte("pd")}).marshal(&b)
		f.Add(b[:])
	}
	{ // a UD service's SIDR_REQ, rdma_cm's header in its private data
		var b [vroce.MADSize]byte
		(&mad{attr: attrSIDRReq, localID: 1, serviceID: udServiceID(7174), srcIP: netip.MustParseAddr("10.0.0.2"), dstIP: netip.MustParseAddr("10.0.0.1"), srcPort: 7}).marshal(&b)
		f.Add(b[:])
	}
	for _, a := range []attrID{attrREQ, attrREP} { // an extension MTU's code in the marker
		var b [vroce.MADSize]byte
		(&mad{attr: a, localID: 1, remoteID: 2, qpn: 3, mtu: vroce.MTU1344, vflags: vFlagPresent}).marshal(&b)
		f.Add(b[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m mad
		if parseMAD(b, &m) != nil {
			return
		}
		var again [vroce.MADSize]byte
		m.marshal(&again)
		var m2 mad
		if err := parseMAD(again[:], &m2); err != nil {
			t.Fatalf("re-encoded %v does not parse: %v", m.attr, err)
		}
		if m2.attr != m.attr || m2.localID != m.localID || m2.remoteID != m.remoteID || !bytes.Equal(m2.priv[:len(m.priv)], m.priv) {
			t.Fatalf("round trip changed %+v into %+v", m, m2)
		}
	})
}

// FuzzManagerReceive throws arbitrary, replayed and forged messages at
// both ends of a live connection. Nothing may panic, the managers' tables
// must stay consistent, and the connection must stay up unless a message
// that really is its peer's DREQ ended it (then it is made again).
func FuzzManagerReceive(f *testing.F) {
	for _, a := range []attrID{attrREQ, attrMRA, attrREJ, attrREP, attrRTU, attrDREQ, attrDREP, attrSIDRReq, attrSIDRRep} {
		var b [vroce.MADSize]byte
		(&mad{attr: a, localID: 1, remoteID: 2, qpn: 3, mtu: vroce.MTU1024, vflags: vFlagPresent, serviceID: serviceID(1)}).marshal(&b)
		for _, how := range []byte{0, 1, 2, 3, 7} {
			f.Add(how, b[:])
		}
	}
	var ud [vroce.MADSize]byte // b's UD service
	(&mad{attr: attrSIDRReq, localID: 1, serviceID: udServiceID(1), srcIP: netip.MustParseAddr("127.0.0.1"), dstIP: netip.MustParseAddr("127.0.0.2"), plain: true}).marshal(&ud)
	f.Add(byte(0), ud[:])
	f.Fuzz(func(t *testing.T, how byte, b []byte) {
		fz := fuzzEnds(t)
		target, other := fz.a, fz.b
		if how&1 != 0 {
			target, other = fz.b, fz.a
		}
		from := other.dev.LocalAddr()
		if how&4 != 0 {
			from = netip.MustParseAddrPort("127.0.0.9:1") // a stranger
		}
		msg := bytes.Clone(b)
		if how&2 != 0 && len(msg) == vroce.MADSize {
			// Aim at the live connection: the IDs a forger would need.
			mine, theirs := fz.ids[target.m], fz.ids[other.m]
			binary.BigEndian.PutUint32(msg[24:], theirs.local)
			binary.BigEndian.PutUint32(msg[28:], mine.local)
		}
		target.m.receive(from, msg)
		for _, e := range []*cmEnd{fz.a, fz.b} {
			if err := e.m.checkInvariants(); err != nil {
				t.Fatal(err)
			}
		}
		fz.check(t)
	})
}

// fuzzPair is a connection kept across fuzz inputs.
type fuzzPair struct {
	a, b *cmEnd
	l    *Listener
	ids  map[*Manager]*ID
}

// fuzzEnds makes a fresh pair per input: cheap on the simulated network,
// and no input can spoil the next.
func fuzzEnds(t *testing.T) *fuzzPair {
	a, b, _ := simEnds(t, sim.Config{}, Config{ResponseTimeout: time.Second})
	fz := &fuzzPair{a: a, b: b, ids: map[*Manager]*ID{}}
	fz.l, _ = b.m.Listen(0, 2)
	if qp, _ := b.udQP(t, 1, 8); qp != nil {
		if _, err := b.m.ListenUD(1, qp); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxFor(t, 10*time.Second)
	acc := make(chan *ID, 1)
	go func() {
		r, err := fz.l.Accept(ctx)
		if err != nil {
			acc <- nil
			return
		}
		id, _ := r.Accept(b.newQP(t), Params{})
		acc <- id
	}()
	id, err := a.m.Connect(ctx, a.newQP(t), b.dev.LocalAddr(), Params{})
	if err != nil {
		t.Fatal(err)
	}
	fz.ids[a.m], fz.ids[b.m] = id, <-acc
	if fz.ids[b.m] == nil {
		t.Fatal("accept failed")
	}
	waitFor(t, "the RTU", fz.ids[b.m].Established)
	return fz
}

// check: an ID that says established has its QP in RTS; one that is gone
// has its QP in ERR (its peer's DREQ, a legitimate end).
func (fz *fuzzPair) check(t *testing.T) {
	for m, id := range fz.ids {
		m.mu.Lock()
		st := id.state
		m.mu.Unlock()
		qs := id.QP().State()
		switch {
		case st == stEstablished && qs != vroce.QPSRTS:
			t.Fatalf("established connection's QP in %v", qs)
		case st == stGone && qs != vroce.QPSErr:
			t.Fatalf("ended connection's QP in %v", qs)
		case st != stEstablished && st != stGone:
			t.Fatalf("a live connection moved to state %d", st)
		}
	}
}

// TestRDMACMThousandsThroughASmallBacklog is the short version of the
// scale run (vroce-perf conn_rate): thousands of QPs connect over UDP on
// loopback through a backlog far smaller than the connects in flight;
// every one is established; then every one disconnects and is destroyed,
// and nothing is left: no ID, no QP. A second round must not grow the
// heap past the first (tables keep their high-water capacity, as Go maps
// do, but nothing accumulates).
func TestRDMACMThousandsThroughASmallBacklog(t *testing.T) {
	const n = 3000
	a := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{})
	b := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{MaxBacklog: 64})
	l, _ := b.m.Listen(0, 0)
	var after [2]int64
	for round := range after {
		connectAndClose(t, a, b, l, n)
		// The TimeWait tables empty two seconds after the last
		// disconnect; measure without them.
		waitFor(t, "TimeWait to end", func() bool { return timeWaitLen(a.m) == 0 && timeWaitLen(b.m) == 0 })
		after[round] = liveHeap()
	}
	if grown := after[1] - after[0]; grown > 64*n {
		t.Fatalf("the second round grew the heap %d bytes (%d per connection)", grown, grown/n)
	}
	if b.m.Stats().BacklogDrops == 0 {
		t.Log("the backlog never overflowed on this run")
	}
}

// connectAndClose connects n QPs from a to b with 512 connects in flight,
// checks all are up, disconnects them all and destroys their QPs.
func connectAndClose(t *testing.T, a, b *cmEnd, l *Listener, n int) {
	ctx, stop := context.WithCancel(context.Background())
	served := serve(ctx, t, b, l, Params{})
	ids := make(chan *ID, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	connectCtx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 512 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				id, err := a.m.Connect(connectCtx, a.newQP(t), b.dev.LocalAddr(), Params{})
				if err != nil {
					t.Error(err)
					return
				}
				ids <- id
			}
		})
	}
	wg.Wait()
	close(ids)
	waitFor(t, "every RTU", func() bool { return countEstablished(b.m) == n })
	stop()
	if accepted := len(<-served); len(ids) != n || accepted != n {
		t.Fatalf("%d connected, %d accepted, want %d", len(ids), accepted, n)
	}
	if got := a.dev.Stats().Resources.QP + b.dev.Stats().Resources.QP; got != 2*n {
		t.Fatalf("%d QPs alive, want %d", got, 2*n)
	}
	for id := range ids {
		id.Disconnect()
	}
	waitFor(t, "every connection to go", func() bool { return a.m.Stats().Connections == 0 && b.m.Stats().Connections == 0 })
	for _, e := range []*cmEnd{a, b} {
		for _, qp := range destroyable(e) {
			if err := qp.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
		if r := e.dev.Stats().Resources; r.QP != 0 {
			t.Fatalf("%d QPs left", r.QP)
		}
		if err := e.m.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	}
}

func timeWaitLen(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.timeWait)
}

// destroyable lists the QPs an end created, for the test to destroy.
func destroyable(e *cmEnd) []*vroce.QP {
	e.mu.Lock()
	defer e.mu.Unlock()
	qps := e.qps
	e.qps = nil
	return qps
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // sync.Pool keeps what it drops for one more collection
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestProbe asks a device whether a service listens, over real UDP on
// loopback: a listening service, a device without that service, and a
// port nobody receives on (the host answers with ICMP at once).
func TestProbe(t *testing.T) {
	a := openEnd(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"}, Config{})
	l, _ := a.m.Listen(0, 0)
	defer l.Close()
	ctx := ctxFor(t, 5*time.Second)
	addr := a.dev.LocalAddr()
	for _, c := range []struct {
		service uint16
		want    ProbeResult
	}{{0, ProbeListening}, {addr.Port() + 1, ProbeNotListening}} {
		if got, err := Probe(ctx, addr, c.service); err != nil || got != c.want {
			t.Fatalf("service %d: %v %v, want %v", c.service, got, err, c.want)
		}
	}
	// A UDP port nobody holds: bind one, learn its number, free it.
	free, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closed := free.LocalAddr().(*net.UDPAddr).AddrPort()
	free.Close()
	if got, err := Probe(ctx, closed, 0); err != nil || got != ProbeNoDevice {
		t.Fatalf("closed port: %v %v", got, err)
	}
	// A socket that receives and never answers: silent when ctx ends.
	mute, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if got, err := Probe(short, mute.LocalAddr().(*net.UDPAddr).AddrPort(), 0); err != nil || got != ProbeSilent {
		t.Fatalf("mute port: %v %v", got, err)
	}
	// Two probes answered (a probe asks again after 10 ms, then less
	// often, until answered, so a slow host may hear more).
	if s := a.m.Stats(); s.Received.SIDRReq < 2 || s.Sent.SIDRRep != s.Received.SIDRReq {
		t.Fatalf("stats %+v", s)
	}
}

// A probe nobody answers asks again less and less often: 10 ms, then
// twice as long each time up to 160 ms. Asking every 10 ms, ten thousand
// dials at once kept a server too busy answering to answer in time.
func TestSilentProbeBacksOff(t *testing.T) {
	mute, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if got, err := Probe(ctx, mute.LocalAddr().(*net.UDPAddr).AddrPort(), 0); err != nil || got != ProbeSilent {
		t.Fatalf("mute port: %v %v", got, err)
	}
	// Asks at 0, 10, 30, 70, 150, 310 and 470 ms: 7 in 600 ms (at a
	// fixed 10 ms, 60).
	asked := 0
	buf := make([]byte, 512)
	for {
		mute.SetReadDeadline(time.Now().Add(50 * time.Millisecond)) // the probe has ended: what it sent is queued
		if _, err := mute.Read(buf); err != nil {
			break
		}
		asked++
	}
	if asked < 3 || asked > 12 {
		t.Fatalf("a silent probe asked %d times in 600 ms, want about 7", asked)
	}
}

// TestAManagerRemembersWhoProbedAListeningService: a host that probed a
// service with a listener is remembered (a listener waits longer for its
// SOCKET exchange); one that probed a service nobody listens on, or never
// probed, is not.
func TestAManagerRemembersWhoProbedAListeningService(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	l, err := b.m.Listen(7000, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	host := a.dev.LocalAddr().Addr()
	if r, err := a.m.Probe(ctx, b.dev.LocalAddr(), 7001); err != nil || r != ProbeNotListening {
		t.Fatalf("probe of a service nobody listens on: %v %v", r, err)
	}
	if b.m.ProbedRecently(host) {
		t.Fatal("remembered a probe of a service nobody listens on")
	}
	if r, err := a.m.Probe(ctx, b.dev.LocalAddr(), 7000); err != nil || r != ProbeListening {
		t.Fatalf("probe of the listening service: %v %v", r, err)
	}
	if !b.m.ProbedRecently(host) {
		t.Fatal("forgot a host that probed a listening service")
	}
	if b.m.ProbedRecently(netip.MustParseAddr("127.0.0.9")) {
		t.Fatal("remembers a host that never probed")
	}
}

// TestProbersAreBounded: probes from more hosts than maxProbers (a flood
// from spoofed addresses, say) keep the record at maxProbers.
func TestProbersAreBounded(t *testing.T) {
	a, _, _ := simEnds(t, sim.Config{}, Config{})
	a.m.mu.Lock()
	for i := range maxProbers + 100 {
		a.m.noteProberLocked(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}))
	}
	n := len(a.m.probers)
	a.m.mu.Unlock()
	if n != maxProbers {
		t.Fatalf("%d hosts recorded, want the bound %d", n, maxProbers)
	}
}

// TestSilentInBandProbeBacksOff: a probe through a manager's device backs
// off as the socket probe does: an address nothing answers from is asked
// about 7 times in 600 ms, not 60.
func TestSilentInBandProbeBacksOff(t *testing.T) {
	a, _, network := simEnds(t, sim.Config{}, Config{})
	before := network.Stats().Lost
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	nobody := netip.MustParseAddrPort("127.0.0.9:4791")
	if got, err := a.m.Probe(ctx, nobody, 0); err != nil || got != ProbeSilent {
		t.Fatalf("probe of an address nobody holds: %v %v", got, err)
	}
	if asked := network.Stats().Lost - before; asked < 3 || asked > 12 {
		t.Fatalf("a silent in-band probe asked %d times in 600 ms, want about 7", asked)
	}
}

// TestParseSIDRFromRxe reads the service ID resolution that rdma_cm's
// udaddy sent over Soft-RoCE.
func TestParseSIDRFromRxe(t *testing.T) {
	mads := rxeMADs(t, "udaddy.pcap")
	if len(mads) != 2 || mads[0].err != nil || mads[1].err != nil {
		t.Fatalf("%d messages: %v %v", len(mads), mads[0].err, mads[1].err)
	}
	req, rep := mads[0].msg, mads[1].msg
	if req.attr != attrSIDRReq || rep.attr != attrSIDRRep || req.localID != rep.localID || req.serviceID != rep.serviceID ||
		req.serviceID>>16 != 0x0111 || rep.status != sidrValid || rep.qpn < 2 || rep.qkey != 0x01234567 {
		t.Fatalf("SIDR_REQ %+v\nSIDR_REP %+v", req, rep)
	}
}

// TestManagerProbe asks in-band, over the simulated network.
func TestManagerProbe(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{Seed: 3, Loss: 0.3}, Config{})
	l, _ := b.m.Listen(0, 0)
	defer l.Close()
	ctx := ctxFor(t, 5*time.Second)
	if r, err := a.m.Probe(ctx, b.dev.LocalAddr(), 0); err != nil || r != ProbeListening {
		t.Fatalf("%v %v", r, err)
	}
	if r, err := a.m.Probe(ctx, b.dev.LocalAddr(), 7); err != nil || r != ProbeNotListening {
		t.Fatalf("service 7: %v %v", r, err)
	}
	short, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if r, err := a.m.Probe(short, netip.MustParseAddrPort("127.0.0.3:1"), 0); err != nil || r != ProbeSilent {
		t.Fatalf("nobody: %v %v", r, err)
	}
}

// Over RDMA_CM, two vRoCE devices on a link that carries them agree on an
// extension MTU: the smaller of what each offers, 4096 at most if either
// behaves as rxe.
func TestRDMACMNegotiatesExtensionMTU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		accept Params
		want   vroce.MTU
	}{
		{"both offer the largest", Params{}, vroce.MTU32768},
		{"the acceptor stops at 8192", Params{MTU: vroce.MTU8192}, vroce.MTU8192},
		{"the acceptor stops at 1344", Params{MTU: vroce.MTU1344}, vroce.MTU1344},
		{"the acceptor behaves as rxe", Params{GoBackN: true}, vroce.MTU4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b, _ := simEnds(t, sim.Config{MTU: 40000}, Config{})
			if got := a.dev.Attr().ActiveMTU; got != vroce.MTU32768 {
				t.Fatalf("active MTU %v on a 40,000-byte sim link, want 32768", got)
			}
			l, _ := b.m.Listen(0, 0)
			ctx, stop := context.WithCancel(context.Background())
			served := serve(ctx, t, b, l, tc.accept)
			qp := a.newQP(t)
			if _, err := a.m.Connect(ctxFor(t, 10*time.Second), qp, b.dev.LocalAddr(), Params{}); err != nil {
				t.Fatal(err)
			}
			stop()
			ids := <-served
			for _, q := range []*vroce.QP{qp, ids[0].QP()} {
				if got := q.Attr().PathMTU; got != tc.want {
					t.Fatalf("QP %#x: path MTU %v, want %v", q.QPN(), got, tc.want)
				}
			}
		})
	}
}

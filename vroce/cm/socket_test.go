package cm

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	_ "vroce.dev/providers/udp"
	"vroce.dev/vroce"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type end struct {
	dev *vroce.Device
	pd  *vroce.PD
	cq  *vroce.CQ
	qp  *vroce.QP
	mr  *vroce.MR
}

func newEnd(t *testing.T) *end {
	t.Helper()
	dev, err := vroce.Open(vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	e := &end{dev: dev}
	e.pd, _ = dev.AllocPD()
	e.cq, _ = dev.CreateCQ(64)
	e.mr, _ = e.pd.RegMR(make([]byte, 1<<16), vroce.AccessLocalWrite|vroce.AccessRemoteWrite)
	if e.qp, err = e.pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

func connectBoth(t *testing.T, a, b *end, pa, pb Params) (Peer, Peer, error, error) {
	ca, cb := tcpPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	type res struct {
		p   Peer
		err error
	}
	done := make(chan res, 1)
	go func() {
		p, err := ConnectSocket(ctx, cb, b.qp, pb)
		done <- res{p, err}
	}()
	peerA, errA := ConnectSocket(ctx, ca, a.qp, pa)
	r := <-done
	return peerA, r.p, errA, r.err
}

func TestConnectSocketLinksTwoQPs(t *testing.T) {
	a, b := newEnd(t), newEnd(t)
	pa, pb, errA, errB := connectBoth(t, a, b, Params{Access: vroce.AccessRemoteWrite, PrivateData: []byte("from a")}, Params{Access: vroce.AccessRemoteWrite, MTU: vroce.MTU2048})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if pa.QPN != b.qp.QPN() || pb.QPN != a.qp.QPN() || pa.Addr != b.dev.LocalAddr() {
		t.Fatalf("peers %+v %+v", pa, pb)
	}
	if pa.MTU != vroce.MTU2048 || pb.MTU != vroce.MTU2048 || !pa.SelectiveRepeat || !pb.SelectiveRepeat || !pa.PiggybackACK || !pb.PiggybackACK ||
		!pa.UDPChecksum || !pb.UDPChecksum {
		t.Fatalf("negotiated %+v %+v, want MTU 2048, selective repeat, piggybacked ACKs and the UDP checksum for the ICRC on both", pa, pb)
	}
	if string(pb.PrivateData) != "from a" || len(pa.PrivateData) != 0 {
		t.Fatalf("private data %q %q", pb.PrivateData, pa.PrivateData)
	}
	for _, e := range []*end{a, b} {
		if st := e.qp.State(); st != vroce.QPSRTS {
			t.Fatalf("QP in %v", st)
		}
		if !e.qp.Attr().SelectiveRepeat || !e.qp.Attr().PiggybackACK || !e.qp.Attr().UDPChecksum {
			t.Fatalf("extensions not set on the QP: %+v", e.qp.Attr())
		}
	}
	// Data moves: a WRITE a->b, then a SEND to tell b.
	copy(a.mr.Bytes(), "written by a")
	if err := b.qp.PostRecv(vroce.RecvWR{ID: 1, SGL: []vroce.SGE{b.mr.SGE(100, 64)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.PostSend(
		vroce.SendWR{Opcode: vroce.WRRDMAWrite, SGL: []vroce.SGE{a.mr.SGE(0, 12)}, RemoteAddr: b.mr.Addr() + 1000, RKey: b.mr.RKey()},
		vroce.SendWR{Opcode: vroce.WRSend, Flags: vroce.SendInline, Inline: []byte("done")},
	); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]vroce.WorkCompletion, 1)
	if _, err := b.cq.PollWait(ctx, wc); err != nil || wc[0].Status != vroce.WCSuccess {
		t.Fatalf("receive: %v %+v", err, wc[0])
	}
	if got := string(b.mr.Bytes()[1000:1012]); got != "written by a" {
		t.Fatalf("b holds %q", got)
	}
}

func TestSelectiveRepeatOnlyWhenBothOffer(t *testing.T) {
	a, b := newEnd(t), newEnd(t)
	pa, pb, errA, errB := connectBoth(t, a, b, Params{}, Params{GoBackN: true})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if pa.SelectiveRepeat || pb.SelectiveRepeat || a.qp.Attr().SelectiveRepeat || b.qp.Attr().SelectiveRepeat ||
		pa.PiggybackACK || pb.PiggybackACK || a.qp.Attr().PiggybackACK || b.qp.Attr().PiggybackACK ||
		pa.UDPChecksum || pb.UDPChecksum || a.qp.Attr().UDPChecksum || b.qp.Attr().UDPChecksum {
		t.Fatal("a vRoCE extension negotiated with a go-back-N end")
	}
}

func TestPeerThatIsNotVRoCE(t *testing.T) {
	a := newEnd(t)
	ca, cb := tcpPair(t)
	go func() {
		cb.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
		cb.Close()
	}()
	_, err := ConnectSocket(context.Background(), ca, a.qp, Params{})
	if !errors.Is(err, ErrNotVRoCE) {
		t.Fatalf("%v, want ErrNotVRoCE", err)
	}
	if a.qp.State() != vroce.QPSReset {
		t.Fatalf("a failed exchange left the QP in %v", a.qp.State())
	}
}

// TestPeerThatEchoes: a TCP echo service sends our own exchange back,
// which would aim the QP at itself; the exchange refuses it as not vRoCE
// and leaves the QP in RESET.
func TestPeerThatEchoes(t *testing.T) {
	a := newEnd(t)
	ca, cb := tcpPair(t)
	echoed := make(chan error, 1)
	go func() {
		_, err := io.Copy(cb, cb)
		echoed <- err
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := ConnectSocket(ctx, ca, a.qp, Params{})
	if !errors.Is(err, ErrNotVRoCE) {
		t.Fatalf("%v, want ErrNotVRoCE", err)
	}
	if a.qp.State() != vroce.QPSReset {
		t.Fatalf("a refused exchange left the QP in %v", a.qp.State())
	}
	ca.Close()
	if err := <-echoed; err != nil {
		t.Fatalf("echo: %v", err)
	}
}

func TestPeerOfAnotherVersion(t *testing.T) {
	a := newEnd(t)
	ca, cb := tcpPair(t)
	h := hello{qpn: 5, psn: 6, mtu: 1024, addr: netip.MustParseAddrPort("127.0.0.1:4791")}
	b := h.marshal()
	b[5] = 9
	go cb.Write(b)
	if _, err := ConnectSocket(context.Background(), ca, a.qp, Params{}); !errors.Is(err, ErrVersion) {
		t.Fatalf("%v, want ErrVersion", err)
	}
}

func TestCancelledContextInterruptsASilentPeer(t *testing.T) {
	a := newEnd(t)
	ca, _ := tcpPair(t)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := ConnectSocket(ctx, ca, a.qp, Params{})
		errc <- err
	}()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("%v, want context.Canceled", err)
	}
}

func FuzzReadHello(f *testing.F) {
	h := hello{flags: flagSACK, qpn: 0x123, psn: 0x456, mtu: 4096, addr: netip.MustParseAddrPort("[fd00::1]:4791"), privateData: []byte("pd")}
	f.Add(h.marshal())
	h.mtu = 1344
	f.Add(h.marshal())
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := readHello(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, err := readHello(bytes.NewReader(got.marshal()))
		if err != nil || again.qpn != got.qpn || again.psn != got.psn || again.addr != got.addr || !bytes.Equal(again.privateData, got.privateData) {
			t.Fatalf("round trip changed %+v into %+v (%v)", got, again, err)
		}
	})
}

// Over SOCKET, as over RDMA_CM: the smaller extension MTU of the two,
// 4096 at most if either behaves as rxe; and data moves at it.
func TestSocketNegotiatesExtensionMTU(t *testing.T) {
	a, b := newEnd(t), newEnd(t)
	pa, pb, errA, errB := connectBoth(t, a, b, Params{}, Params{Access: vroce.AccessRemoteWrite, MTU: vroce.MTU16384})
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if pa.MTU != vroce.MTU16384 || pb.MTU != vroce.MTU16384 || a.qp.Attr().PathMTU != vroce.MTU16384 || b.qp.Attr().PathMTU != vroce.MTU16384 {
		t.Fatalf("negotiated %v and %v, want 16384 (loopback offers 32768)", pa.MTU, pb.MTU)
	}
	copy(a.mr.Bytes(), bytes.Repeat([]byte("x"), 40000))
	if err := a.qp.PostSend(vroce.SendWR{Opcode: vroce.WRRDMAWrite, Flags: vroce.SendSignaled, SGL: []vroce.SGE{a.mr.SGE(0, 40000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]vroce.WorkCompletion, 1)
	if _, err := a.cq.PollWait(ctx, wc); err != nil || wc[0].Status != vroce.WCSuccess {
		t.Fatalf("WRITE of three 16 KiB packets: %v %+v", err, wc[0])
	}
	_ = b.qp.State() // the responder wrote under the QP's lock
	if !bytes.Equal(b.mr.Bytes()[:40000], a.mr.Bytes()[:40000]) {
		t.Fatal("the WRITE's bytes differ")
	}

	c, d := newEnd(t), newEnd(t)
	pc, pd, errC, errD := connectBoth(t, c, d, Params{}, Params{GoBackN: true})
	if errC != nil || errD != nil {
		t.Fatal(errC, errD)
	}
	if pc.MTU != vroce.MTU4096 || pd.MTU != vroce.MTU4096 {
		t.Fatalf("with an end behaving as rxe: %v and %v, want 4096", pc.MTU, pd.MTU)
	}
}

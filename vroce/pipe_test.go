package vroce

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"vroce.dev/vroce/wire"
)

// The in-package test kit: providers that join devices inside the test
// process without the sim provider (which imports this package), and RC
// QPs connected over them.

// pipeProvider joins two devices in the process without the sim (which
// imports this package): each Send lands in the peer's queue.
type pipeProvider struct {
	addr   netip.AddrPort
	peer   *pipeProvider
	mu     sync.Mutex
	q      []Packet
	wake   chan struct{}
	done   chan struct{}
	broken chan struct{} // closed: Recv fails for good
	once   sync.Once
	// interrupted: an InterruptRecv (of a turnPipe) is pending.
	interrupted atomic.Bool
}

// turnPipe is a pipeProvider whose receive can be interrupted, so that
// CQ waiters take the device's receive turn (receiveTurn).
type turnPipe struct{ *pipeProvider }

func (p turnPipe) InterruptRecv() {
	p.interrupted.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func newPipePair() (*pipeProvider, *pipeProvider) {
	a := &pipeProvider{addr: netip.MustParseAddrPort("127.0.0.1:4791"), wake: make(chan struct{}, 1), done: make(chan struct{}), broken: make(chan struct{})}
	b := &pipeProvider{addr: netip.MustParseAddrPort("127.0.0.2:4791"), wake: make(chan struct{}, 1), done: make(chan struct{}), broken: make(chan struct{})}
	a.peer, b.peer = b, a
	return a, b
}

func (p *pipeProvider) Recv(pkts []Packet) (int, error) {
	for {
		p.mu.Lock()
		n := 0
		for n < len(pkts) && n < len(p.q) {
			pkts[n].Data = pkts[n].Data[:copy(pkts[n].Data[:cap(pkts[n].Data)], p.q[n].Data)]
			pkts[n].Addr = p.q[n].Addr
			n++
		}
		p.q = p.q[n:]
		p.mu.Unlock()
		if n > 0 {
			return n, nil
		}
		if p.interrupted.Swap(false) {
			return 0, nil
		}
		select {
		case <-p.wake:
		case <-p.done:
			return 0, net.ErrClosed
		case <-p.broken:
			return 0, fmt.Errorf("pipe cut: %w", ErrProviderFailed)
		}
	}
}

func (p *pipeProvider) Send(pkts []Packet) error {
	d := p.peer
	d.mu.Lock()
	for _, pk := range pkts {
		d.q = append(d.q, Packet{Data: pk.AppendTo(nil), Addr: p.addr})
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return nil
}

func (p *pipeProvider) LocalAddr() netip.AddrPort { return p.addr }
func (p *pipeProvider) MTU() int                  { return 9000 }
func (p *pipeProvider) BatchSize() int            { return 16 }
func (p *pipeProvider) Close() error              { p.once.Do(func() { close(p.done) }); return nil }

// pipeEnd is one end of a connected RC pair over pipeProviders.
type pipeEnd struct {
	dev *Device
	qp  *QP
	cq  *CQ
	mr  *MR
}

// pipeQPs opens two devices joined by pipeProviders and connects an RC QP
// on each to the other.
func pipeQPs(t *testing.T) (a, b pipeEnd) {
	t.Helper()
	return pipeQPsWith(t, func(p *pipeProvider) Provider { return p })
}

// pipeQPsWith is pipeQPs over the providers wrap makes of the pipes.
func pipeQPsWith(t *testing.T, wrap func(*pipeProvider) Provider) (a, b pipeEnd) {
	t.Helper()
	return pipeQPsAt(t, wrap, QPAttr{}, 0)
}

// pipeQPsAt is pipeQPsWith with the attributes of rtr that mask names
// added to both QPs' move to RTR.
func pipeQPsAt(t *testing.T, wrap func(*pipeProvider) Provider, rtr QPAttr, mask QPAttrMask) (a, b pipeEnd) {
	t.Helper()
	ppa, ppb := newPipePair()
	pa, pb := wrap(ppa), wrap(ppb)
	da, err := OpenWithProvider(pa, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { da.Close() })
	db, err := OpenWithProvider(pb, Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	mk := func(d *Device) pipeEnd {
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64)
		mr, _ := pd.RegMR(make([]byte, 4096), AccessLocalWrite)
		qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 64}})
		if err != nil {
			t.Fatal(err)
		}
		return pipeEnd{d, qp, cq, mr}
	}
	a, b = mk(da), mk(db)
	for _, pr := range [][2]pipeEnd{{a, b}, {b, a}} {
		qp, peer := pr[0].qp, pr[1].qp
		steps := []struct {
			at QPAttr
			m  QPAttrMask
		}{
			{QPAttr{State: QPSInit, AccessFlags: accessAll}, QPAttrState | QPAttrAccessFlags},
			{QPAttr{State: QPSRTR, Dest: peer.dev.LocalAddr(), PathMTU: MTU1024, DestQPN: peer.qpn, RQPSN: 100, MaxDestRdAtomic: 1, MinRNRTimer: 1},
				QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer},
			{QPAttr{State: QPSRTS, SQPSN: 100, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
				QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
		}
		steps[1].at.UDPChecksum, steps[1].m = rtr.UDPChecksum, steps[1].m|mask&QPAttrUDPChecksum
		for _, s := range steps {
			if err := qp.Modify(&s.at, s.m); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b
}

// sinkProvider keeps what a device sends and never receives: a requester
// on it hears only what the test tells it.
type sinkProvider struct {
	mu    sync.Mutex
	sent  []wire.Packet
	sizes []int // the length of each packet in sent
	done  chan struct{}
	once  sync.Once
}

func (p *sinkProvider) Recv([]Packet) (int, error) { <-p.done; return 0, net.ErrClosed }
func (p *sinkProvider) Send(pkts []Packet) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pk := range pkts {
		var w wire.Packet
		if err := wire.Parse(&w, pk.AppendTo(nil)); err != nil {
			return err
		}
		p.sent = append(p.sent, w)
		p.sizes = append(p.sizes, pk.Len())
	}
	return nil
}
func (p *sinkProvider) LocalAddr() netip.AddrPort { return netip.MustParseAddrPort("127.0.0.1:4791") }
func (p *sinkProvider) MTU() int                  { return 9000 }
func (p *sinkProvider) BatchSize() int            { return 64 }
func (p *sinkProvider) Close() error              { p.once.Do(func() { close(p.done) }); return nil }

// take returns what was sent since the last take.
func (p *sinkProvider) take() []wire.Packet {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent := p.sent
	p.sent, p.sizes = nil, nil
	return sent
}

// takeSized is take with the length of each packet on the wire.
func (p *sinkProvider) takeSized() ([]wire.Packet, []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	sent, sizes := p.sent, p.sizes
	p.sent, p.sizes = nil, nil
	return sent, sizes
}

// nextCompletion waits up to 10 s for cq's next work completion.
func nextCompletion(t *testing.T, cq *CQ) WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]WorkCompletion, 1)
	if _, err := cq.PollWait(ctx, wc); err != nil {
		t.Fatal(err)
	}
	return wc[0]
}

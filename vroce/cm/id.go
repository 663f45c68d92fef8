package cm

import (
	"context"
	"fmt"
	"net/netip"

	"vroce.dev/internal/secrand"
	"vroce.dev/vroce"
)

// state is where an ID is in the IBA CM state machine (the states vRoCE
// needs of it).
type state uint8

const (
	stReqSent     state = iota // active: REQ out, waiting for REP
	stRepRcvd                  // active: REP in, the QP being moved to RTS
	stReqRcvd                  // passive: in a backlog, or handed to Accept
	stAccepting                // passive: the QP being moved to RTS
	stRepSent                  // passive: REP out, waiting for RTU
	stEstablished              // both
	stDreqSent                 // our DREQ out, waiting for DREP
	stGone                     // removed; nothing refers to it any more
)

// ID is one end of one connection (rdma_cm_id). The manager's lock
// guards its fields.
type ID struct {
	m        *Manager
	qp       *vroce.QP
	peer     netip.AddrPort // the device at the other end
	local    uint32         // our communication ID
	remote   uint32         // the peer's (0 until it is known)
	tid      uint64
	peerQPN  uint32
	state    state
	active   bool
	queued   bool // counted in listener's backlog
	retries  uint8
	sentAt   int64                // when the exchange's first message went out
	deadline int64                // of the retransmission timer
	hidx     int32                // place in the timer heap, one-based; 0: none
	out      *[vroce.MADSize]byte // the message retransmitted until answered
	wake     chan struct{}        // active: REP, REJ or failure arrived
	err      error                // active: why the connect failed
	priv     []byte               // the peer's private data (REQ or REP)
	peerInfo peerInfo             // passive until accepted; active from the REP
	listener *Listener
}

// peerInfo is what a REQ or REP says about the QP at the other end.
type peerInfo struct {
	qpn, psn  uint32
	mtu       vroce.MTU
	respRes   uint8
	initDepth uint8
	vflags    uint8
}

// agreedMTU is the path MTU for a connection whose own end offers
// ours: the smaller of the two, and an IB MTU unless the peer speaks
// vRoCE (an rxe peer read only the REQ's IB field, and its REP says no
// MTU at all).
func (p peerInfo) agreedMTU(ours vroce.MTU) vroce.MTU {
	mtu := min(ours, p.mtu)
	if p.vflags&vFlagPresent == 0 {
		mtu = mtu.IB()
	}
	return mtu
}

// QP is the queue pair the connection joins.
func (id *ID) QP() *vroce.QP { return id.qp }

// Peer is the address of the device at the other end.
func (id *ID) Peer() netip.AddrPort { return id.peer }

// PrivateData is what the peer sent with its request (passive end) or
// its acceptance (active end).
func (id *ID) PrivateData() []byte { return id.priv }

// Established reports whether the connection is up.
func (id *ID) Established() bool {
	id.m.mu.Lock()
	defer id.m.mu.Unlock()
	return id.state == stEstablished
}

// WaitEstablished waits until the connection is up: at once on the
// active end, at the RTU on the passive one, whose QP may send from
// Accept on but should not before the peer's QP is ready to receive.
// It fails if the connection ends first, or with ctx.
func (id *ID) WaitEstablished(ctx context.Context) error {
	m := id.m
	for {
		m.mu.Lock()
		switch id.state {
		case stEstablished:
			m.mu.Unlock()
			return nil
		case stRepSent:
		default:
			m.mu.Unlock()
			return fmt.Errorf("cm: the connection with %v ended before it was established", id.peer)
		}
		if id.wake == nil {
			id.wake = make(chan struct{}, 1)
		}
		wake := id.wake
		m.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return fmt.Errorf("cm: waiting for %v: %w", id.peer, ctx.Err())
		}
	}
}

// message builds one of the messages that need only the two IDs.
func (id *ID) message(a attrID) *mad {
	msg := &mad{attr: a, tid: id.tid, localID: id.local, remoteID: id.remote}
	// An active end knows a vRoCE peer from its REP, a passive one from
	// the REQ; before either, assume one.
	msg.plain = id.peerInfo.vflags&vFlagPresent == 0 && (id.state != stReqSent || !id.active)
	if a == attrDREQ {
		msg.qpn = id.peerQPN
	}
	return msg
}

func (id *ID) reject(reason RejectReason, which uint8, priv []byte) *mad {
	msg := id.message(attrREJ)
	msg.reason, msg.which, msg.priv = reason, which, priv
	return msg
}

// Disconnect ends the connection (rdma_disconnect): the QP moves to ERR,
// flushing its work, and a DREQ tells the peer, whose QP follows. The ID
// is released when the peer answers or the retries run out. Calling it
// again, or after the peer disconnected, does nothing.
func (id *ID) Disconnect() error {
	m := id.m
	m.mu.Lock()
	var o outbox
	switch id.state {
	case stEstablished, stRepSent:
		id.state = stDreqSent
		id.out = new([vroce.MADSize]byte)
		id.message(attrDREQ).marshal(id.out)
		o.fail(id.qp)
		o.wake(id)
		m.start(id, &o)
	case stDreqSent, stGone:
	default:
		m.mu.Unlock()
		return fmt.Errorf("cm: disconnect: the connection is not established")
	}
	m.mu.Unlock()
	o.carryOut(m)
	return nil
}

// Connect connects qp, an RC QP in RESET, to the service that listens on
// the device at to (rdma_connect): REQ, then REP, then the QP moves to RTS
// and RTU tells the peer. The service is p.Service, or to's port when
// that is zero (a per-process device receives on its service port).
// A refusal is a *RejectError; silence is ErrUnreachable; ctx bounds the
// wait and withdraws the request when done.
func (m *Manager) Connect(ctx context.Context, qp *vroce.QP, to netip.AddrPort, p Params) (*ID, error) {
	switch {
	case qp.Type() != vroce.RC:
		return nil, fmt.Errorf("cm: connect: RDMA_CM connects RC QPs, not %v", qp.Type())
	case qp.Device() != m.dev:
		return nil, fmt.Errorf("cm: connect: QP %#x belongs to another device", qp.QPN())
	case len(p.PrivateData) > MaxPrivateData:
		return nil, fmt.Errorf("cm: connect: %d bytes of private data exceed %d", len(p.PrivateData), MaxPrivateData)
	case !to.IsValid() || to.Port() == 0 || to.Addr().IsUnspecified():
		return nil, fmt.Errorf("cm: connect: %v is not a peer address", to)
	}
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	service := p.Service
	if service == 0 {
		service = to.Port()
	}
	local := m.dev.LocalAddr()
	// Each end's message carries the PSN that end receives from, as
	// Linux's CM reads them (cm.c; rping.pcap): the active end sends from
	// the REP's starting PSN and receives from its REQ's.
	rqPSN := uint32(secrand.Uint64()) & 0xffffff
	req := &mad{
		attr: attrREQ, tid: secrand.Uint64(), serviceID: serviceID(service), guid: m.guid,
		qpn: qp.QPN(), psn: rqPSN, mtu: p.mtu(m.dev), respRes: p.rdAtomic(), initDepth: p.rdAtomic(),
		retryCnt: or(p.RetryCnt, 7), rnrRetry: or(p.RNRRetry, 7), ackTO: or(p.Timeout, 14),
		srcIP: local.Addr().Unmap(), dstIP: to.Addr(), srcPort: local.Port(),
		priv: p.PrivateData, vflags: vFlagDevicePort,
	}
	req.vflags |= m.offered(&p)
	id := &ID{m: m, qp: qp, peer: to, tid: req.tid, active: true, state: stReqSent, wake: make(chan struct{}, 1)}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, ErrClosed
	}
	id.local = m.newCommID()
	req.localID = id.local
	id.out = new([vroce.MADSize]byte)
	req.marshal(id.out)
	m.ids[id.local] = id
	var o outbox
	m.start(id, &o)
	m.mu.Unlock()
	o.carryOut(m)

	select {
	case <-id.wake:
	case <-ctx.Done():
	}
	m.mu.Lock()
	switch id.state {
	case stRepRcvd:
		if ctx.Err() == nil {
			break
		}
		fallthrough
	case stReqSent:
		// Withdraw: the peer frees what it holds for us.
		m.remove(id)
		o = outbox{}
		o.send(to, id.reject(RejectTimeout, msgREQ, nil))
		m.mu.Unlock()
		o.carryOut(m)
		return nil, fmt.Errorf("cm: connect to %v: %w", to, ctx.Err())
	default:
		err := id.err
		m.mu.Unlock()
		return nil, err
	}
	info := id.peerInfo
	m.mu.Unlock()

	both := req.vflags & info.vflags
	peer := Peer{QPN: info.qpn, PSN: rqPSN, Addr: to, MTU: info.agreedMTU(req.mtu),
		SelectiveRepeat: both&vFlagSACK != 0, PiggybackACK: both&vFlagPiggyACK != 0,
		StrictSourcePort: both&vFlagDevicePort != 0, UDPChecksum: both&vFlagUDPChecksum != 0, MaxRdAtomic: max(int(info.respRes), 1), PrivateData: id.priv}
	err := Connect(qp, info.psn, peer, p)
	o = outbox{}
	m.mu.Lock()
	switch {
	case err != nil:
		if id.state != stGone {
			m.remove(id)
			o.send(to, id.reject(RejectNoQP, msgREP, nil))
		}
	case id.state != stRepRcvd: // the peer gave up meanwhile
		err = id.err
		if err == nil {
			err = fmt.Errorf("cm: connect to %v: the peer abandoned the connection", to)
		}
		o.fail(qp)
	default:
		id.state = stEstablished
		id.wake = nil
		o.send(to, id.message(attrRTU))
		o.event(Event{Type: EventEstablished, ID: id})
	}
	m.mu.Unlock()
	o.carryOut(m)
	if err != nil {
		return nil, err
	}
	return id, nil
}

// Listener is a service's queue of connection requests (rdma_listen).
type Listener struct {
	m       *Manager
	service uint64
	port    uint16
	backlog int
	pending int   // requests queued and not yet taken by Accept
	queue   []*ID // oldest first; withdrawn ones are skipped
	ready   chan struct{}
	closed  bool
}

// Listen starts accepting connection requests for the service port (0:
// the device's own port). backlog bounds the requests waiting for Accept
// (0 or above MaxBacklog: MaxBacklog); when it is full, new requests are
// dropped unanswered and their senders try again.
func (m *Manager) Listen(port uint16, backlog int) (*Listener, error) {
	if port == 0 {
		port = m.dev.LocalAddr().Port()
	}
	if backlog <= 0 || backlog > m.cfg.MaxBacklog {
		backlog = m.cfg.MaxBacklog
	}
	l := &Listener{m: m, service: serviceID(port), port: port, backlog: backlog, ready: make(chan struct{}, 1)}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, taken := m.listeners[l.service]; taken {
		return nil, fmt.Errorf("cm: listen: service port %d: %w", port, vroce.ErrBusy)
	}
	m.listeners[l.service] = l
	return l, nil
}

// Port is the service port the listener serves.
func (l *Listener) Port() uint16 { return l.port }

// Backlog is the listener's effective backlog.
func (l *Listener) Backlog() int { return l.backlog }

func (l *Listener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Accept waits for the next connection request (rdma_get_request). The
// caller answers it with Request.Accept or Request.Reject.
func (l *Listener) Accept(ctx context.Context) (*Request, error) {
	m := l.m
	for {
		m.mu.Lock()
		for len(l.queue) > 0 {
			id := l.queue[0]
			l.queue[0] = nil
			l.queue = l.queue[1:]
			if id.state != stReqRcvd {
				continue // withdrawn while it waited
			}
			l.pending--
			id.queued = false
			if len(l.queue) > 0 {
				l.signal()
			}
			r := &Request{id: id, Peer: id.peer, PrivateData: id.priv, MTU: id.peerInfo.mtu,
				SelectiveRepeat: id.peerInfo.vflags&vFlagSACK != 0}
			m.mu.Unlock()
			return r, nil
		}
		if len(l.queue) == 0 {
			l.queue = nil // let a drained queue's array go
		}
		closed := l.closed
		m.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		select {
		case <-l.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("cm: accept: %w", ctx.Err())
		}
	}
}

// Close stops the listener; requests still queued are rejected.
func (l *Listener) Close() error {
	m := l.m
	var o outbox
	m.mu.Lock()
	if !l.closed {
		l.closed = true
		if m.listeners[l.service] == l {
			delete(m.listeners, l.service)
		}
		for _, id := range l.queue {
			if id.state == stReqRcvd {
				m.remove(id)
				o.send(id.peer, id.reject(RejectInvalidServiceID, msgREQ, nil))
			}
		}
		l.queue = nil
		l.signal()
	}
	m.mu.Unlock()
	o.carryOut(m)
	return nil
}

// Request is a connection request taken from a listener.
type Request struct {
	id              *ID
	Peer            netip.AddrPort // the device that asks
	PrivateData     []byte         // up to MaxPrivateData bytes
	MTU             vroce.MTU      // the largest path MTU the peer offers
	SelectiveRepeat bool           // the peer speaks it
}

// Accept connects qp, an RC QP in RESET, to the requesting QP
// (rdma_accept): it moves qp to RTS, so it can send at once, and answers
// with a REP, repeated until the peer's RTU. p.PrivateData may hold up to
// MaxAcceptPrivateData bytes. If the peer withdrew meanwhile the error is
// ErrWithdrawn and qp, in RTS or ERR, is the caller's to destroy.
func (r *Request) Accept(qp *vroce.QP, p Params) (*ID, error) {
	id := r.id
	m := id.m
	switch {
	case qp.Type() != vroce.RC:
		return nil, fmt.Errorf("cm: accept: RDMA_CM connects RC QPs, not %v", qp.Type())
	case qp.Device() != m.dev:
		return nil, fmt.Errorf("cm: accept: QP %#x belongs to another device", qp.QPN())
	case len(p.PrivateData) > MaxAcceptPrivateData:
		return nil, fmt.Errorf("cm: accept: %d bytes of private data exceed %d", len(p.PrivateData), MaxAcceptPrivateData)
	}
	m.mu.Lock()
	if err := r.claim(stAccepting); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	info := id.peerInfo
	m.mu.Unlock()

	mtu := info.agreedMTU(p.mtu(m.dev))
	vflags := info.vflags & (vFlagDevicePort | m.offered(&p)) // what both ends speak
	// The passive end sends from the REQ's starting PSN and receives from
	// its REP's (see Manager.Connect).
	rqPSN := uint32(secrand.Uint64()) & 0xffffff
	peer := Peer{QPN: info.qpn, PSN: rqPSN, Addr: id.peer, MTU: mtu, SelectiveRepeat: vflags&vFlagSACK != 0,
		PiggybackACK: vflags&vFlagPiggyACK != 0, StrictSourcePort: vflags&vFlagDevicePort != 0, UDPChecksum: vflags&vFlagUDPChecksum != 0,
		MaxRdAtomic: max(int(info.respRes), 1), PrivateData: id.priv}
	err := Connect(qp, info.psn, peer, p)
	var o outbox
	m.mu.Lock()
	switch {
	case err != nil:
		if id.state != stGone {
			m.remove(id)
			o.send(id.peer, id.reject(RejectNoQP, msgREQ, nil))
		}
	case id.state != stAccepting:
		err = ErrWithdrawn
		o.fail(qp)
	default:
		id.qp, id.peerQPN = qp, info.qpn
		id.state = stRepSent
		rep := &mad{attr: attrREP, tid: id.tid, localID: id.local, remoteID: id.remote, qpn: qp.QPN(), psn: rqPSN,
			mtu: mtu, respRes: p.rdAtomic(), initDepth: p.rdAtomic(), rnrRetry: or(p.RNRRetry, 7), guid: m.guid, priv: p.PrivateData}
		if info.vflags&vFlagPresent != 0 {
			rep.vflags = vFlagPresent | vflags
		} else {
			rep.plain = true
		}
		id.out = new([vroce.MADSize]byte)
		rep.marshal(id.out)
		m.start(id, &o)
	}
	m.mu.Unlock()
	o.carryOut(m)
	if err != nil {
		return nil, fmt.Errorf("cm: accept: %w", err)
	}
	return id, nil
}

// Reject refuses the request (rdma_reject) with a reason (0: the
// application's own) and up to MaxRejectPrivateData bytes.
func (r *Request) Reject(reason RejectReason, privateData []byte) error {
	if len(privateData) > MaxRejectPrivateData {
		return fmt.Errorf("cm: reject: %d bytes of private data exceed %d", len(privateData), MaxRejectPrivateData)
	}
	if reason == 0 {
		reason = RejectConsumer
	}
	id := r.id
	m := id.m
	var o outbox
	m.mu.Lock()
	err := r.claim(stGone)
	if err == nil {
		m.remove(id)
		o.send(id.peer, id.reject(reason, msgREQ, privateData))
	}
	m.mu.Unlock()
	o.carryOut(m)
	return err
}

// claim moves a request that is still waiting for an answer to s.
func (r *Request) claim(s state) error {
	switch r.id.state {
	case stReqRcvd:
		r.id.state = s
		return nil
	case stGone:
		if r.id.m.closed {
			return ErrClosed
		}
		return ErrWithdrawn
	default:
		return fmt.Errorf("cm: the request was already answered")
	}
}

func or(v, def uint8) uint8 {
	if v == 0 {
		return def
	}
	return v
}

func (p *Params) mtu(dev *vroce.Device) vroce.MTU {
	mtu := dev.Attr().ActiveMTU
	if p.MTU != 0 {
		mtu = min(mtu, p.MTU)
	}
	if p.GoBackN { // as rxe: no extension MTU either
		mtu = mtu.IB()
	}
	return mtu
}

// offersUDPChecksum reports whether this end offers to leave the ICRC to
// the UDP checksum: when its device's provider verifies it, unless the
// caller asked to behave as rxe.
func (p *Params) offersUDPChecksum(dev *vroce.Device) bool {
	return !p.GoBackN && dev.Attr().UDPChecksum
}

// offered is the extensions this CM offers its peer (mad.vflags).
func (m *Manager) offered(p *Params) uint8 {
	var f uint8
	if !p.GoBackN {
		f |= vFlagsOffered
	}
	if p.offersUDPChecksum(m.dev) {
		f |= vFlagUDPChecksum
	}
	return f
}

func (p *Params) rdAtomic() uint8 {
	if p.MaxRdAtomic <= 0 {
		return 128
	}
	return uint8(min(p.MaxRdAtomic, 255))
}

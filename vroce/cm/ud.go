package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"vroce.dev/vroce"
)

// UD services, as rdma_cm's RDMA_PS_UDP port space has them (udaddy): a
// server names a UD QP for a service port; a client resolves the port to
// that QP's number and Q_Key with one SIDR_REQ and its SIDR_REP, and
// sends datagrams to it. No connection exists: nothing is torn down.

// UDPQKey is the Q_Key rdma_cm gives every QP of its UDP port space.
// A UD QP serving or resolving a service through a Manager uses it, so
// that either end can be rdma_cm's.
const UDPQKey = 0x01234567

// udServiceID is the service ID of a UDP port-space port.
func udServiceID(port uint16) uint64 { return psUDP<<16 | uint64(port) }

// UDListener answers resolutions of one UD service port with its QP.
type UDListener struct {
	m       *Manager
	service uint64
	port    uint16
	qp      *vroce.QP
}

// ListenUD serves the UD service port (0: the device's own port) with
// qp, a UD QP of the manager's device whose Q_Key is UDPQKey: every
// SIDR_REQ for the port is answered with qp's number and that Q_Key.
func (m *Manager) ListenUD(port uint16, qp *vroce.QP) (*UDListener, error) {
	if qp == nil || qp.Type() != vroce.UD || qp.Device() != m.dev {
		return nil, fmt.Errorf("cm: listen UD: %w: a UD QP of the manager's device serves a UD service", vroce.ErrInvalid)
	}
	if port == 0 {
		port = m.dev.LocalAddr().Port()
	}
	l := &UDListener{m: m, service: udServiceID(port), port: port, qp: qp}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, ErrClosed
	}
	if _, taken := m.udListeners[l.service]; taken {
		return nil, fmt.Errorf("cm: listen UD: service port %d: %w", port, vroce.ErrBusy)
	}
	m.udListeners[l.service] = l
	return l, nil
}

// Port is the service port l serves.
func (l *UDListener) Port() uint16 { return l.port }

// Close stops answering for the port; datagrams already resolved still
// reach the QP, which stays the caller's.
func (l *UDListener) Close() error {
	l.m.mu.Lock()
	defer l.m.mu.Unlock()
	if l.m.udListeners[l.service] == l {
		delete(l.m.udListeners, l.service)
	}
	return nil
}

// UDPeer is a resolved UD service: where its datagrams go.
type UDPeer struct {
	Addr netip.AddrPort // the peer device
	QPN  uint32
	QKey uint32
}

// ResolveUD asks the device at to (its address and UDP port; 4791 for
// Linux) which QP serves the UD service port (0: to's port), as
// rdma_resolve_route and rdma_connect do in the UDP port space. Nothing
// serving the port is a *RejectError (ECONNREFUSED); no answer before
// ctx ends is ErrUnreachable.
func (m *Manager) ResolveUD(ctx context.Context, to netip.AddrPort, service uint16) (UDPeer, error) {
	if !to.IsValid() || to.Port() == 0 {
		return UDPeer{}, fmt.Errorf("cm: resolve UD: %v is not an address with a port", to)
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	if service == 0 {
		service = to.Port()
	}
	local := m.dev.LocalAddr()
	req := &mad{attr: attrSIDRReq, serviceID: udServiceID(service), srcIP: local.Addr().Unmap(), dstIP: to.Addr(), srcPort: local.Port()}
	a, err := m.askSIDR(ctx, to, req)
	switch {
	case errors.Is(err, ErrClosed):
		return UDPeer{}, err
	case err != nil:
		return UDPeer{}, fmt.Errorf("cm: resolve UD service %d at %v: %w", service, to, ErrUnreachable)
	case a.status != sidrValid:
		return UDPeer{}, &RejectError{Reason: RejectInvalidServiceID}
	case a.qpn < 2 || a.qpn > 0xffffff:
		return UDPeer{}, fmt.Errorf("cm: resolve UD service %d at %v: %w: the answer names QPN %#x", service, to, errMalformed, a.qpn)
	}
	return UDPeer{Addr: to, QPN: a.qpn, QKey: a.qkey}, nil
}

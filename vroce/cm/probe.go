package cm

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"vroce.dev/internal/secrand"
	"vroce.dev/vroce"
)

// vroceMark opens the private data of a vRoCE SIDR_REP: a SIDR answer
// from any other CM lacks it.
var vroceMark = [4]byte{vMagic0, vMagic1, vVersion, vFlagSACK}

// ProbeResult is what a probe learnt about a service.
type ProbeResult uint8

// Probe results.
const (
	// ProbeListening: a vRoCE device answered and the service listens.
	ProbeListening ProbeResult = iota
	// ProbeNotListening: a vRoCE device answered, but nothing listens on
	// the service (or the answer came from another kind of CM).
	ProbeNotListening
	// ProbeNoDevice: nothing receives on the UDP port (the host said so).
	ProbeNoDevice
	// ProbeSilent: no answer before the context ended: the UDP path is
	// closed, or the host keeps quiet.
	ProbeSilent
)

var probeNames = [...]string{"listening", "not listening", "no device", "silent"}

func (r ProbeResult) String() string {
	if int(r) < len(probeNames) {
		return probeNames[r]
	}
	return fmt.Sprintf("ProbeResult(%d)", uint8(r))
}

// A probe asks again after probeInterval, then after twice as long each
// time, up to maxProbeInterval: ten thousand dials at once, each asking
// every 10 ms, sent a million requests a second to a server busy
// answering them, and the answers came too late for the dials.
const (
	probeInterval    = 10 * time.Millisecond
	maxProbeInterval = 160 * time.Millisecond
)

// Probe asks the device at to whether a vRoCE service listens on the
// service port (0: to's port), with an IB CM service ID resolution request
// (SIDR_REQ) on QP1, sent from a UDP socket of its own (vroce.ProbeGSI),
// so that a host with nothing on the port answers at once (ICMP port
// unreachable) and the probe needs no device. ctx bounds the wait; a
// probe that hears nothing returns ProbeSilent when ctx ends. Any answer
// comes before a single byte goes to the TCP service on the same port,
// which is how a dialer avoids speaking vRoCE to a plain TCP server.
func Probe(ctx context.Context, to netip.AddrPort, service uint16) (ProbeResult, error) {
	if !to.IsValid() || to.Port() == 0 {
		return 0, fmt.Errorf("cm: probe: %v is not an address with a port", to)
	}
	if service == 0 {
		service = to.Port()
	}
	reqID := uint32(secrand.Uint64())
	var req [vroce.MADSize]byte
	(&mad{attr: attrSIDRReq, tid: secrand.Uint64(), localID: reqID, serviceID: serviceID(service)}).marshal(&req)
	var result ProbeResult
	interval := probeInterval / 2
	answer, err := vroce.ProbeGSI(ctx, to, req[:], func(b []byte) bool {
		var ok bool
		result, ok = probeAnswer(b, reqID)
		return ok
	}, func() time.Duration {
		interval = min(2*interval, maxProbeInterval)
		return interval
	})
	switch {
	case errors.Is(err, vroce.ErrNoDevice):
		return ProbeNoDevice, nil
	case err != nil:
		return 0, fmt.Errorf("cm: probe %v: %w", to, err)
	case answer == nil:
		return ProbeSilent, nil
	}
	return result, nil
}

// probeAnswer reads a SIDR_REP to request reqID from a MAD.
func probeAnswer(b []byte, reqID uint32) (ProbeResult, bool) {
	var m mad
	if parseMAD(b, &m) != nil || m.attr != attrSIDRRep || m.localID != reqID {
		return 0, false
	}
	if m.status != sidrValid || len(m.priv) < 2 || m.priv[0] != vMagic0 || m.priv[1] != vMagic1 {
		return ProbeNotListening, true
	}
	return ProbeListening, true
}

// Probe asks, as the function Probe does, but in-band: through this
// manager's device, so it works on any provider (the simulated network,
// say). Without an ICMP answer to go by, a device that is not there is
// silent: ProbeSilent when ctx ends.
func (m *Manager) Probe(ctx context.Context, to netip.AddrPort, service uint16) (ProbeResult, error) {
	if !to.IsValid() || to.Port() == 0 {
		return 0, fmt.Errorf("cm: probe: %v is not an address with a port", to)
	}
	to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
	if service == 0 {
		service = to.Port()
	}
	a, err := m.askSIDR(ctx, to, &mad{attr: attrSIDRReq, serviceID: serviceID(service)})
	switch {
	case errors.Is(err, ErrClosed):
		return 0, err
	case err != nil:
		return ProbeSilent, nil
	case a.status != sidrValid || !a.vroce:
		return ProbeNotListening, nil
	}
	return ProbeListening, nil
}

// sidrAnswer is what a SIDR_REP said.
type sidrAnswer struct {
	status    uint8
	qpn, qkey uint32
	vroce     bool // its private data opens with vRoCE's mark
}

// sidrWait is a SIDR_REQ waiting for its answer from peer.
type sidrWait struct {
	c    chan sidrAnswer // buffered: the asker may have gone
	peer netip.Addr
}

// askSIDR sends req, a SIDR_REQ, to to until the answer from that
// address comes back or ctx ends (ctx's error), backing off as Probe
// does.
func (m *Manager) askSIDR(ctx context.Context, to netip.AddrPort, req *mad) (sidrAnswer, error) {
	c := make(chan sidrAnswer, 1)
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return sidrAnswer{}, ErrClosed
	}
	var reqID uint32
	for reqID == 0 || m.sidrWaits[reqID].c != nil {
		reqID = uint32(secrand.Uint64())
	}
	m.sidrWaits[reqID] = sidrWait{c: c, peer: to.Addr().Unmap()}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.sidrWaits, reqID)
		m.mu.Unlock()
	}()
	req.tid, req.localID = secrand.Uint64(), reqID
	t := time.NewTimer(probeInterval)
	defer t.Stop()
	for interval := probeInterval; ; {
		var o outbox
		o.send(to, req)
		o.carryOut(m)
		select {
		case a := <-c:
			return a, nil
		case <-ctx.Done():
			return sidrAnswer{}, ctx.Err()
		case <-t.C:
			interval = min(2*interval, maxProbeInterval)
			t.Reset(interval)
		}
	}
}

package cm

import (
	"bytes"
	"net/netip"
	"time"

	"vroce.dev/vroce"
)

// Message handling. Every message after a REQ names both communication
// IDs and must come from the device the connection is with; anything else
// is counted as unexpected and dropped, so a stray, repeated or forged
// message cannot touch a connection it does not belong to.

// receive is the GSI handler: it runs on the goroutine receiving for the
// device.
func (m *Manager) receive(from netip.AddrPort, b []byte) {
	<-m.gsiSet
	var msg mad
	if err := parseMAD(b, &msg); err != nil {
		m.counts.malformed.Add(1)
		return
	}
	m.received[msg.attr-attrREQ].Add(1)
	var o outbox
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	ok := true
	switch msg.attr {
	case attrREQ:
		ok = m.onREQ(from, &msg, &o)
	case attrMRA:
		ok = m.onMRA(from, &msg)
	case attrREJ:
		ok = m.onREJ(from, &msg, &o)
	case attrREP:
		ok = m.onREP(from, &msg, &o)
	case attrRTU:
		ok = m.onRTU(from, &msg, &o)
	case attrDREQ:
		ok = m.onDREQ(from, &msg, &o)
	case attrDREP:
		ok = m.onDREP(from, &msg, &o)
	case attrSIDRReq:
		ok = m.onSIDRReq(from, &msg, &o)
	case attrSIDRRep:
		ok = m.onSIDRRep(from, &msg)
	}
	m.mu.Unlock()
	if !ok {
		m.counts.unexpected.Add(1)
	}
	o.carryOut(m)
}

// lookup finds the connection a message names, checking it comes from
// that connection's peer and, once the peer's ID is known, names it too.
func (m *Manager) lookup(from netip.AddrPort, msg *mad) *ID {
	id := m.ids[msg.remoteID]
	if id == nil || !id.from(from, msg) || (id.remote != 0 && id.remote != msg.localID) {
		return nil
	}
	return id
}

// from reports whether a message from src may be the peer's. A vRoCE CM
// sends from its device port, which is where it receives; Linux's QP1
// sends from a port hashed from its QPN (55410) and receives on RoCEv2's,
// so from a peer that is not vRoCE (neither its REQ or REP nor this
// message says so) the address alone must match.
func (id *ID) from(src netip.AddrPort, msg *mad) bool {
	if src == id.peer {
		return true
	}
	return src.Addr() == id.peer.Addr() && id.peerInfo.vflags&vFlagPresent == 0 && msg.vflags&vFlagPresent == 0
}

// peerDevice is the address a REQ's sender receives at: its source
// address for a vRoCE CM, RoCEv2's port for any other (see ID.from).
func peerDevice(from netip.AddrPort, msg *mad) netip.AddrPort {
	if msg.vflags&vFlagPresent != 0 {
		return from
	}
	return netip.AddrPortFrom(from.Addr(), roceV2Port)
}

func (m *Manager) onREQ(from netip.AddrPort, msg *mad, o *outbox) bool {
	from = peerDevice(from, msg)
	answer := func(reason RejectReason) bool {
		o.send(from, &mad{attr: attrREJ, tid: msg.tid, remoteID: msg.localID, which: msgREQ, reason: reason, plain: msg.vflags == 0})
		return false
	}
	if id := m.remote[remoteKey{from, msg.localID}]; id != nil {
		switch id.state {
		case stReqRcvd, stAccepting: // still deciding: tell the peer to wait
			o.send(from, &mad{attr: attrMRA, tid: id.tid, localID: id.local, remoteID: id.remote, which: msgREQ, timeout: serviceTimeoutCode})
			return true
		case stRepSent: // our REP was lost
			o.sendRaw(from, id.out)
			return true
		}
		return false // a late copy of a REQ long answered
	}
	if _, ok := m.timeWait[remoteKey{from, msg.localID}]; ok {
		return false // a late copy of a REQ for a connection that ended
	}
	l := m.listeners[msg.serviceID]
	switch {
	case msg.localID == 0 || msg.qpn < 2 || msg.qpn > 0xffffff:
		return false // not a request anyone could answer
	case l == nil:
		return answer(RejectInvalidServiceID)
	case msg.mtu == 0:
		return answer(RejectInvalidMTU)
	case l.pending >= l.backlog:
		// Dropped unanswered, as rdma_ucm does: the peer tries again.
		m.counts.backlogDrops.Add(1)
		return true
	}
	id := &ID{
		m: m, peer: from, local: m.newCommID(), remote: msg.localID, tid: msg.tid, state: stReqRcvd,
		peerQPN: msg.qpn, listener: l, queued: true, priv: bytes.Clone(msg.priv),
		peerInfo: peerInfo{qpn: msg.qpn, psn: msg.psn, mtu: msg.mtu, respRes: msg.respRes, initDepth: msg.initDepth, vflags: msg.vflags},
	}
	m.ids[id.local] = id
	m.remote[remoteKey{from, msg.localID}] = id
	l.queue = append(l.queue, id)
	l.pending++
	l.signal()
	o.event(Event{Type: EventConnectRequest, ID: id})
	return true
}

// serviceTimeoutCode is the wait an MRA asks for: 4.096 us << 18, about
// a second.
const serviceTimeoutCode = 18

func (m *Manager) onMRA(from netip.AddrPort, msg *mad) bool {
	id := m.lookup(from, msg)
	if id == nil || id.state != stReqSent || msg.which != msgREQ {
		return false
	}
	id.remote = msg.localID
	id.retries = 0
	wait := time.Duration(4096<<min(msg.timeout, 24)) * time.Nanosecond
	m.arm(id, min(wait, 4*time.Second)+m.cfg.ResponseTimeout)
	return true
}

func (m *Manager) onREJ(from netip.AddrPort, msg *mad, o *outbox) bool {
	var id *ID
	if msg.remoteID != 0 {
		id = m.lookup(from, msg)
	} else {
		id = m.remote[remoteKey{from, msg.localID}] // withdrawn before our answer
		if id == nil {                              // by a CM that is not vRoCE
			id = m.remote[remoteKey{netip.AddrPortFrom(from.Addr(), roceV2Port), msg.localID}]
		}
	}
	if id == nil {
		return false
	}
	switch id.state {
	case stReqSent, stRepRcvd:
		m.remove(id)
		id.err = &RejectError{Reason: msg.reason, PrivateData: bytes.Clone(msg.priv)}
		o.wake(id)
		o.event(Event{Type: EventRejected, ID: id, Reason: msg.reason})
	case stReqRcvd, stAccepting:
		m.remove(id)
	case stRepSent:
		m.remove(id)
		o.fail(id.qp)
		o.event(Event{Type: EventConnectError, ID: id, Reason: msg.reason})
		o.wake(id)
	default:
		return false
	}
	return true
}

func (m *Manager) onREP(from netip.AddrPort, msg *mad, o *outbox) bool {
	id := m.lookup(from, msg)
	if id == nil {
		if m.ids[msg.remoteID] == nil && msg.remoteID != 0 {
			// A REP for a connection we no longer have (we withdrew, or a
			// replay): refuse it, so the peer frees its QP.
			o.send(peerDevice(from, msg), &mad{attr: attrREJ, tid: msg.tid, localID: msg.remoteID, remoteID: msg.localID, which: msgREP, reason: RejectInvalidCommID, plain: msg.vflags == 0})
		}
		return false
	}
	if !id.active {
		return false
	}
	switch id.state {
	case stReqSent:
		if msg.qpn < 2 || msg.qpn > 0xffffff {
			return false
		}
		id.remote = msg.localID
		id.peerQPN = msg.qpn
		mtu := msg.mtu
		if mtu == 0 { // not a vRoCE peer: the REQ's MTU stands
			mtu = 4096
		}
		id.peerInfo = peerInfo{qpn: msg.qpn, psn: msg.psn, mtu: mtu, respRes: msg.respRes, initDepth: msg.initDepth, vflags: msg.vflags}
		id.priv = bytes.Clone(msg.priv)
		id.state = stRepRcvd
		m.answered(id)
		id.out = nil
		m.stopTimer(id)
		o.wake(id)
		return true
	case stEstablished:
		o.send(id.peer, id.message(attrRTU)) // our RTU was lost
		return true
	case stRepRcvd:
		return true // a copy of the REP being acted on
	}
	return false
}

func (m *Manager) onRTU(from netip.AddrPort, msg *mad, o *outbox) bool {
	id := m.lookup(from, msg)
	if id == nil || id.active || id.state != stRepSent {
		return false
	}
	id.state = stEstablished
	m.answered(id)
	id.out = nil
	m.stopTimer(id)
	o.event(Event{Type: EventEstablished, ID: id})
	o.wake(id)
	return true
}

func (m *Manager) onDREQ(from netip.AddrPort, msg *mad, o *outbox) bool {
	id := m.lookup(from, msg)
	if id == nil {
		if m.ids[msg.remoteID] == nil {
			// We already answered and forgot, and the answer was lost.
			// (A DREQ has no marker: where a CM that is not vRoCE
			// listens is unknown here, and it gives up by itself.)
			o.send(from, &mad{attr: attrDREP, tid: msg.tid, localID: msg.remoteID, remoteID: msg.localID})
		}
		return false
	}
	switch id.state {
	case stEstablished, stRepSent, stDreqSent:
		m.remove(id)
		o.fail(id.qp)
		o.send(id.peer, id.message(attrDREP))
		o.event(Event{Type: EventDisconnected, ID: id})
		o.wake(id)
		return true
	}
	return false
}

func (m *Manager) onDREP(from netip.AddrPort, msg *mad, o *outbox) bool {
	id := m.lookup(from, msg)
	if id == nil || id.state != stDreqSent {
		return false
	}
	m.answered(id)
	m.remove(id)
	o.event(Event{Type: EventDisconnected, ID: id})
	return true
}

// onSIDRReq says whether a service listens here, and that this is vRoCE;
// for a UD service, also which QP and Q_Key serve it. The answer goes to
// where the asker's CM receives: RoCEv2's port unless it is vRoCE's.
func (m *Manager) onSIDRReq(from netip.AddrPort, msg *mad, o *outbox) bool {
	from = peerDevice(from, msg)
	rep := &mad{attr: attrSIDRRep, tid: msg.tid, localID: msg.localID, serviceID: msg.serviceID,
		status: sidrUnsupported, qpn: vroce.GSIQPN, qkey: vroce.GSIQKey, priv: vroceMark[:]}
	if msg.serviceID>>16 == psUDP {
		if l := m.udListeners[msg.serviceID]; l != nil {
			rep.status, rep.qpn, rep.qkey = sidrValid, l.qp.QPN(), UDPQKey
		}
	} else if m.listeners[msg.serviceID] != nil {
		rep.status = sidrValid
		m.noteProberLocked(from.Addr().Unmap())
	}
	o.send(from, rep)
	return true
}

// noteProberLocked records that host probed a listening service now.
func (m *Manager) noteProberLocked(host netip.Addr) {
	now := m.now()
	if _, known := m.probers[host]; !known && len(m.probers) >= maxProbers {
		// Full: forget the stale, at most once a second (a flood of
		// probes from new addresses must not buy a sweep each).
		if now-m.proberSweep >= int64(time.Second) {
			m.proberSweep = now
			for h, at := range m.probers {
				if now-at > int64(proberMemory) {
					delete(m.probers, h)
				}
			}
		}
		if len(m.probers) >= maxProbers {
			return
		}
	}
	m.probers[host] = now
}

// ProbedRecently reports whether host probed a service that listens on
// this manager within the last few seconds. Its dialer sends the SOCKET
// exchange only once that probe's answer is back, which a swamped
// listener sends late: a listener that tells vRoCE clients from plain TCP
// ones by their first bytes waits longer for such a host's.
func (m *Manager) ProbedRecently(host netip.Addr) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	at, ok := m.probers[host.Unmap()]
	return ok && m.now()-at <= int64(proberMemory)
}

// onSIDRRep answers a Probe or ResolveUD made through this manager.
func (m *Manager) onSIDRRep(from netip.AddrPort, msg *mad) bool {
	w := m.sidrWaits[msg.localID]
	if w.c == nil || from.Addr().Unmap() != w.peer {
		return false
	}
	delete(m.sidrWaits, msg.localID)
	w.c <- sidrAnswer{status: msg.status, qpn: msg.qpn, qkey: msg.qkey,
		vroce: len(msg.priv) >= 2 && msg.priv[0] == vMagic0 && msg.priv[1] == vMagic1}
	return true
}

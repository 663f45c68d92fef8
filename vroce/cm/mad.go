package cm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"vroce.dev/vroce"
)

// RDMA_CM messages are InfiniBand CM MADs (IBA vol. 1 §12.6) laid out as
// Linux's ib_cm lays them out, so tshark decodes them and the fields mean
// what they mean on any RoCE fabric. vRoCE's additions hide where Linux's
// CM ignores what it finds, so that another CM reads a vRoCE message as
// its own and answers as it would answer Linux:
//
//   - the MAD header's ClassSpecific field carries 0x8000 | n when the
//     private data is n bytes long (the IBA pads private data to a fixed
//     size and loses its length);
//   - a REQ's and a vRoCE REP's MAD header attribute modifier (zero in
//     every CM message Linux sends) carries "vR", the version and path
//     MTU code, and capability flags: the REQ what the active end offers,
//     the REP what both ends speak. The MTU code goes on past 4096's to the
//     extension MTUs, which the IB field cannot say. (The reserved words
//     of the REQ and REP are not free: Linux reads them as the ECE vendor
//     ID, echoes a REQ's and rejects a REP whose it does not know.)

const (
	madHeaderLen = 24
	mgmtClassCM  = 0x07
	cmClassVer   = 2
	methodSend   = 0x03

	// Where each message's private data lives and how much there is.
	reqPrivOff, reqPrivLen         = 140, 92
	repPrivOff, repPrivLen         = 36, 196
	rejPrivOff, rejPrivLen         = 84, 148
	rtuPrivOff, rtuPrivLen         = 8, 224
	mraPrivOff, mraPrivLen         = 10, 222
	dreqPrivOff, dreqPrivLen       = 12, 220
	drepPrivOff, drepPrivLen       = 8, 224
	sidrReqPrivOff, sidrReqPrivLen = 16, 216
	sidrRepPrivOff, sidrRepPrivLen = 96, 136

	// rdma_cm's header at the start of a REQ's private data (struct
	// cma_hdr): version, IP version, source port, source and destination
	// addresses. What is left is the application's.
	cmaHeaderLen = 36

	privLenPresent = 0x8000

	vMagic0, vMagic1 = 'v', 'R'
	vVersion         = 2  // 1 kept the marker in the REQ's reserved word
	markerOff        = 20 // the MAD header's attribute modifier
	vFlagSACK        = 1 << 0
	vFlagPiggyACK    = 1 << 1
	vFlagsOffered    = vFlagSACK | vFlagPiggyACK // the extensions this CM speaks
	// vFlagDevicePort: the sender's RC packets leave from its device
	// port, so its peer may refuse any other (vroce.QPAttr
	// StrictSourcePort). Every vRoCE CM says it, extensions or not.
	vFlagDevicePort = 1 << 2
	// vFlagUDPChecksum: the sender's provider verifies UDP checksums and
	// it would leave the ICRC out (vroce.QPAttr UDPChecksum).
	vFlagUDPChecksum = 1 << 3
	vFlagPresent     = 0x80 // in mad.vflags only: the sender is vRoCE

	// psTCP is rdma_cm's RDMA_PS_TCP port space: service IDs are
	// 0x0000000001060000 | port. psUDP is RDMA_PS_UDP's, whose services
	// are UD QPs found by SIDR.
	psTCP = 0x0106
	psUDP = 0x0111
)

// MaxPrivateData is the most private data each message carries for the
// application.
const (
	MaxPrivateData       = reqPrivLen - cmaHeaderLen // 56, on connect (and in the SOCKET exchange)
	MaxAcceptPrivateData = repPrivLen                // 196, on accept
	MaxRejectPrivateData = rejPrivLen                // 148, on reject
)

// attrID is a CM message type (the MAD's attribute ID).
type attrID uint16

const (
	attrREQ  attrID = 0x10
	attrMRA  attrID = 0x11
	attrREJ  attrID = 0x12
	attrREP  attrID = 0x13
	attrRTU  attrID = 0x14
	attrDREQ attrID = 0x15
	attrDREP attrID = 0x16
	// Service ID resolution: vRoCE answers it for every service that
	// listens, which is how a dialer learns, before it sends a byte over
	// TCP, that a vRoCE service is behind host:port.
	attrSIDRReq attrID = 0x17
	attrSIDRRep attrID = 0x18
)

// SIDR_REP statuses (IBA table 119).
const (
	sidrValid       = 0
	sidrUnsupported = 1 // no such service
)

var attrNames = map[attrID]string{attrREQ: "REQ", attrMRA: "MRA", attrREJ: "REJ", attrREP: "REP", attrRTU: "RTU", attrDREQ: "DREQ", attrDREP: "DREP",
	attrSIDRReq: "SIDR_REQ", attrSIDRRep: "SIDR_REP"}

func (a attrID) String() string {
	if s, ok := attrNames[a]; ok {
		return s
	}
	return fmt.Sprintf("attr(%#x)", uint16(a))
}

// RejectReason is why a peer rejected a connection (IBA table 112).
type RejectReason uint16

// Reject reasons vRoCE sends or interprets.
const (
	RejectNoQP             RejectReason = 1
	RejectNoResources      RejectReason = 3
	RejectTimeout          RejectReason = 4
	RejectUnsupported      RejectReason = 5
	RejectInvalidCommID    RejectReason = 6
	RejectInvalidServiceID RejectReason = 8 // nothing listens: ECONNREFUSED
	RejectInvalidTransport RejectReason = 9
	RejectStaleConnection  RejectReason = 10
	RejectInvalidMTU       RejectReason = 26
	RejectConsumer         RejectReason = 28 // the application said no
	RejectInvalidRNRRetry  RejectReason = 29
)

var rejectNames = map[RejectReason]string{
	RejectNoQP: "no QP", RejectNoResources: "no resources", RejectTimeout: "timeout",
	RejectUnsupported: "unsupported request", RejectInvalidCommID: "invalid communication ID",
	RejectInvalidServiceID: "no listener for the service", RejectInvalidTransport: "invalid transport type",
	RejectStaleConnection: "stale connection", RejectInvalidMTU: "invalid MTU",
	RejectConsumer: "rejected by the application", RejectInvalidRNRRetry: "invalid RNR retry count",
}

func (r RejectReason) String() string {
	if s, ok := rejectNames[r]; ok {
		return s
	}
	return fmt.Sprintf("reject reason %d", uint16(r))
}

// Which message a REJ or MRA answers.
const (
	msgREQ   = 0
	msgREP   = 1
	msgOther = 2
)

// errMalformed: the MAD is not a CM message we can act on.
var errMalformed = errors.New("cm: malformed CM message")

// mad is one CM message, decoded. Which fields mean something depends on
// attr; the rest are zero.
type mad struct {
	attr     attrID
	tid      uint64
	localID  uint32 // the sender's communication ID
	remoteID uint32 // the receiver's (zero in a REQ)

	// REQ and REP.
	serviceID uint64 // REQ
	guid      uint64
	qpn       uint32 // the sender's QPN (DREQ: the receiver's)
	psn       uint32
	respRes   uint8 // READ/atomic requests the sender answers at once
	initDepth uint8 // READ/atomic requests the sender issues at once
	mtu       vroce.MTU
	retryCnt  uint8 // REQ
	rnrRetry  uint8
	ackTO     uint8 // REQ: local ACK timeout
	srq       bool
	vflags    uint8 // vRoCE capabilities; zero from other CMs

	// The REQ's rdma_cm header.
	srcIP, dstIP netip.Addr
	srcPort      uint16

	// SIDR_REP.
	status uint8
	qkey   uint32

	// REJ and MRA.
	reason  RejectReason
	which   uint8 // the message rejected or acknowledged
	timeout uint8 // MRA: service timeout, 4.096 us << n

	priv []byte // private data: exact for a vRoCE sender, padded otherwise
	// plain: the receiver is not vRoCE; leave every reserved field zero.
	plain bool
}

// privArea says where a message type's private data lives.
func privArea(a attrID) (off, n int) {
	switch a {
	case attrREQ:
		return reqPrivOff + cmaHeaderLen, reqPrivLen - cmaHeaderLen
	case attrREP:
		return repPrivOff, repPrivLen
	case attrREJ:
		return rejPrivOff, rejPrivLen
	case attrRTU:
		return rtuPrivOff, rtuPrivLen
	case attrMRA:
		return mraPrivOff, mraPrivLen
	case attrDREQ:
		return dreqPrivOff, dreqPrivLen
	case attrDREP:
		return drepPrivOff, drepPrivLen
	case attrSIDRReq:
		return sidrReqPrivOff, sidrReqPrivLen
	case attrSIDRRep:
		return sidrRepPrivOff, sidrRepPrivLen
	}
	return 0, 0
}

// mtuCodes are the encodings of path MTUs: the IBA's, 1 for 256 up to 5
// for 4096, carried on to the extension MTUs: 6 for 8192 up to 8 for
// 32768, and 9 for 1344. Only vRoCE fields carry codes above 5.
var mtuCodes = [...]vroce.MTU{1: vroce.MTU256, vroce.MTU512, vroce.MTU1024, vroce.MTU2048, vroce.MTU4096,
	vroce.MTU8192, vroce.MTU16384, vroce.MTU32768, vroce.MTU1344}

func mtuCode(m vroce.MTU) uint8 {
	for c, v := range mtuCodes {
		if c > 0 && v == m {
			return uint8(c)
		}
	}
	return 0
}

func mtuFromCode(c uint8) vroce.MTU {
	if int(c) >= len(mtuCodes) {
		return 0
	}
	return mtuCodes[c]
}

const ibMTUCodes = 5 // 256 to 4096, what a REQ's MTU field may say

// RoCEv2's UDP port: where Linux's QP1 listens, whatever port it sends
// from.
const roceV2Port = 4791

// flowLabel is the IPv6 flow label rdma_cm puts in a REQ, from the two
// ends' ports; rxe derives its RC source port from it.
func flowLabel(srcPort, dstPort uint16) uint32 {
	return (uint32(srcPort)*31 + uint32(dstPort)) & 0xfffff
}

// gid is an address as a RoCEv2 GID: IPv6, or IPv4 mapped into it.
func gid(a netip.Addr) [16]byte {
	if !a.IsValid() {
		return [16]byte{}
	}
	return a.As16()
}

// marshal lays m out in b, a whole MAD; private data must fit its area.
func (m *mad) marshal(b *[vroce.MADSize]byte) {
	*b = [vroce.MADSize]byte{}
	b[0], b[1], b[2], b[3] = 1, mgmtClassCM, cmClassVer, methodSend
	be := binary.BigEndian
	be.PutUint64(b[8:], m.tid)
	be.PutUint16(b[16:], uint16(m.attr))
	d := b[madHeaderLen:]
	be.PutUint32(d[0:], m.localID)
	switch m.attr {
	case attrREQ:
		be.PutUint64(d[8:], m.serviceID)
		be.PutUint64(d[16:], m.guid)
		be.PutUint32(d[32:], m.qpn<<8|uint32(m.respRes))
		be.PutUint32(d[36:], uint32(m.initDepth))
		// Remote CM response timeout 20, transport RC (0); no end-to-end
		// flow control, as Linux sends over RoCE.
		be.PutUint32(d[40:], 20<<3)
		// Local CM response timeout 20, retry count.
		be.PutUint32(d[44:], m.psn<<8|20<<3|uint32(m.retryCnt&7))
		be.PutUint16(d[48:], 0xffff)
		d[50] = mtuCode(m.mtu.IB())<<4 | m.rnrRetry&7
		d[51] = 15 << 4 // max CM retries
		if m.srq {
			d[51] |= 1 << 3
		}
		be.PutUint16(d[52:], 0xffff) // permissive LIDs: RoCE has none
		be.PutUint16(d[54:], 0xffff)
		src, dst := gid(m.srcIP), gid(m.dstIP)
		copy(d[56:72], src[:])
		copy(d[72:88], dst[:])
		be.PutUint32(d[88:], flowLabel(m.srcPort, uint16(m.serviceID))<<12)
		d[93] = 64                // hop limit
		d[95] = m.ackTO & 31 << 3 // local ACK timeout
		m.putCMAHeader(d[reqPrivOff:])
	case attrREP:
		be.PutUint32(d[4:], m.remoteID)
		be.PutUint32(d[12:], m.qpn<<8)
		be.PutUint32(d[20:], m.psn<<8)
		d[24], d[25] = m.respRes, m.initDepth
		d[26] = 15 << 3 // target ACK delay 15, as Linux; no end-to-end flow control
		d[27] = m.rnrRetry & 7 << 5
		if m.srq {
			d[27] |= 1 << 4
		}
		be.PutUint64(d[28:], m.guid)
	case attrREJ:
		be.PutUint32(d[4:], m.remoteID)
		d[8] = m.which << 6
		be.PutUint16(d[10:], uint16(m.reason))
	case attrMRA:
		be.PutUint32(d[4:], m.remoteID)
		d[8] = m.which << 6
		d[9] = m.timeout & 31 << 3
	case attrDREQ:
		be.PutUint32(d[4:], m.remoteID)
		be.PutUint32(d[8:], m.qpn<<8)
	case attrRTU, attrDREP:
		be.PutUint32(d[4:], m.remoteID)
	case attrSIDRReq:
		be.PutUint16(d[4:], 0xffff)
		be.PutUint64(d[8:], m.serviceID)
		if m.serviceID>>16 == psUDP {
			// rdma_cm finds the listener of a UD service by the
			// addresses in its header, as for a REQ.
			m.putCMAHeader(d[sidrReqPrivOff:])
		}
	case attrSIDRRep:
		d[4] = m.status
		be.PutUint32(d[8:], m.qpn<<8)
		be.PutUint64(d[12:], m.serviceID)
		be.PutUint32(d[20:], m.qkey)
	}
	if off, n := privArea(m.attr); n > 0 && len(m.priv) > 0 {
		copy(d[off:off+n], m.priv)
	}
	if !m.plain {
		be.PutUint16(b[6:], privLenPresent|uint16(len(m.priv)))
		if m.attr == attrREQ || m.attr == attrREP {
			b[markerOff], b[markerOff+1] = vMagic0, vMagic1
			b[markerOff+2] = vVersion<<4 | mtuCode(m.mtu)
			b[markerOff+3] = m.vflags &^ vFlagPresent
		}
	}
}

// putCMAHeader writes rdma_cm's header (struct cma_hdr), which opens the
// private data of a REQ and of a UD service's SIDR_REQ: version 0, the IP
// version, the source port, and the two addresses.
func (m *mad) putCMAHeader(h []byte) {
	h[0] = 0
	h[1] = 6 << 4
	if m.srcIP.Is4() {
		h[1] = 4 << 4
	}
	binary.BigEndian.PutUint16(h[2:], m.srcPort)
	src, dst := gid(m.srcIP), gid(m.dstIP)
	copy(h[4:20], src[:])
	copy(h[20:36], dst[:])
	if m.srcIP.Is4() { // cma_hdr keeps IPv4 in the last word only
		clear(h[4:16])
		clear(h[20:32])
	}
}

// parseMarker reads the vRoCE marker of a REQ or REP: the sender's
// flags, with vFlagPresent, and the path MTU it says; zeros from
// another CM.
func parseMarker(b []byte) (vflags uint8, mtu vroce.MTU) {
	k := b[markerOff : markerOff+4]
	if k[0] != vMagic0 || k[1] != vMagic1 || k[2]>>4 < vVersion {
		return 0, 0
	}
	return k[3] | vFlagPresent, mtuFromCode(k[2] & 15)
}

// parseMAD decodes a CM MAD. It checks what a receiver relies on and
// nothing it ignores; priv aliases b.
func parseMAD(b []byte, m *mad) error {
	if len(b) != vroce.MADSize {
		return fmt.Errorf("%w: %d bytes", errMalformed, len(b))
	}
	if b[0] != 1 || b[1] != mgmtClassCM || b[2] != cmClassVer || b[3] != methodSend {
		return fmt.Errorf("%w: MAD class %#x version %d method %#x", errMalformed, b[1], b[2], b[3])
	}
	be := binary.BigEndian
	*m = mad{attr: attrID(be.Uint16(b[16:])), tid: be.Uint64(b[8:])}
	d := b[madHeaderLen:]
	m.localID = be.Uint32(d[0:])
	switch m.attr {
	case attrREQ:
		m.serviceID = be.Uint64(d[8:])
		m.guid = be.Uint64(d[16:])
		w := be.Uint32(d[32:])
		m.qpn, m.respRes = w>>8, uint8(w)
		m.initDepth = d[39]
		if d[43]>>1&3 != 0 { // transport service type: RC only
			return fmt.Errorf("%w: REQ for transport type %d", errMalformed, d[43]>>1&3)
		}
		w = be.Uint32(d[44:])
		m.psn, m.retryCnt = w>>8, uint8(w&7)
		if c := d[50] >> 4; c <= ibMTUCodes {
			m.mtu = mtuFromCode(c)
		}
		if vflags, vmtu := parseMarker(b); vflags != 0 {
			m.vflags = vflags
			if vmtu != vmtu.IB() && vmtu.IB() == m.mtu { // an extension MTU
				m.mtu = vmtu
			}
		}
		m.rnrRetry = d[50] & 7
		m.srq = d[51]&(1<<3) != 0
		m.ackTO = d[95] >> 3
		h := d[reqPrivOff:]
		m.srcPort = be.Uint16(h[2:])
		switch h[1] >> 4 {
		case 4:
			m.srcIP = netip.AddrFrom4([4]byte(h[16:20]))
			m.dstIP = netip.AddrFrom4([4]byte(h[32:36]))
		case 6:
			m.srcIP = netip.AddrFrom16([16]byte(h[4:20])).Unmap()
			m.dstIP = netip.AddrFrom16([16]byte(h[20:36])).Unmap()
		}
	case attrREP:
		m.remoteID = be.Uint32(d[4:])
		m.qpn = be.Uint32(d[12:]) >> 8
		m.psn = be.Uint32(d[20:]) >> 8
		m.vflags, m.mtu = parseMarker(b)
		m.respRes, m.initDepth = d[24], d[25]
		m.rnrRetry = d[27] >> 5
		m.srq = d[27]&(1<<4) != 0
		m.guid = be.Uint64(d[28:])
	case attrREJ:
		m.remoteID = be.Uint32(d[4:])
		m.which = d[8] >> 6
		m.reason = RejectReason(be.Uint16(d[10:]))
	case attrMRA:
		m.remoteID = be.Uint32(d[4:])
		m.which = d[8] >> 6
		m.timeout = d[9] >> 3
	case attrDREQ:
		m.remoteID = be.Uint32(d[4:])
		m.qpn = be.Uint32(d[8:]) >> 8
	case attrRTU, attrDREP:
		m.remoteID = be.Uint32(d[4:])
	case attrSIDRReq:
		m.serviceID = be.Uint64(d[8:])
	case attrSIDRRep:
		m.status = d[4]
		m.qpn = be.Uint32(d[8:]) >> 8
		m.serviceID = be.Uint64(d[12:])
		m.qkey = be.Uint32(d[20:])
	default:
		return fmt.Errorf("%w: attribute %v", errMalformed, m.attr)
	}
	off, n := privArea(m.attr)
	if l := be.Uint16(b[6:]); l&privLenPresent != 0 {
		if int(l&^privLenPresent) > n {
			return fmt.Errorf("%w: %v claims %d bytes of private data, room for %d", errMalformed, m.attr, l&^privLenPresent, n)
		}
		n = int(l &^ privLenPresent)
		if m.attr == attrSIDRReq {
			// A SIDR_REQ has no marker: the length says vRoCE sent it.
			m.vflags = vFlagPresent
		}
	}
	m.priv = d[off : off+n : off+n]
	return nil
}

package vroce

import (
	"net/netip"
	"strings"

	"vroce.dev/vroce/wire"
)

// A QP's attributes and its state machine (IBA 10.3, ibv_modify_qp): which
// attributes each transition requires and allows, their checks against
// the device's limits, and what each transition does to the QP's roles.

// QPAttrMask says which QPAttr fields a Modify sets (ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState QPAttrMask = 1 << iota
	QPAttrAccessFlags
	QPAttrPKeyIndex
	QPAttrPort
	QPAttrQKey
	QPAttrAV
	QPAttrPathMTU
	QPAttrTimeout
	QPAttrRetryCnt
	QPAttrRNRRetry
	QPAttrRQPSN
	QPAttrMaxQPRdAtomic
	QPAttrMinRNRTimer
	QPAttrSQPSN
	QPAttrMaxDestRdAtomic
	QPAttrDestQPN
	// QPAttrSelectiveRepeat is a vRoCE extension: both ends speak SACK.
	QPAttrSelectiveRepeat
	// QPAttrPiggybackACK is a vRoCE extension: both ends read ACKs that
	// ride on requests.
	QPAttrPiggybackACK
	// QPAttrStrictSourcePort: the peer sends from its device port.
	QPAttrStrictSourcePort
	// QPAttrUDPChecksum is a vRoCE extension: both ends leave the ICRC
	// to the UDP checksum.
	QPAttrUDPChecksum
	qpAttrEnd
)

var qpAttrNames = []string{"STATE", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "DEST_QPN", "SELECTIVE_REPEAT", "PIGGYBACK_ACK", "STRICT_SOURCE_PORT", "UDP_CHECKSUM"}

func (m QPAttrMask) String() string {
	var names []string
	for i, n := range qpAttrNames {
		if m&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	return strings.Join(names, "|")
}

// QPAttr holds the attributes Modify sets (ibv_qp_attr).
type QPAttr struct {
	State       QPState
	AccessFlags Access // remote access the responder allows
	PKeyIndex   uint16 // only index 0 (the default P_Key) exists
	Port        uint8  // only port 1 exists
	QKey        uint32 // UD
	// Dest is the address vector: the peer device's IP address and its
	// RoCEv2 UDP port.
	Dest    netip.AddrPort
	PathMTU MTU
	// Timeout is the local ACK timeout, 4.096 us x 2^Timeout; 0 is
	// infinite.
	Timeout uint8
	// RetryCnt is how many times a request is retransmitted after a
	// timeout before the QP fails (0-7; 7 is seven, not infinite).
	RetryCnt uint8
	// RNRRetry is how many RNR NAKs are retried (0-7; 7 is infinite).
	RNRRetry        uint8
	RQPSN           uint32
	SQPSN           uint32
	MaxRdAtomic     int   // outstanding READ/atomic this QP initiates
	MaxDestRdAtomic int   // outstanding READ/atomic this QP accepts
	MinRNRTimer     uint8 // RNR NAK timer code, 0-31
	DestQPN         uint32
	// SelectiveRepeat says the peer is a vRoCE device that negotiated
	// selective repeat (the connection manager does this): the responder
	// keeps out-of-order requests and reports them in SACKs. Without it
	// the QP behaves as rdma_rxe (go-back-N) and interoperates with it.
	SelectiveRepeat bool
	// PiggybackACK says the peer is a vRoCE device that negotiated ACKs
	// riding on requests (wire.PiggyACK): an ACK this QP owes leaves with
	// the next SEND or WRITE it sends, if that comes at once, instead of
	// as a datagram of its own; a request-reply exchange then sends half
	// the datagrams. Without it every ACK is an RC_ACKNOWLEDGE, as rxe
	// expects. A peer that reads them may also hold an ACK it owes up to
	// 5 ms for its program's answer to carry (ackHold); a QP whose local
	// ACK timeout (Timeout) is shorter than that resends a request whose
	// answer is slower, once, and the peer's ACK for the duplicate
	// leaves at once.
	PiggybackACK bool
	// StrictSourcePort says the peer is a vRoCE device that sends from
	// its device port, Dest's port, as both ends said at connection
	// setup: a packet from any other port of the peer's address is
	// refused (WrongSource), so another program on the peer's host cannot
	// inject into the connection, and the ICRC gets its full check (a
	// vRoCE sender seals with IPv4 ID 0). Without it the QP takes packets
	// from any port of the peer's address, as RoCEv2 senders pick the
	// source port per flow for ECMP (rxe: 0xC000 | a hash of the QPNs),
	// and it solves for the IPv4 ID the ICRC covers, which a UDP socket
	// cannot see (wire.Sealer.CheckUnknownID).
	StrictSourcePort bool
	// UDPChecksum says the peer is a vRoCE device whose provider, as
	// this device's (DeviceAttr.UDPChecksum), verifies every datagram's
	// UDP checksum, and both ends agreed at connection setup to rely on
	// it: packets go with zeros where the ICRC goes, and none is
	// checked (wire.Sealer.UDPChecksum). The ICRC is a CRC over every
	// payload at each end (160 ns a 1,344-byte packet on a first Zen,
	// BenchmarkCheckCopy) that adds nothing a verified UDP checksum does
	// not give. Without it, every packet carries the ICRC rxe computes,
	// and every packet's is checked.
	UDPChecksum bool
}

// transition lists, for one state change and QP type, the attributes a
// Modify must set and those it may.
type transition struct{ required, optional QPAttrMask }

var transitions = map[[3]uint8]transition{}

func defineTransition(t QPType, from, to QPState, required, optional QPAttrMask) {
	transitions[[3]uint8{uint8(t), uint8(from), uint8(to)}] = transition{required | QPAttrState, optional}
}

func init() {
	const (
		st   = 0
		port = QPAttrPKeyIndex | QPAttrPort
		rcSQ = QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
		rcRT = QPAttrAccessFlags | QPAttrMinRNRTimer
	)
	// The tables of IBA 11.2.4.2 (ibv_modify_qp), RC and UD.
	defineTransition(RC, QPSReset, QPSInit, QPAttrAccessFlags, port)
	defineTransition(RC, QPSInit, QPSInit, st, QPAttrAccessFlags|port)
	defineTransition(RC, QPSInit, QPSRTR, QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer, QPAttrAccessFlags|port|QPAttrSelectiveRepeat|QPAttrPiggybackACK|QPAttrStrictSourcePort|QPAttrUDPChecksum)
	defineTransition(RC, QPSRTR, QPSRTS, QPAttrSQPSN|rcSQ, rcRT)
	defineTransition(RC, QPSRTS, QPSRTS, st, rcRT)
	defineTransition(RC, QPSRTS, QPSSQD, st, 0)
	defineTransition(RC, QPSSQD, QPSSQD, st, rcRT|rcSQ|QPAttrAV|QPAttrPathMTU|QPAttrMaxDestRdAtomic)
	defineTransition(RC, QPSSQD, QPSRTS, st, rcRT)
	defineTransition(UD, QPSReset, QPSInit, QPAttrQKey, port)
	defineTransition(UD, QPSInit, QPSInit, st, QPAttrQKey|port)
	defineTransition(UD, QPSInit, QPSRTR, st, QPAttrQKey|port)
	defineTransition(UD, QPSRTR, QPSRTS, QPAttrSQPSN, QPAttrQKey)
	defineTransition(UD, QPSRTS, QPSRTS, st, QPAttrQKey)
	defineTransition(UD, QPSRTS, QPSSQD, st, 0)
	defineTransition(UD, QPSSQD, QPSSQD, st, QPAttrQKey)
	defineTransition(UD, QPSSQD, QPSRTS, st, QPAttrQKey)
	defineTransition(UD, QPSSQE, QPSRTS, st, QPAttrQKey)
	for _, t := range []QPType{RC, UD} {
		for s := QPSReset; s <= QPSErr; s++ {
			defineTransition(t, s, QPSReset, st, 0)
			defineTransition(t, s, QPSErr, st, 0)
		}
	}
}

// Modify changes the QP's attributes and state (ibv_modify_qp). mask must
// hold exactly the attributes the transition requires plus any it allows.
func (qp *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	from, to := qp.state, qp.state
	if mask&QPAttrState != 0 {
		to = attr.State
	}
	if to > QPSErr {
		return invalidf("modify QP: unknown state %d", to)
	}
	tr, ok := transitions[[3]uint8{uint8(qp.typ), uint8(from), uint8(to)}]
	if !ok {
		return statef("modify QP %#x: %v QP cannot go from %v to %v", qp.qpn, qp.typ, from, to)
	}
	if mask&QPAttrState == 0 {
		tr.required &^= QPAttrState // attribute changes within a state
	}
	if missing := tr.required &^ mask; missing != 0 {
		return invalidf("modify QP %#x %v->%v: missing required attributes %v", qp.qpn, from, to, missing)
	}
	if extra := mask &^ (tr.required | tr.optional); extra != 0 {
		return invalidf("modify QP %#x %v->%v: attributes %v not allowed in this transition", qp.qpn, from, to, extra)
	}
	if err := qp.checkAttr(attr, mask); err != nil {
		return err
	}
	if mask&QPAttrAV != 0 {
		flow, err := qp.dev.flowTo(attr.Dest)
		if err != nil {
			return err
		}
		qp.flow = flow
		qp.txSeal = wire.Sealer{Flow: flow}
		qp.rxSeal = wire.Sealer{Flow: wire.Flow{Src: flow.Dst, Dst: flow.Src}}
	}
	qp.applyAttr(attr, mask)
	switch to {
	case QPSReset:
		qp.sendLastAckLocked()
		qp.reset()
	case QPSErr:
		qp.toErrorLocked()
		return nil
	case QPSRTR:
		if from == QPSInit {
			qp.resp.reset(qp, qp.attr.RQPSN, qp.attr.SelectiveRepeat)
		}
	case QPSRTS:
		if from == QPSRTR && qp.typ == RC {
			qp.req.start(qp)
		} else if from == QPSRTR {
			qp.udPSN = qp.attr.SQPSN
		}
	}
	qp.state = to
	if to == QPSRTS && (from == QPSSQD || from == QPSSQE) {
		qp.kick()
	}
	if to == QPSSQD {
		if from != QPSSQD {
			qp.req.drainReported = false
		}
		qp.checkDrained()
	}
	return nil
}

func (qp *QP) checkAttr(a *QPAttr, mask QPAttrMask) error {
	d := qp.dev
	const op = "modify QP"
	switch {
	case mask&QPAttrAccessFlags != 0 && a.AccessFlags&^accessAll != 0:
		return invalidf("%s: unknown access flags %#x", op, a.AccessFlags)
	case mask&QPAttrPKeyIndex != 0 && a.PKeyIndex != 0:
		return invalidf("%s: P_Key index %d (only index 0, P_Key 0xffff, exists)", op, a.PKeyIndex)
	case mask&QPAttrPort != 0 && a.Port != 1:
		return invalidf("%s: port %d (the device has port 1)", op, a.Port)
	case mask&QPAttrPathMTU != 0 && !a.PathMTU.Valid():
		return notValidf(op, a.PathMTU)
	case mask&QPAttrPathMTU != 0 && a.PathMTU > d.attr.ActiveMTU:
		return checkLimit(op, "active_mtu", int(a.PathMTU), int(d.attr.ActiveMTU))
	case mask&QPAttrTimeout != 0 && a.Timeout > 31:
		return invalidf("%s: timeout %d out of range 0-31", op, a.Timeout)
	case mask&QPAttrRetryCnt != 0 && a.RetryCnt > 7:
		return invalidf("%s: retry_cnt %d out of range 0-7", op, a.RetryCnt)
	case mask&QPAttrRNRRetry != 0 && a.RNRRetry > 7:
		return invalidf("%s: rnr_retry %d out of range 0-7", op, a.RNRRetry)
	case mask&QPAttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return invalidf("%s: min_rnr_timer %d out of range 0-31", op, a.MinRNRTimer)
	case mask&QPAttrRQPSN != 0 && a.RQPSN > psnMask, mask&QPAttrSQPSN != 0 && a.SQPSN > psnMask:
		return invalidf("%s: PSN above 24 bits", op)
	case mask&QPAttrDestQPN != 0 && a.DestQPN > psnMask:
		return invalidf("%s: dest QPN %#x above 24 bits", op, a.DestQPN)
	case mask&QPAttrMaxQPRdAtomic != 0 && a.MaxRdAtomic < 0, mask&QPAttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic < 0:
		return invalidf("%s: negative RDMA READ/atomic depth", op)
	case mask&QPAttrUDPChecksum != 0 && a.UDPChecksum && !d.attr.UDPChecksum:
		return invalidf("%s: UDP checksum in place of the ICRC, on a provider that does not verify UDP checksums", op)
	}
	if mask&QPAttrMaxQPRdAtomic != 0 {
		if err := checkLimit(op, "max_qp_rd_atom", a.MaxRdAtomic, d.attr.MaxQPRdAtom); err != nil {
			return err
		}
	}
	if mask&QPAttrMaxDestRdAtomic != 0 {
		return checkLimit(op, "max_qp_init_rd_atom", a.MaxDestRdAtomic, d.attr.MaxQPRdAtom)
	}
	return nil
}

func (qp *QP) applyAttr(a *QPAttr, mask QPAttrMask) {
	q := &qp.attr
	set := func(bit QPAttrMask, apply func()) {
		if mask&bit != 0 {
			apply()
		}
	}
	set(QPAttrAccessFlags, func() { q.AccessFlags = a.AccessFlags })
	set(QPAttrQKey, func() { q.QKey = a.QKey })
	set(QPAttrAV, func() { q.Dest = qp.flow.Dst })
	set(QPAttrPathMTU, func() { q.PathMTU = a.PathMTU })
	set(QPAttrTimeout, func() { q.Timeout = a.Timeout })
	set(QPAttrRetryCnt, func() { q.RetryCnt = a.RetryCnt })
	set(QPAttrRNRRetry, func() { q.RNRRetry = a.RNRRetry })
	set(QPAttrRQPSN, func() { q.RQPSN = a.RQPSN })
	set(QPAttrSQPSN, func() { q.SQPSN = a.SQPSN })
	set(QPAttrMaxQPRdAtomic, func() { q.MaxRdAtomic = a.MaxRdAtomic })
	set(QPAttrMaxDestRdAtomic, func() { q.MaxDestRdAtomic = a.MaxDestRdAtomic })
	set(QPAttrMinRNRTimer, func() { q.MinRNRTimer = a.MinRNRTimer })
	set(QPAttrDestQPN, func() { q.DestQPN = a.DestQPN })
	set(QPAttrSelectiveRepeat, func() { q.SelectiveRepeat = a.SelectiveRepeat })
	set(QPAttrPiggybackACK, func() { q.PiggybackACK = a.PiggybackACK })
	set(QPAttrStrictSourcePort, func() { q.StrictSourcePort = a.StrictSourcePort })
	set(QPAttrUDPChecksum, func() { q.UDPChecksum = a.UDPChecksum })
	qp.txSeal.UDPChecksum, qp.rxSeal.UDPChecksum = q.UDPChecksum, q.UDPChecksum
	// UD (and RC until its path MTU is set) keeps to an IB MTU, which
	// every peer takes: a UD peer negotiates nothing.
	qp.mtu = int(qp.dev.attr.ActiveMTU.IB())
	if qp.typ == RC && q.PathMTU != 0 {
		qp.mtu = int(q.PathMTU)
	}
}

package vroce

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"vroce.dev/vroce/wire"
)

// QPType is a queue pair's transport service.
type QPType uint8

// QP types.
const (
	RC QPType = iota + 1 // reliable connected
	UD                   // unreliable datagram
)

func (t QPType) String() string {
	switch t {
	case RC:
		return "RC"
	case UD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair's state (ibv_qp_state).
type QPState uint8

// QP states.
const (
	QPSReset QPState = iota
	QPSInit
	QPSRTR
	QPSRTS
	QPSSQD
	QPSSQE
	QPSErr
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"}

func (s QPState) String() string {
	if int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// QPCap sizes a QP's queues (ibv_qp_cap).
type QPCap struct {
	MaxSendWR     int
	MaxRecvWR     int
	MaxSendSGE    int
	MaxRecvSGE    int
	MaxInlineData int
}

// QPInitAttr creates a QP (ibv_qp_init_attr).
type QPInitAttr struct {
	Type   QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // receives come from the SRQ; MaxRecvWR must be 0
	Cap    QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
}

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
	qpAttrEnd
)

var qpAttrNames = []string{"STATE", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "DEST_QPN", "SELECTIVE_REPEAT", "PIGGYBACK_ACK", "STRICT_SOURCE_PORT"}

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
	// expects.
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
	defineTransition(RC, QPSInit, QPSRTR, QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer, QPAttrAccessFlags|port|QPAttrSelectiveRepeat|QPAttrPiggybackACK|QPAttrStrictSourcePort)
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

// QP is a queue pair (ibv_qp). All of its state is guarded by mu; the
// device's receive and timer goroutines and the application's posting
// goroutines meet here. Requests are built and sent under mu so that they
// leave in PSN order.
type QP struct {
	dev    *Device
	pd     *PD
	typ    QPType
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	srq    *SRQ
	cap    QPCap
	sigAll bool

	mu    sync.Mutex
	state QPState
	attr  QPAttr
	flow  wire.Flow // RC: this device to the peer
	// RC: the ICRC of packets to and from the peer, with the headers'
	// CRC kept per packet size (under mu).
	txSeal, rxSeal wire.Sealer
	mtu            int // RC path MTU, UD active MTU
	rq             recvRing
	sq             sendQueue // the posted send work requests, RC's and UD's
	req            requester // RC's send side
	udPSN          uint32    // UD: the PSN of the next datagram
	resp           responder
	stats          QPStats

	timerAt int64 // owned by the device's timer queue
}

// CreateQP creates a queue pair in the RESET state.
func (pd *PD) CreateQP(init QPInitAttr) (*QP, error) {
	d := pd.dev
	const op = "create QP"
	if init.Type != RC && init.Type != UD {
		return nil, invalidf("%s: QP type %v is not RC or UD", op, init.Type)
	}
	if init.SendCQ == nil || init.RecvCQ == nil {
		return nil, invalidf("%s: send and receive CQs are required", op)
	}
	c := init.Cap
	if c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInlineData < 0 {
		return nil, invalidf("%s: negative capability in %+v", op, c)
	}
	for _, l := range []struct {
		name       string
		value, max int
	}{
		{"max_send_wr", c.MaxSendWR, d.attr.MaxQPWR},
		{"max_recv_wr", c.MaxRecvWR, d.attr.MaxQPWR},
		{"max_send_sge", c.MaxSendSGE, d.attr.MaxSendSGE},
		{"max_recv_sge", c.MaxRecvSGE, d.attr.MaxRecvSGE},
		{"max_inline_data", c.MaxInlineData, d.attr.MaxInline},
	} {
		if err := checkLimit(op, l.name, l.value, l.max); err != nil {
			return nil, err
		}
	}
	if init.SRQ != nil && c.MaxRecvWR != 0 {
		return nil, invalidf("%s: max_recv_wr must be 0 with an SRQ", op)
	}
	if init.SRQ != nil && init.SRQ.pd != pd {
		return nil, invalidf("%s: the SRQ belongs to another PD", op)
	}
	if err := pd.use(); err != nil {
		return nil, err
	}
	if err := d.reserve(op, "max_qp", &d.count.qp, d.attr.MaxQP); err != nil {
		pd.refs.Add(-1)
		return nil, err
	}
	qp := &QP{
		dev: d, pd: pd, typ: init.Type, sendCQ: init.SendCQ, recvCQ: init.RecvCQ,
		srq: init.SRQ, cap: c, sigAll: init.SigAll,
		rq: recvRing{max: c.MaxRecvWR},
	}
	undo := func() {
		d.release(&d.count.qp)
		pd.refs.Add(-1)
	}
	if err := qp.sendCQ.attach(); err != nil {
		undo()
		return nil, err
	}
	if err := qp.recvCQ.attach(); err != nil {
		qp.sendCQ.detach()
		undo()
		return nil, err
	}
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users++
		qp.srq.mu.Unlock()
	}
	qp.sq.init(c.MaxSendWR)
	qp.req.init()
	d.qpTable.insert(qp, func() bool {
		// QPN 0 and 1 are the special QPs; the rest are random, so a
		// stranger cannot guess them.
		qp.qpn = random32() & 0xffffff
		return qp.qpn > 1
	})
	return qp, nil
}

// Device is the device the QP belongs to.
func (qp *QP) Device() *Device { return qp.dev }

// QPN is the queue pair number peers address.
func (qp *QP) QPN() uint32 { return qp.qpn }

// Type is the QP's transport service.
func (qp *QP) Type() QPType { return qp.typ }

// State is the QP's current state.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Attr returns the QP's current attributes.
func (qp *QP) Attr() QPAttr {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	a := qp.attr
	a.State = qp.state
	return a
}

// Stats returns the QP's counters.
func (qp *QP) Stats() QPStats {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	s := qp.stats
	s.CWnd = qp.req.window()
	s.HeldBytes = qp.resp.heldBytes
	s.SRTT, s.MinRTT = time.Duration(qp.req.rec.rtt.srtt), time.Duration(qp.req.rec.rtt.minRTT)
	return s
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
		return invalidf("%s: path MTU %d is not one of 256, 512, 1024, 2048, 4096", op, a.PathMTU)
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
	// UD (and RC until its path MTU is set) keeps to an IB MTU, which
	// every peer takes: a UD peer negotiates nothing.
	qp.mtu = int(min(qp.dev.attr.ActiveMTU, MTU4096))
	if qp.typ == RC && q.PathMTU != 0 {
		qp.mtu = int(q.PathMTU)
	}
}

// reset returns the QP to RESET: queues emptied without completions.
func (qp *QP) reset() {
	qp.rq = recvRing{max: qp.cap.MaxRecvWR}
	qp.req.leavePeer(qp)
	qp.sq.init(qp.cap.MaxSendWR)
	qp.req.init()
	qp.resp.reset(qp, 0, false)
	qp.attr = QPAttr{}
	qp.flow = wire.Flow{}
	qp.txSeal, qp.rxSeal = wire.Sealer{}, wire.Sealer{}
}

// toErrorLocked moves the QP to ERR and flushes every outstanding work
// request with WCWRFlushErr.
func (qp *QP) toErrorLocked() {
	if qp.state == QPSErr {
		return
	}
	wasReset := qp.state == QPSReset
	if qp.resp.ackPending && qp.typ == RC && !wasReset {
		// An ACK owed for requests already executed leaves now: their
		// completions may have been acted on (a disconnect, whose DREQ
		// would otherwise overtake the ACK owed to the end of the receive
		// batch), and a requester that never hears of them flushes work
		// the peer did. A hardware responder's ACK leaves before the
		// completion is seen.
		b := qp.dev.getBatch()
		qp.sendOwedAckLocked(b)
		qp.dev.flush(b)
		qp.dev.putBatch(b)
	}
	qp.state = QPSErr
	qp.req.flush(qp)
	qp.resp.release(qp)
	for {
		w, ok := qp.rq.pop()
		if !ok {
			break
		}
		qp.complete(qp.recvCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
	}
	if qp.srq != nil && !wasReset {
		qp.dev.events.push(AsyncEvent{Type: EventQPLastWQEReached, QP: qp})
	}
}

// fail moves the QP to ERR after a transport error and reports it.
func (qp *QP) fail(ev EventType) {
	if qp.state == QPSErr {
		return
	}
	qp.toErrorLocked()
	qp.dev.events.push(AsyncEvent{Type: ev, QP: qp})
}

func (qp *QP) complete(cq *CQ, wc *WorkCompletion) { cq.push(wc) }

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work is discarded
// without completions.
func (qp *QP) Destroy() error {
	d := qp.dev
	if !d.qpTable.delete(qp) {
		return ErrClosed
	}
	qp.mu.Lock()
	qp.state = QPSReset
	qp.reset()
	qp.mu.Unlock()
	qp.sendCQ.detach()
	qp.recvCQ.detach()
	if qp.srq != nil {
		qp.srq.mu.Lock()
		qp.srq.users--
		qp.srq.mu.Unlock()
	}
	d.release(&d.count.qp)
	qp.pd.refs.Add(-1)
	return nil
}

// PostRecv posts receive work requests (ibv_post_recv). On error the
// requests before the bad one are posted and the error names the bad one.
func (qp *QP) PostRecv(wrs ...RecvWR) error {
	if qp.srq != nil {
		return invalidf("post recv: QP %#x receives from an SRQ", qp.qpn)
	}
	for i := range wrs {
		w, err := resolveRecv(qp.dev, qp.pd, &wrs[i], qp.cap.MaxRecvSGE, "post recv")
		if err != nil {
			return fmt.Errorf("work request %d: %w", i, err)
		}
		qp.mu.Lock()
		switch {
		case qp.state == QPSReset:
			qp.mu.Unlock()
			return statef("post recv: QP %#x is in RESET", qp.qpn)
		case qp.state == QPSErr:
			qp.complete(qp.recvCQ, &WorkCompletion{ID: w.id, Status: WCWRFlushErr, Opcode: WCRecv, QPN: qp.qpn})
		case !qp.rq.push(w):
			qp.mu.Unlock()
			return fmt.Errorf("vroce: post recv: work request %d: %d outstanding: %w", i, qp.rq.max, ErrQueueFull)
		}
		qp.mu.Unlock()
	}
	return nil
}

// popRecv takes the next receive WQE from the SRQ or the QP's own queue.
func (qp *QP) popRecv() (recvWQE, bool) {
	if qp.srq != nil {
		return qp.srq.pop()
	}
	return qp.rq.pop()
}

// receive handles one packet addressed to the QP, from src; raw is the
// packet's bytes, kept if it must wait for its turn.
func (qp *QP) receive(p *wire.Packet, raw []byte, src netip.AddrPort, rb *rxBatch) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	switch qp.state {
	case QPSRTR, QPSRTS, QPSSQD, QPSSQE:
	default:
		return
	}
	if qp.typ == UD {
		if p.BTH.Opcode.IsUD() {
			qp.receiveUD(p, src)
		}
		return
	}
	if !p.BTH.Opcode.IsRC() {
		return
	}
	if !qp.fromPeer(src) {
		qp.stats.WrongSource++
		return
	}
	if p.BTH.PiggyACK && !qp.attr.PiggybackACK {
		// Not negotiated: the trailer Parse took off may be payload.
		qp.dev.stats.rxMalformed.Add(1)
		return
	}
	if !qp.checkICRC(raw) {
		qp.dev.stats.rxBadICRC.Add(1)
		return
	}
	qp.stats.RxPackets++
	if p.BTH.Opcode.Flags()&wire.IsResponse != 0 {
		if qp.state != QPSRTR {
			qp.req.onResponse(qp, p, qp.dev.now())
		}
		return
	}
	if p.BTH.PiggyACK {
		qp.onPiggyACK(p)
	}
	qp.resp.onRequest(qp, p, raw, rb)
}

// fromPeer reports whether a packet from src may be the connected
// peer's: its address always, its device port only where the peer said
// it sends from there (StrictSourcePort). Otherwise the ICRC check is
// aimed at the port the peer chose, which stays the same for a flow.
func (qp *QP) fromPeer(src netip.AddrPort) bool {
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	peer := qp.flow.Dst
	if qp.attr.StrictSourcePort || src.Addr() != peer.Addr() {
		return src == peer
	}
	if qp.rxSeal.Flow.Src.Port() != src.Port() {
		qp.rxSeal = wire.Sealer{Flow: wire.Flow{Src: src, Dst: qp.flow.Src}}
	}
	return true
}

// checkICRC checks an RC packet's ICRC: in full from a vRoCE peer,
// solving for the IPv4 ID from any other (see StrictSourcePort).
func (qp *QP) checkICRC(raw []byte) bool {
	if qp.attr.StrictSourcePort {
		return qp.rxSeal.Check(raw)
	}
	_, ok := qp.rxSeal.CheckUnknownID(raw)
	return ok
}

// onPiggyACK hands the completer the ACK that rode on a request.
func (qp *QP) onPiggyACK(p *wire.Packet) {
	if qp.state == QPSRTR { // the requester has not started
		return
	}
	qp.stats.PiggyACKsRecv++
	qp.req.onAck(qp, ack{psn: p.Piggy.PSN, aeth: p.Piggy.AETH}, qp.dev.now())
}

// kick sends what the send queue can send now, under qp.mu.
func (qp *QP) kick() { qp.kickAt(qp.dev.now()) }

// kickAt is kick for a caller that has just read the clock.
func (qp *QP) kickAt(now int64) {
	b := qp.dev.getBatch()
	if qp.typ == UD {
		qp.pumpUD(b)
	} else {
		qp.req.pump(qp, b, now)
	}
	qp.dev.flush(b)
	qp.dev.putBatch(b)
}

// emit makes room for one more packet in b, sending it if full.
func (qp *QP) emit(b *txBatch) []byte {
	if b.full() {
		qp.dev.flush(b)
	}
	return b.buf()
}

// onTimer runs the QP's expired timers; called by the timer goroutine.
func (qp *QP) onTimer(now int64) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if qp.typ != RC || qp.state == QPSReset || qp.state == QPSErr {
		return
	}
	b := qp.dev.getBatch()
	qp.req.onTimer(qp, now, b)
	qp.dev.flush(b)
	qp.dev.putBatch(b)
}

// checkDrained reports EventSQDrained once a QP in SQD has nothing in
// flight.
func (qp *QP) checkDrained() {
	if qp.state == QPSSQD && !qp.req.drainReported && qp.sq.posted() == 0 {
		qp.req.drainReported = true
		qp.dev.events.push(AsyncEvent{Type: EventSQDrained, QP: qp})
	}
}

const psnMask = 0xffffff

// psnDiff is a-b in 24-bit PSN space, as a signed distance.
func psnDiff(a, b uint32) int32 { return int32((a-b)&psnMask<<8) >> 8 }

func psnAdd(a uint32, n int) uint32 { return (a + uint32(n)) & psnMask }

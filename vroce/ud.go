package vroce

import (
	"net/netip"

	"vroce.dev/vroce/wire"
)

// UD: datagrams of up to one MTU, no acknowledgement, no ordering. A send
// completes when it leaves; a datagram that finds no receive posted, or the
// wrong Q_Key, is dropped, as on any UD transport.

// udDest is where a UD send goes.
type udDest struct {
	flow wire.Flow
	qpn  uint32
	qkey uint32
}

// grhLen is the space at the start of a UD receive buffer that holds the
// GRH (for RoCEv2, the IP header), as verbs programs expect.
const grhLen = 40

func (qp *QP) resolveUD(w *sendWQE, wr *SendWR) error {
	ah := wr.AH
	switch {
	case ah == nil || ah.pd == nil:
		return invalidf("post send: UD send without an address handle")
	case ah.pd != qp.pd:
		return invalidf("post send: the address handle belongs to another PD")
	case wr.RemoteQPN > psnMask:
		return invalidf("post send: remote QPN %#x above 24 bits", wr.RemoteQPN)
	}
	if err := checkLimit("post send", "UD message size (path MTU)", w.length, qp.mtu); err != nil {
		return err
	}
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 { // IBA: a Q_Key with the high bit set means the QP's own
		qkey = qp.attr.QKey
	}
	w.ud = udDest{flow: ah.flow, qpn: wr.RemoteQPN, qkey: qkey}
	return nil
}

func (qp *QP) pumpUD(b *txBatch) {
	q := &qp.sq
	for q.next < q.tail && qp.state == QPSRTS {
		w := q.slot(q.next)
		buf := qp.packetBuf(b)
		p := wire.Packet{
			BTH:  wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: w.ud.qpn, PSN: qp.udPSN, SE: w.flags&SendSolicited != 0},
			DETH: wire.DETH{QKey: w.ud.qkey, SrcQP: qp.qpn},
		}
		if w.op.hasImm() {
			p.BTH.Opcode, p.Imm = wire.UDSendOnlyImm, w.imm
		}
		hl, _ := p.EncodeHeaders(buf, w.length)
		w.gather(buf[hl:hl+w.length], 0)
		b.add(w.ud.flow, wire.Finish(buf, hl+w.length))
		qp.stats.TxPackets++
		qp.udPSN = psnAdd(qp.udPSN, 1)
		w.assigned = true
		q.next++
	}
	// A datagram completes as it leaves.
	for q.head < q.next {
		if w := q.popHead(); w.signaled {
			qp.complete(qp.sendCQ, &WorkCompletion{ID: w.id, Status: WCSuccess, Opcode: wcOpcodeFor(w.op), ByteLen: uint32(w.length), QPN: qp.qpn})
		}
	}
	qp.checkDrained()
}

func (qp *QP) receiveUD(p *wire.Packet, src netip.AddrPort) {
	if p.DETH.QKey != qp.attr.QKey {
		qp.stats.WrongSource++
		return
	}
	qp.stats.RxPackets++
	w, ok := qp.popRecv()
	if !ok {
		return
	}
	wc := WorkCompletion{ID: w.id, Opcode: WCRecv, QPN: qp.qpn, SrcQP: p.DETH.SrcQP, Src: src, Flags: WCGRH}
	n := grhLen + len(p.Payload)
	if n > w.total {
		wc.Status = WCLocLenErr
		qp.complete(qp.recvCQ, &wc)
		return
	}
	// The GRH area: an IPv6 header, or an IPv4 header in its last 20
	// bytes (as rdma_rxe lays it out).
	var grh [grhLen]byte
	var hb [wire.MaxHeaderSpace]byte
	if ip, _, ok := (wire.Flow{Src: src, Dst: qp.dev.local}).Headers(&hb, len(p.Payload)+p.BTH.Opcode.HeaderLen()+wire.ICRCLen); ok {
		copy(grh[grhLen-len(ip):], ip)
	}
	scatter(w.first, w.more, grh[:], 0)
	scatter(w.first, w.more, p.Payload, grhLen)
	wc.ByteLen = uint32(n)
	if p.BTH.Opcode == wire.UDSendOnlyImm {
		wc.Flags |= WCWithImm
		wc.Imm = p.Imm
	}
	qp.complete(qp.recvCQ, &wc)
}

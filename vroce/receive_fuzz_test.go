package vroce

import (
	"net"
	"net/netip"
	"sync"
	"testing"

	"vroce.dev/vroce/wire"
)

// nullProvider sends nowhere and receives nothing: the fuzz target calls
// the receive path itself.
type nullProvider struct {
	once sync.Once
	done chan struct{}
}

func (p *nullProvider) Recv([]Packet) (int, error) { <-p.done; return 0, net.ErrClosed }
func (p *nullProvider) Send([]Packet) error        { return nil }
func (p *nullProvider) LocalAddr() netip.AddrPort  { return netip.MustParseAddrPort("127.0.0.1:4791") }
func (p *nullProvider) MTU() int                   { return 9000 }
func (p *nullProvider) BatchSize() int             { return 8 }
func (p *nullProvider) Close() error               { p.once.Do(func() { close(p.done) }); return nil }

// FuzzQPReceive feeds hostile, well-formed-enough packets to a connected RC
// QP with requests outstanding: whatever arrives, nothing panics, memory
// outside the registered region is never reachable, and the QP either
// carries on or fails cleanly.
func FuzzQPReceive(f *testing.F) {
	d, err := OpenWithProvider(&nullProvider{done: make(chan struct{})}, Config{})
	if err != nil {
		f.Fatal(err)
	}
	defer d.Close()
	pd, _ := d.AllocPD()
	cq, _ := d.CreateCQ(1 << 20)
	buf := make([]byte, 1<<16)
	mr, _ := pd.RegMR(buf, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic)
	qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}})
	if err != nil {
		f.Fatal(err)
	}
	peer := netip.MustParseAddrPort("127.0.0.2:4791")
	const peerQPN, rqPSN, sqPSN = 0x123, 0xfffff0, 0x10
	connect := func(tb testing.TB) {
		steps := []struct {
			a QPAttr
			m QPAttrMask
		}{
			{QPAttr{State: QPSReset}, QPAttrState},
			{QPAttr{State: QPSInit, AccessFlags: accessAll}, QPAttrState | QPAttrAccessFlags},
			{QPAttr{State: QPSRTR, Dest: peer, PathMTU: MTU1024, DestQPN: peerQPN, RQPSN: rqPSN, MaxDestRdAtomic: 4, MinRNRTimer: 1, SelectiveRepeat: true, PiggybackACK: true},
				QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer | QPAttrSelectiveRepeat | QPAttrPiggybackACK},
			{QPAttr{State: QPSRTS, SQPSN: sqPSN, Timeout: 0, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
				QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic},
		}
		for _, s := range steps {
			if err := qp.Modify(&s.a, s.m); err != nil {
				tb.Fatal(err)
			}
		}
		_ = qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{mr.SGE(0, 3000)}})
		_ = qp.PostSend(
			SendWR{ID: 2, Opcode: WRRDMARead, SGL: []SGE{mr.SGE(4096, 3000)}, RemoteAddr: 0x1000, RKey: 1},
			SendWR{ID: 3, Opcode: WRRDMAWrite, SGL: []SGE{mr.SGE(0, 2048)}, RemoteAddr: 0x1000, RKey: 1},
			SendWR{ID: 4, Opcode: WRAtomicFetchAndAdd, SGL: []SGE{mr.SGE(8192, 8)}, RemoteAddr: 0x1000, RKey: 1, CompareAdd: 1},
		)
	}
	seed := func(p wire.Packet) {
		b := make([]byte, 5000)
		n, err := p.Encode(b)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b[:n])
	}
	mtuPayload := make([]byte, 1024)
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendFirst}, Payload: mtuPayload})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnlyImm}, Payload: []byte("hi")})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly}, RETH: wire.RETH{VA: mr.Addr() + 100, RKey: mr.RKey(), DMALen: 4}, Payload: []byte("abcd")})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnlyImm}, RETH: wire.RETH{VA: 0, RKey: 0, DMALen: 0}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest}, RETH: wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: 5000}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadRequest}, RETH: wire.RETH{DMALen: 0}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCFetchAdd}, Atomic: wire.AtomicETH{VA: mr.Addr() + 16, RKey: mr.RKey(), SwapAdd: 5}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: 0x80}, AETH: wire.AETH{Syndrome: wire.NAK(wire.NAKPSNSequenceError)}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCReadResponseFirst, PSN: 0x80}, Payload: mtuPayload})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAtomicAcknowledge, PSN: 0x83}, AtomicAck: 9})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: 0x81}, AETH: wire.AETH{Syndrome: wire.RNRNAK(3)}})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PiggyACK: true}, Piggy: wire.PiggyACK{PSN: 0x11, AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits}}, Payload: []byte("reply")})
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCWriteOnly, PiggyACK: true}, RETH: wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: 4}, Piggy: wire.PiggyACK{PSN: 0x7fffff}, Payload: []byte("abcd")})
	// An ACK whose SACK trailer opens with a D-SACK block (a PSN at or
	// below the cumulative one, reported as arrived twice).
	var dsack wire.SACK
	dsack.AppendBlock(sqPSN, 1)
	dsack.AppendBlock(sqPSN+2, 1)
	trailer := make([]byte, dsack.Len())
	dsack.Encode(trailer)
	seed(wire.Packet{BTH: wire.BTH{Opcode: wire.RCAcknowledge, PSN: 0x00}, AETH: wire.AETH{Syndrome: wire.AckSyndromeNoCredits}, Payload: trailer})
	flow := wire.Flow{Src: peer, Dst: d.local}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < wire.BTHLen+wire.ICRCLen || len(in) > MaxPacketSize {
			return
		}
		connect(t)
		pkt := append([]byte(nil), in...)
		// Aim it at the QP, with a PSN near the one each role expects
		// (the fuzzer picks the offset), and a good ICRC.
		pkt[5], pkt[6], pkt[7] = byte(qp.qpn>>16), byte(qp.qpn>>8), byte(qp.qpn)
		base := uint32(rqPSN)
		if wire.Opcode(pkt[0]).Flags()&wire.IsResponse != 0 {
			base = sqPSN
		}
		psn := psnAdd(base, int(int8(pkt[11])))
		pkt[9], pkt[10], pkt[11] = byte(psn>>16)|pkt[9]&0x80, byte(psn>>8), byte(psn)
		pkt[8] &= 0x81 // AckReq and PiggyACK; the other reserved bits clear
		flow.Seal(pkt)
		rb := &rxBatch{out: d.getBatch(), now: d.now()}
		d.receive(&Packet{Data: pkt, Addr: peer}, rb)
		d.settle(rb, false)
		d.putBatch(rb.out)
		drain := make([]WorkCompletion, 64)
		for {
			if n, _ := cq.Poll(drain); n == 0 {
				break
			}
		}
	})
}

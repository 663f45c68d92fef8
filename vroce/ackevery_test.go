package vroce

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// ackPSNs are the PSNs of the ACKs among pkts.
func ackPSNs(pkts []wire.Packet) []uint32 {
	var psns []uint32
	for _, p := range pkts {
		if p.BTH.Opcode == wire.RCAcknowledge {
			psns = append(psns, p.BTH.PSN)
		}
	}
	return psns
}

// One receive batch can hold a whole window. Its requests for an ACK are
// answered every second one, each ACK a datagram of its own, not all by
// one ACK at the batch's end, whose loss would leave the requester
// waiting for a probe.
func TestEverySecondRequestForAnACKIsAnswered(t *testing.T) {
	const rqPSN = 100
	for _, c := range []struct {
		name  string
		every int // every how many packets asks for an ACK
		want  []uint32
	}{
		{"every packet asks", 1, []uint32{rqPSN + 1, rqPSN + 3, rqPSN + 5, rqPSN + 7}},
		{"only the last asks", 8, []uint32{rqPSN + 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			prov := &sinkProvider{done: make(chan struct{})}
			d, err := OpenWithProvider(prov, Config{})
			require.NoError(t, err)
			defer d.Close()
			pd, err := d.AllocPD()
			require.NoError(t, err)
			cq, err := d.CreateCQ(16)
			require.NoError(t, err)
			mr, err := pd.RegMR(make([]byte, 4096), AccessLocalWrite|AccessRemoteWrite)
			require.NoError(t, err)
			qp, err := pd.CreateQP(QPInitAttr{Type: RC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			peer := netip.MustParseAddrPort("127.0.0.2:4791")
			require.NoError(t, qp.Modify(&QPAttr{State: QPSInit, AccessFlags: AccessLocalWrite | AccessRemoteWrite}, QPAttrState|QPAttrAccessFlags))
			require.NoError(t, qp.Modify(&QPAttr{State: QPSRTR, Dest: peer, PathMTU: MTU256, DestQPN: 7, RQPSN: rqPSN, MaxDestRdAtomic: 1, MinRNRTimer: 1, SelectiveRepeat: true},
				QPAttrState|QPAttrAV|QPAttrPathMTU|QPAttrDestQPN|QPAttrRQPSN|QPAttrMaxDestRdAtomic|QPAttrMinRNRTimer|QPAttrSelectiveRepeat))

			rb := &rxBatch{out: d.getBatch()}
			payload := make([]byte, 256)
			for i := range 8 {
				op := wire.RCWriteMiddle
				switch i {
				case 0:
					op = wire.RCWriteFirst
				case 7:
					op = wire.RCWriteLast
				}
				p := wire.Packet{BTH: wire.BTH{Opcode: op, PKey: wire.DefaultPKey, DestQP: qp.QPN(), PSN: rqPSN + uint32(i), AckReq: (i+1)%c.every == 0}, Payload: payload}
				if i == 0 {
					p.RETH = wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: 8 * 256}
				}
				b := make([]byte, 512)
				n, err := p.Encode(b)
				require.NoError(t, err)
				(wire.Flow{Src: peer, Dst: d.local}).Seal(b[:n])
				d.receive(&Packet{Data: b[:n], Addr: peer}, rb)
			}
			d.settle(rb, false)
			d.putBatch(rb.out)
			assert.Equal(t, c.want, ackPSNs(prov.take()))
		})
	}
}

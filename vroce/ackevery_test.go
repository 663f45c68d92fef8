package vroce

import (
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
// answered by the batch's one ACK, sent twice when two or more asked (its
// loss alone would leave the requester waiting for a probe), not by an
// ACK for every second request: they all leave with the batch, and the
// earlier ones say nothing the last does not.
func TestABatchsACKLeavesTwiceWhenSeveralAsked(t *testing.T) {
	const rqPSN = benchRQPSN
	for _, c := range []struct {
		name  string
		every int // every how many packets asks for an ACK
		want  []uint32
	}{
		{"every packet asks", 1, []uint32{rqPSN + 7, rqPSN + 7}},
		{"every fourth asks", 4, []uint32{rqPSN + 7, rqPSN + 7}},
		{"only the last asks", 8, []uint32{rqPSN + 7}},
	} {
		t.Run(c.name, func(t *testing.T) {
			rb := newRequesterBench(t)
			d := rb.qp.dev
			mr, err := rb.qp.pd.RegMR(make([]byte, 8*1024), AccessLocalWrite|AccessRemoteWrite)
			require.NoError(t, err)
			rx := &rxBatch{out: d.getBatch()}
			payload := make([]byte, 1024) // the bench's path MTU
			for i := range 8 {
				op := wire.RCWriteMiddle
				switch i {
				case 0:
					op = wire.RCWriteFirst
				case 7:
					op = wire.RCWriteLast
				}
				p := wire.Packet{BTH: wire.BTH{Opcode: op, PSN: rqPSN + uint32(i), AckReq: (i+1)%c.every == 0}, Payload: payload}
				if i == 0 {
					p.RETH = wire.RETH{VA: mr.Addr(), RKey: mr.RKey(), DMALen: 8 * 1024}
				}
				rb.deliver(t, p, rx)
			}
			d.settle(rx, false)
			d.putBatch(rx.out)
			assert.Equal(t, c.want, ackPSNs(rb.sink.take()))
		})
	}
}

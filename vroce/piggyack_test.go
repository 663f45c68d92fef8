package vroce

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce/wire"
)

// A request flagged as carrying a piggybacked ACK, on a QP that did not
// negotiate them, is dropped as malformed: its last eight bytes could be
// payload. The same request unflagged is delivered.
func TestPiggyACKOnlyWhereNegotiated(t *testing.T) {
	rb := newBench(t, false)
	qp, d := rb.qp, rb.qp.dev
	require.NoError(t, qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 64)}}))
	deliver := func(piggy bool) {
		rx := &rxBatch{out: d.getBatch()}
		rb.deliver(t, wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: benchRQPSN, PiggyACK: piggy}, Payload: []byte("12345678abcdefgh")}, rx)
		d.settle(rx, false)
		d.putBatch(rx.out)
	}
	wc := make([]WorkCompletion, 1)
	deliver(true)
	if n, _ := qp.recvCQ.Poll(wc); n != 0 || d.Stats().RxMalformed != 1 {
		t.Fatalf("flagged, not negotiated: %d completions, %d malformed; want 0 and 1", n, d.Stats().RxMalformed)
	}
	deliver(false)
	if n, _ := qp.recvCQ.Poll(wc); n != 1 || wc[0].Status != WCSuccess || wc[0].ByteLen != 16 {
		t.Fatalf("unflagged: %d completions %+v", n, wc[0])
	}
}

// A SEND of several packets, sent while an ACK is owed, carries the ACK
// on its LAST: a GSO datagram's segments are one size (the last may be
// shorter), so the ACK's eight bytes on the FIRST split the message into
// two datagrams and the peer woke for each. A WRITE's FIRST differs in
// size anyway (its RETH) and carries it at once; so does a one-packet
// SEND (the positive control: the ACK rides at all).
func TestPiggyACKKeepsAMessageOneDatagram(t *testing.T) {
	for _, c := range []struct {
		name    string
		op      WROpcode
		length  int
		carrier int // which packet carries the ACK
	}{
		{"send of three packets", WRSend, 2600, 2},
		{"send with immediate of three packets", WRSendWithImm, 2600, 2},
		{"write of three packets", WRRDMAWrite, 2600, 0},
		{"send of one packet", WRSend, 100, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			rb := newBench(t, true)
			qp, d := rb.qp, rb.qp.dev
			require.NoError(t, qp.PostRecv(RecvWR{ID: 1, SGL: []SGE{rb.mr.SGE(0, 64)}}))

			// The peer's request asks for an ACK; the batch has not ended.
			rx := &rxBatch{out: d.getBatch()}
			rb.deliver(t, wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: benchRQPSN, AckReq: true}, Payload: []byte("request")}, rx)

			require.NoError(t, qp.PostSend(SendWR{ID: 2, Opcode: c.op, SGL: []SGE{rb.mr.SGE(4096, c.length)}, RemoteAddr: 0x1000, RKey: 1, Flags: SendSignaled}))
			// The post's packets come first; a loaded host may also
			// have run the QP's loss probe (its floor is 1 ms of real
			// time) before this looks, and sent one of them again.
			sent, sizes := rb.sink.takeSized()
			n := (c.length + 1023) / 1024
			require.GreaterOrEqual(t, len(sent), n)
			sent, sizes = sent[:n], sizes[:n]
			for i, p := range sent {
				assert.Equal(t, i == c.carrier, p.BTH.PiggyACK, "packet %d (%v) carries the ACK", i, p.BTH.Opcode)
				if p.BTH.PiggyACK {
					assert.Equal(t, uint32(benchRQPSN), p.Piggy.PSN)
				}
			}
			if c.op != WRRDMAWrite {
				for i := 1; i < len(sizes); i++ {
					assert.LessOrEqual(t, sizes[i], sizes[0], "packet %d is no longer than the first: one GSO run", i)
					if i < len(sizes)-1 {
						assert.Equal(t, sizes[0], sizes[i], "packet %d", i)
					}
				}
			}
			d.settle(rx, false)
			d.putBatch(rx.out)
			assert.Empty(t, ackPSNs(rb.sink.take()), "the request carried the ACK: none left to send alone")
		})
	}
}

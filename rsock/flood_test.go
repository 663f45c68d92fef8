package rsock

import (
	"encoding/binary"
	"net"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/pcap"
	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
	"vroce.dev/vroce/wire"
)

// capturedREQ is the CM REQ rdma_cm sent over Soft-RoCE (the reference
// capture), as a MAD.
func capturedREQ(t *testing.T) []byte {
	t.Helper()
	ds, err := pcap.ReadUDP(filepath.Join("..", "vroce", "wire", "testdata", "rxe-pcaps", "write_bw_cm.pcap"))
	require.NoError(t, err)
	for _, d := range ds {
		var p wire.Packet
		if d.DstPort == wire.UDPPort && wire.Parse(&p, d.Payload) == nil && p.BTH.DestQP == vroce.GSIQPN {
			return append([]byte(nil), p.Payload...)
		}
	}
	t.Fatal("no MAD in the capture")
	return nil
}

// TestSpoofedREQFloodLeavesQPsUsable: 100,000 REQs that will never be
// followed by an RTU (each from a new communication ID, for the
// listener's service) take at most maxHalfOpen QPs and goroutines, the
// rest wait in the backlog or are dropped and counted; the device can
// still make QPs. Each used to get a QP and a goroutine for the 10 s
// handshake timeout, until max_qp ran out.
func TestSpoofedREQFloodLeavesQPsUsable(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 REQs: not in -short")
	}
	t.Cleanup(func() { settle(t) }) // after the listener's close, which ends the half-open ones
	ln := listen(t, &ListenConfig{Mode: ModeCM}, "127.0.0.1:0")
	l := ln.(*Listener)
	goroutines := runtime.NumGoroutine()
	mad := capturedREQ(t)
	be := binary.BigEndian
	be.PutUint64(mad[24+8:], 0x0106<<16|uint64(l.addr.Port)) // the service ID: our port
	copy(mad[24+140+36:], ourHello().marshal())              // a stream's private data, behind rdma_cm's header
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(l.st.dev.LocalAddr()))
	require.NoError(t, err)
	defer c.Close()
	from := c.LocalAddr().(*net.UDPAddr).AddrPort()
	flow := wire.Flow{Src: from, Dst: l.st.dev.LocalAddr()}
	pkt := make([]byte, wire.Len(wire.UDSendOnly, vroce.MADSize))
	const total, batch = 100_000, 2_000
	for sent := 0; sent < total; {
		for range batch {
			sent++
			be.PutUint32(mad[24:], uint32(sent))        // the sender's communication ID
			be.PutUint64(mad[8:], uint64(sent)<<32|0x5) // the transaction ID
			p := wire.Packet{BTH: wire.BTH{Opcode: wire.UDSendOnly, PKey: wire.DefaultPKey, DestQP: vroce.GSIQPN, PSN: uint32(sent), AckReq: true},
				DETH: wire.DETH{QKey: vroce.GSIQKey, SrcQP: vroce.GSIQPN}, Payload: mad}
			n, err := p.Encode(pkt)
			require.NoError(t, err)
			require.True(t, flow.Seal(pkt[:n]))
			_, err = c.Write(pkt[:n])
			require.NoError(t, err)
		}
		// Let the device take the batch before the next (a socket buffer
		// holds a few thousand of them).
		verbstest.WaitFor(t, "the REQs taken", func() bool { return l.st.cm.Stats().Received.REQ >= uint64(sent)*9/10 })
	}
	s := l.st.cm.Stats()
	t.Logf("REQs received %d, backlog drops %d, QPs %d", s.Received.REQ, s.BacklogDrops, l.st.dev.Stats().Resources.QP)
	assert.GreaterOrEqual(t, s.Received.REQ, uint64(total*9/10))
	assert.Greater(t, s.BacklogDrops, uint64(0), "REQs past the half-open pool and the backlog are dropped")
	assert.LessOrEqual(t, l.st.dev.Stats().Resources.QP, maxHalfOpen, "QPs held by half-open connections")
	assert.Less(t, runtime.NumGoroutine(), goroutines+maxHalfOpen+64, "goroutines held by half-open connections")
	qp, err := l.st.pd.CreateQP(qpAttr(l.st)) // the positive control: max_qp is not spent
	require.NoError(t, err)
	qp.Destroy()
}

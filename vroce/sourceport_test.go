package vroce_test

import (
	"context"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/cm"
	"vroce.dev/vroce/wire"
)

// rxeLike is a hand-played RoCEv2 peer on the sim network: it sends from
// whatever port it likes, with the IPv4 IDs it likes, as rdma_rxe does.
type rxeLike struct {
	t       *testing.T
	network *sim.Network
}

// sendOnly sends a SEND_ONLY with payload to qp at psn, from src, sealed
// over an IPv4 header that carries id.
func (r *rxeLike) sendOnly(src netip.AddrPort, qp *vroce.QP, psn uint32, id uint16, payload []byte) {
	r.t.Helper()
	r.send(src, qp, id, &wire.Packet{BTH: wire.BTH{Opcode: wire.RCSendOnly, PSN: psn, AckReq: true}, Payload: payload})
}

// send sends p to qp from src, sealed over an IPv4 header that carries
// id; it fills in the P_Key and the destination QP.
func (r *rxeLike) send(src netip.AddrPort, qp *vroce.QP, id uint16, p *wire.Packet) {
	r.t.Helper()
	r.sendWith(src, qp, id, p, func(*wire.Packet) {})
}

// sendWith is send, with edit applied to the packet last.
func (r *rxeLike) sendWith(src netip.AddrPort, qp *vroce.QP, id uint16, p *wire.Packet, edit func(*wire.Packet)) {
	r.t.Helper()
	r.sendAll(src, qp, id, []*wire.Packet{p}, edit)
}

// sendAll sends ps to qp from src in one batch, each as sendWith sends
// one (edit may be nil): the device receives them back to back, however
// slow this goroutine is.
func (r *rxeLike) sendAll(src netip.AddrPort, qp *vroce.QP, id uint16, ps []*wire.Packet, edit func(*wire.Packet)) {
	r.t.Helper()
	ep, err := r.network.Attach(src)
	require.NoError(r.t, err)
	defer ep.Close()
	batch := make([]vroce.Packet, len(ps))
	for i, p := range ps {
		p.BTH.PKey, p.BTH.DestQP = wire.DefaultPKey, qp.QPN()
		if edit != nil {
			edit(p)
		}
		b := make([]byte, wire.Len(p.BTH.Opcode, len(p.Payload)))
		_, err = p.Encode(b)
		require.NoError(r.t, err)
		var hs [wire.MaxHeaderSpace]byte
		ip, udp, ok := wire.Flow{Src: src, Dst: qp.Device().LocalAddr()}.Headers(&hs, len(b))
		require.True(r.t, ok)
		binary.BigEndian.PutUint16(ip[4:], id)
		crc, ok := wire.ICRC(ip, udp, b)
		require.True(r.t, ok)
		binary.LittleEndian.PutUint32(b[len(b)-wire.ICRCLen:], crc)
		batch[i] = vroce.Packet{Data: b, Addr: qp.Device().LocalAddr()}
	}
	require.NoError(r.t, ep.Send(batch))
}

// qpTo opens a device on network and an RC QP on it, moved to RTS by
// cm.Connect towards peer (whose first PSN is peer.PSN; ours is 100), with
// an MR of size bytes the peer may access as access says. Each end may
// have 16 READs outstanding, as perftest and rxe agree.
func qpTo(t *testing.T, network *sim.Network, peer cm.Peer, access vroce.Access, size int) (*vroce.QP, *vroce.CQ, *vroce.MR) {
	t.Helper()
	dev, err := vroce.Open(vroce.Config{Provider: "sim", Addr: "10.0.0.2:4791", ProviderOptions: network})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(64)
	mr, err := pd.RegMR(make([]byte, size), vroce.AccessLocalWrite|access)
	require.NoError(t, err)
	qp, err := pd.CreateQP(vroce.QPInitAttr{Type: vroce.RC, SendCQ: cq, RecvCQ: cq, Cap: vroce.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, cm.Connect(qp, 100, peer, cm.Params{Access: access, MaxRdAtomic: 16}))
	return qp, cq, mr
}

// rcQPTo is qpTo for a QP aimed at addr (QPN 0x11, receiving from PSN
// 500, path MTU 1024) with one receive posted.
func rcQPTo(t *testing.T, network *sim.Network, addr netip.AddrPort, strict bool) (*vroce.QP, *vroce.CQ, *vroce.MR) {
	t.Helper()
	qp, cq, mr := qpTo(t, network, cm.Peer{QPN: 0x11, PSN: 500, Addr: addr, MTU: vroce.MTU1024, StrictSourcePort: strict}, 0, 4096)
	require.NoError(t, qp.PostRecv(vroce.RecvWR{ID: 1, SGL: []vroce.SGE{mr.SGE(0, 4096)}}))
	return qp, cq, mr
}

// received waits for the next receive completion. A refusal is shown by
// sending the refused packet first and then a positive control: the sim
// delivers one sender's packets in order, so the completion that comes is
// the control's, and the refusal was counted before it.
func received(t *testing.T, cq *vroce.CQ) vroce.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]vroce.WorkCompletion, 1)
	n, err := cq.PollWait(ctx, wc)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wc[0]
}

// TestRCTakesAnRxePeersHashedSourcePort: a RoCEv2 peer sends from a port
// of its own choosing with a counting IPv4 ID. A QP that did not agree on
// a strict source port takes its packets, and answers at the peer's
// device port; one that did refuses the same packet from that port, and
// takes it from the agreed one (the positive control).
func TestRCTakesAnRxePeersHashedSourcePort(t *testing.T) {
	peer := netip.MustParseAddrPort("10.0.0.1:4791")
	hashed := netip.MustParseAddrPort("10.0.0.1:49441")
	msg := []byte("hello from a hashed port")

	t.Run("any port", func(t *testing.T) {
		network := sim.NewNetwork(sim.Config{})
		t.Cleanup(network.Close)
		acks, err := network.Attach(peer)
		require.NoError(t, err)
		defer acks.Close()
		qp, cq, mr := rcQPTo(t, network, peer, false)
		r := &rxeLike{t: t, network: network}
		r.sendOnly(hashed, qp, 500, 0x15ec, msg)
		wc := received(t, cq)
		assert.Equal(t, vroce.WCSuccess, wc.Status)
		assert.Equal(t, msg, mr.Bytes()[:wc.ByteLen])
		pkts := []vroce.Packet{{Data: make([]byte, vroce.MaxPacketSize)}}
		n, err := acks.Recv(pkts)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		var ack wire.Packet
		require.NoError(t, wire.Parse(&ack, pkts[0].Data))
		assert.Equal(t, wire.RCAcknowledge, ack.BTH.Opcode)
		assert.Equal(t, uint32(500), ack.BTH.PSN)
		assert.Zero(t, qp.Stats().WrongSource)
	})

	t.Run("strict", func(t *testing.T) {
		network := sim.NewNetwork(sim.Config{})
		t.Cleanup(network.Close)
		qp, cq, mr := rcQPTo(t, network, peer, true)
		r := &rxeLike{t: t, network: network}
		r.sendOnly(hashed, qp, 500, 0, []byte("injected"))
		r.sendOnly(peer, qp, 500, 0, msg) // the control: from the device port
		wc := received(t, cq)
		assert.Equal(t, msg, mr.Bytes()[:wc.ByteLen], "the strict QP took the packet from another port of the peer")
		assert.Equal(t, uint64(1), qp.Stats().WrongSource)
	})

	t.Run("strict wants ID 0", func(t *testing.T) {
		// A vRoCE peer seals with ID 0: a strict QP checks all 32 bits.
		network := sim.NewNetwork(sim.Config{})
		t.Cleanup(network.Close)
		qp, cq, mr := rcQPTo(t, network, peer, true)
		r := &rxeLike{t: t, network: network}
		r.sendOnly(peer, qp, 500, 0x15ec, []byte("sealed with ID 0x15ec"))
		r.sendOnly(peer, qp, 500, 0, msg)
		wc := received(t, cq)
		assert.Equal(t, msg, mr.Bytes()[:wc.ByteLen])
		assert.Equal(t, uint64(1), qp.Device().Stats().RxBadICRC)
	})
}

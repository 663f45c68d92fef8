package cm

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
)

// udQP makes a UD QP of e's, ready to send and receive with rdma_cm's
// Q_Key, with receives for n datagrams of up to size bytes posted.
func (e *cmEnd) udQP(t *testing.T, n, size int) (*vroce.QP, *vroce.MR) {
	t.Helper()
	qp, err := e.pd.CreateQP(vroce.QPInitAttr{Type: vroce.UD, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: vroce.QPCap{MaxSendWR: 16, MaxRecvWR: n, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	for _, s := range []struct {
		a vroce.QPAttr
		m vroce.QPAttrMask
	}{
		{vroce.QPAttr{State: vroce.QPSInit, QKey: UDPQKey}, vroce.QPAttrState | vroce.QPAttrQKey},
		{vroce.QPAttr{State: vroce.QPSRTR}, vroce.QPAttrState},
		{vroce.QPAttr{State: vroce.QPSRTS, SQPSN: 1}, vroce.QPAttrState | vroce.QPAttrSQPSN},
	} {
		require.NoError(t, qp.Modify(&s.a, s.m))
	}
	slot := size + 40 // a UD receive starts with the GRH
	mr, err := e.pd.RegMR(make([]byte, (n+1)*slot), vroce.AccessLocalWrite)
	require.NoError(t, err)
	for i := range n {
		require.NoError(t, qp.PostRecv(vroce.RecvWR{ID: uint64(i), SGL: []vroce.SGE{mr.SGE((1+i)*slot, slot)}}))
	}
	return qp, mr
}

// TestUDServiceResolves: a client resolves a UD service port to the QP
// that serves it (SIDR_REQ and SIDR_REP in rdma_cm's UDP port space) and
// its datagram, sent with what it learned, lands there; a port nothing
// serves, or no longer serves, is refused, and the TCP port space's probe
// does not see the UD service.
func TestUDServiceResolves(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	server, _ := b.udQP(t, 4, 64)
	client, cmr := a.udQP(t, 4, 64)
	l, err := b.m.ListenUD(7174, server)
	require.NoError(t, err)
	ctx := ctxFor(t, 5*time.Second)

	peer, err := a.m.ResolveUD(ctx, b.dev.LocalAddr(), 7174)
	require.NoError(t, err)
	assert.Equal(t, UDPeer{Addr: b.dev.LocalAddr(), QPN: server.QPN(), QKey: UDPQKey}, peer)

	ah, err := a.pd.CreateAH(peer.Addr)
	require.NoError(t, err)
	copy(cmr.Bytes(), "hello, UD service")
	require.NoError(t, client.PostSend(vroce.SendWR{ID: 9, Opcode: vroce.WRSendWithImm, Flags: vroce.SendSignaled, Imm: client.QPN(),
		SGL: []vroce.SGE{cmr.SGE(0, 17)}, AH: ah, RemoteQPN: peer.QPN, RemoteQKey: peer.QKey}))
	wc := pollOne(t, ctx, b.cq)
	require.Equal(t, vroce.WCSuccess, wc.Status)
	assert.Equal(t, server.QPN(), wc.QPN)
	assert.Equal(t, client.QPN(), wc.SrcQP)
	assert.Equal(t, client.QPN(), wc.Imm)
	assert.Equal(t, uint32(17+40), wc.ByteLen)

	// Nothing serves 7175; the TCP port space has no 7174.
	_, err = a.m.ResolveUD(ctx, b.dev.LocalAddr(), 7175)
	var rej *RejectError
	require.ErrorAs(t, err, &rej)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
	got, err := a.m.Probe(ctx, b.dev.LocalAddr(), 7174)
	require.NoError(t, err)
	assert.Equal(t, ProbeNotListening, got)

	require.NoError(t, l.Close())
	_, err = a.m.ResolveUD(ctx, b.dev.LocalAddr(), 7174)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "after Close")
}

// TestListenUDRefuses: only a UD QP of the manager's own device serves,
// and one service port has one QP.
func TestListenUDRefuses(t *testing.T) {
	a, b, _ := simEnds(t, sim.Config{}, Config{})
	ud, _ := a.udQP(t, 1, 8)
	_, err := a.m.ListenUD(7174, a.newQP(t))
	assert.ErrorIs(t, err, vroce.ErrInvalid, "an RC QP")
	other, _ := b.udQP(t, 1, 8)
	_, err = a.m.ListenUD(7174, other)
	assert.ErrorIs(t, err, vroce.ErrInvalid, "another device's QP")
	_, err = a.m.ListenUD(7174, ud)
	require.NoError(t, err)
	_, err = a.m.ListenUD(7174, ud)
	assert.ErrorIs(t, err, vroce.ErrBusy)
}

// TestResolveUDUnanswered: no device answers at the address: the
// resolution gives up when its context ends, with ErrUnreachable.
func TestResolveUDUnanswered(t *testing.T) {
	a, _, _ := simEnds(t, sim.Config{}, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := a.m.ResolveUD(ctx, netip.MustParseAddrPort("127.0.0.9:4791"), 7174)
	assert.ErrorIs(t, err, ErrUnreachable)
}

// TestSIDRAnswerFromAnotherHostIsIgnored: a SIDR_REP that names a
// waiting request but comes from another address than the one asked is
// not taken as the answer; the same answer from the asked host is.
func TestSIDRAnswerFromAnotherHostIsIgnored(t *testing.T) {
	a, _, _ := simEnds(t, sim.Config{}, Config{})
	asked := netip.MustParseAddr("127.0.0.2")
	c := make(chan sidrAnswer, 1)
	a.m.mu.Lock()
	a.m.sidrWaits[77] = sidrWait{c: c, peer: asked}
	rep := &mad{attr: attrSIDRRep, localID: 77, status: sidrValid, qpn: 0x123, qkey: UDPQKey}
	forged := a.m.onSIDRRep(netip.MustParseAddrPort("127.0.0.3:4791"), rep)
	real := a.m.onSIDRRep(netip.AddrPortFrom(asked, 4791), rep)
	a.m.mu.Unlock()
	assert.False(t, forged)
	require.True(t, real)
	assert.Equal(t, sidrAnswer{status: sidrValid, qpn: 0x123, qkey: UDPQKey}, <-c)
}

// pollOne waits for one completion on cq.
func pollOne(t *testing.T, ctx context.Context, cq *vroce.CQ) vroce.WorkCompletion {
	t.Helper()
	wcs := make([]vroce.WorkCompletion, 1)
	n, err := cq.PollWait(ctx, wcs)
	if err == nil && n != 1 {
		err = errors.New("no completion")
	}
	require.NoError(t, err)
	return wcs[0]
}

// TestSIDRReqLikeRdmaCM: the SIDR_REQ ResolveUD sends for a UDP-space
// port carries rdma_cm's header as udaddy's over Soft-RoCE does: the
// same bytes, for the same addresses and port, where the private data
// opens.
func TestSIDRReqLikeRdmaCM(t *testing.T) {
	mads := rxeMADs(t, "udaddy.pcap")
	require.NotEmpty(t, mads)
	theirs := mads[0]
	require.Equal(t, attrSIDRReq, theirs.msg.attr)
	h := theirs.raw[madHeaderLen+sidrReqPrivOff:]
	srcPort := uint16(h[2])<<8 | uint16(h[3])
	ours := mad{attr: attrSIDRReq, serviceID: theirs.msg.serviceID, srcIP: theirs.from,
		dstIP: netip.MustParseAddr("10.0.0.1"), srcPort: srcPort}
	var b [vroce.MADSize]byte
	ours.marshal(&b)
	assert.Equal(t, h[:cmaHeaderLen], b[madHeaderLen+sidrReqPrivOff:][:cmaHeaderLen])
	assert.Equal(t, theirs.raw[madHeaderLen+8:madHeaderLen+16], b[madHeaderLen+8:madHeaderLen+16], "service ID")
	// Theirs comes from Linux's QP1 on a hashed port and is answered at
	// RoCEv2's; ours says it is vRoCE's, answered where it came from.
	assert.Zero(t, theirs.msg.vflags&vFlagPresent)
	var again mad
	require.NoError(t, parseMAD(b[:], &again))
	assert.NotZero(t, again.vflags&vFlagPresent)
	from := netip.MustParseAddrPort("10.0.0.2:55410")
	assert.Equal(t, netip.MustParseAddrPort("10.0.0.2:4791"), peerDevice(from, &theirs.msg))
	assert.Equal(t, from, peerDevice(from, &again))
}

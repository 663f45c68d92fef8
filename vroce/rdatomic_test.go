package vroce_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/providers/sim"
	"vroce.dev/vroce"
	"vroce.dev/vroce/wire"
)

// readTap is the requester's provider, watching the READ requests it sends
// and the responses that come back, as the responder's resources see
// them: a request asking for PSNs never asked for before takes one, until
// a response at or past its last PSN comes back (the responder answers in
// PSN order, so by then it is done with the request, lost responses or
// not); a request asking again for responses presumed lost is a duplicate
// at the responder and takes none.
type readTap struct {
	vroce.Provider
	mtu int

	mu       sync.Mutex
	asked    bool   // any request sent yet
	high     uint32 // the highest PSN any request asked for
	open     []uint32
	again    int // requests asking again
	requests int
	most     int
}

// after is a > b in 24-bit PSN space.
func after(a, b uint32) bool { return int32((a-b)<<8) > 0 }

func (t *readTap) Send(pkts []vroce.Packet) error {
	t.mu.Lock()
	for i := range pkts {
		var p wire.Packet
		if wire.Parse(&p, pkts[i].AppendTo(nil)) != nil || p.BTH.Opcode != wire.RCReadRequest {
			continue
		}
		n := max((int(p.RETH.DMALen)+t.mtu-1)/t.mtu, 1)
		last := (p.BTH.PSN + uint32(n) - 1) & 0xffffff
		t.requests++
		if t.asked && !after(p.BTH.PSN, t.high) {
			t.again++
			continue
		}
		t.asked, t.high = true, last
		t.open = append(t.open, last)
		t.most = max(t.most, len(t.open))
	}
	t.mu.Unlock()
	return t.Provider.Send(pkts)
}

func (t *readTap) Recv(pkts []vroce.Packet) (int, error) {
	n, err := t.Provider.Recv(pkts)
	t.mu.Lock()
	for i := range n {
		var p wire.Packet
		if wire.Parse(&p, pkts[i].Data) != nil || p.BTH.Opcode.Flags()&wire.IsResponse == 0 || p.BTH.Opcode == wire.RCAcknowledge {
			continue
		}
		k := 0
		for _, last := range t.open {
			if after(last, p.BTH.PSN) {
				t.open[k] = last
				k++
			}
		}
		t.open = t.open[:k]
	}
	t.mu.Unlock()
	return n, err
}

// TestReadRequestsInFlightStayWithinMaxRdAtomic: 20 READs of 64 KiB at a
// 1 KiB MTU, across a 10 ms path and a window that starts small, go out as
// many requests (each no more than the window has room for); no more of
// them are outstanding at once than the peer agreed to answer
// (max_rd_atomic 4), and every byte arrives. Before, the bound counted
// work requests: 1,166 requests, 106 outstanding against 16.
func TestReadRequestsInFlightStayWithinMaxRdAtomic(t *testing.T) {
	const maxRd, reads, size = 4, 20, 64 << 10
	// A 10 ms RTT, long against a race-built test's stalls, which would
	// make the requester presume responses lost and ask again.
	network := sim.NewNetwork(sim.Config{Delay: 5 * time.Millisecond})
	t.Cleanup(network.Close)
	ea, err := network.Attach(netip.MustParseAddrPort("10.0.1.1:4791"))
	require.NoError(t, err)
	tap := &readTap{Provider: ea, mtu: 1024}
	da, err := vroce.OpenWithProvider(tap, vroce.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { da.Close() })
	db := verbstest.OpenDevice(t, vroce.Config{Provider: "sim", Addr: "10.0.1.2:4791", ProviderOptions: network})
	o := defaultOpts()
	o.MaxRdAtomic, o.BufSize = maxRd, reads*size
	a, b := verbstest.Pair(t, da, db, o)
	fill(b.Buf, 3)
	verbstest.Sync(b)
	for i := range reads {
		off := i * size
		require.NoError(t, a.QP.PostSend(vroce.SendWR{ID: uint64(i), Opcode: vroce.WRRDMARead, Flags: vroce.SendSignaled,
			SGL: []vroce.SGE{a.MR.SGE(off, size)}, RemoteAddr: b.MR.Addr() + uint64(off), RKey: b.MR.RKey()}))
	}
	mustSucceed(t, waitCompletions(t, a.CQ, reads, 20*time.Second))
	verbstest.Sync(a)
	require.True(t, bytes.Equal(a.Buf, b.Buf), "READ data differs")
	tap.mu.Lock()
	defer tap.mu.Unlock()
	assert.Greater(t, tap.requests, reads, "each READ went as one request: the test shows nothing")
	// A request asked again was presumed lost by the requester, which
	// then no longer counts it, while its responses may still be on the
	// way: each may let one more new request out meanwhile. With none
	// (the usual run), the bound is max_rd_atomic exactly.
	assert.LessOrEqual(t, tap.most, maxRd+tap.again, "READ requests outstanding at once (of %d sent, %d asking again)", tap.requests, tap.again)
	t.Logf("%d READ requests (%d asking again), at most %d outstanding", tap.requests, tap.again, tap.most)
}

package udp

import (
	"fmt"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
)

// A message's pieces that lie one right after the other in memory go to
// the kernel as one iovec, which it copies far more cheaply than one per
// segment; pieces apart keep an iovec each, and empty ones take none.
func TestAdjacentPiecesShareAnIovec(t *testing.T) {
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	w := newBatchWriter(c, 4, false).(*mmsgWriter)
	to := c.LocalAddr().(*net.UDPAddr).AddrPort()
	mem := make([]byte, 8192)
	body := make([]byte, 2000)

	iovecs := func(pkts []vroce.Packet) (n int, bytes uint64) {
		w.set(0, pkts, 1000)
		h := &w.hdrs[0].Hdr
		for _, v := range w.iovs[:h.Iovlen] {
			bytes += v.Len
		}
		return int(h.Iovlen), bytes
	}
	total := func(pkts []vroce.Packet) (n uint64) {
		for _, p := range pkts {
			n += uint64(p.Len())
		}
		return n
	}

	var run []vroce.Packet // copied payloads end to end
	for i := range 4 {
		run = append(run, vroce.Packet{Data: mem[i*1000 : (i+1)*1000], Addr: to, Coalesce: true})
	}
	n, b := iovecs(run)
	require.Equal(t, 1, n, "four packets end to end")
	require.Equal(t, total(run), b)

	var apart []vroce.Packet // the same, a byte apart
	for i := range 4 {
		apart = append(apart, vroce.Packet{Data: mem[i*1001 : i*1001+1000], Addr: to, Coalesce: true})
	}
	n, b = iovecs(apart)
	require.Equal(t, 4, n, "four packets a byte apart")
	require.Equal(t, total(apart), b)

	var lent []vroce.Packet // headers, lent payload, tail; the next headers right after the tail
	for i := range 3 {
		at := 4096 + i*24
		lent = append(lent, vroce.Packet{Data: mem[at : at+16], Body: body, Tail: mem[at+16 : at+24], Addr: to, Coalesce: true})
	}
	n, b = iovecs(lent)
	require.Equal(t, 1+2*3, n, "each tail joins the next packet's headers")
	require.Equal(t, total(lent), b)
}

// A reader told that the GRO buffers never change (keep) stops checking
// where its headers point while it receives into them, and still lands
// every datagram in the buffers it is handed: other buffers in between,
// then the kept ones again.
func TestKeptBuffersAndOthersEachGetTheirDatagrams(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer rx.Close()
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	require.NoError(t, err)
	defer tx.Close()
	m, err := newMmsgReader(rx, 4, 0)
	require.NoError(t, err)

	buffers := func() ([][]byte, [][]byte) {
		bufs, oobs := make([][]byte, 4), make([][]byte, 4)
		for i := range bufs {
			bufs[i], oobs[i] = make([]byte, 64), make([]byte, 64)
		}
		return bufs, oobs
	}
	kept, keptOOB := buffers()
	other, otherOOB := buffers()
	m.keep(kept, keptOOB)
	rounds := [][][]byte{kept, kept, other, kept, other, other, kept}
	for round, into := range rounds {
		oobs := keptOOB
		if &into[0] == &other[0] {
			oobs = otherOOB
		}
		// One datagram a round, three after a round into the other
		// buffers: the headers a one-datagram round set up again are
		// not all of them.
		count := 1
		if round > 0 && &into[0] != &rounds[round-1][0] {
			count = 3
		}
		for i := range count {
			_, err := tx.Write([]byte(fmt.Sprintf("round %d, %d", round, i)))
			require.NoError(t, err)
		}
		var got int
		require.NoError(t, m.each(into, oobs, func(n int) (int, bool) { got = n; return n, false }))
		require.Equal(t, count, got, "round %d", round)
		for i := range count {
			assert.Equal(t, fmt.Sprintf("round %d, %d", round, i), string(into[i][:m.size(i)]), "round %d: each datagram is in the buffers handed in", round)
		}
	}
}

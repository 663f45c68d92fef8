package udp

import (
	"net"
	"testing"

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

package vroce_test

import (
	"context"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	_ "vroce.dev/providers/udp"
	"vroce.dev/vroce"
	"vroce.dev/vroce/wire"
)

func madOf(b byte) []byte {
	m := make([]byte, vroce.MADSize)
	m[0] = b
	return m
}

// A GSI probe from a socket of its own: a device answers on QP1; a host
// with nothing on the port refuses at once; a silent one is asked again
// at the waits given, until the context ends.
func TestProbeGSI(t *testing.T) {
	dev := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	var gsi atomic.Pointer[vroce.GSI] // set once OpenGSI returns; a MAD may come first
	g, err := dev.OpenGSI(func(from netip.AddrPort, mad []byte) {
		if g := gsi.Load(); g != nil && mad[0] == 'q' {
			g.Send(from, madOf('a')) // the answer
		}
	})
	require.NoError(t, err)
	gsi.Store(g)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	every := func() time.Duration { return 10 * time.Millisecond }

	answer, err := vroce.ProbeGSI(ctx, dev.LocalAddr(), madOf('q'), func(m []byte) bool { return m[0] == 'a' }, every)
	require.NoError(t, err)
	assert.Equal(t, madOf('a'), answer)

	closed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	nobody := closed.LocalAddr().(*net.UDPAddr).AddrPort()
	closed.Close()
	_, err = vroce.ProbeGSI(ctx, nobody, madOf('q'), func([]byte) bool { return true }, every)
	assert.ErrorIs(t, err, vroce.ErrNoDevice)

	silent, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer silent.Close()
	asks := 0
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	answer, err = vroce.ProbeGSI(short, silent.LocalAddr().(*net.UDPAddr).AddrPort(), madOf('q'), func([]byte) bool { return true },
		func() time.Duration { asks++; return 50 * time.Millisecond })
	assert.NoError(t, err)
	assert.Nil(t, answer, "silent: no answer when the context ends")
	silent.SetReadDeadline(time.Now().Add(100 * time.Millisecond)) // what came is queued already
	got := 0
	buf := make([]byte, 1024)
	for {
		n, err := silent.Read(buf)
		if err != nil {
			break
		}
		var p wire.Packet
		require.NoError(t, wire.Parse(&p, buf[:n]))
		assert.Equal(t, uint32(vroce.GSIQPN), p.BTH.DestQP)
		got++
	}
	assert.Equal(t, asks, got, "one datagram per ask")
	assert.GreaterOrEqual(t, got, 2, "asked again after each 50 ms wait, for 300 ms")

	_, err = vroce.ProbeGSI(ctx, dev.LocalAddr(), []byte("short"), func([]byte) bool { return true }, every)
	assert.ErrorIs(t, err, vroce.ErrInvalid)
}

package udp_test

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/testkit/verbstest"
	"vroce.dev/vroce"
)

// TestOversizedDatagramsAreCounted: a datagram larger than any packet is
// dropped by the provider, and the device says so (RxProviderDrops); a
// datagram of a packet's size that follows it reaches the device (the
// positive control).
func TestOversizedDatagramsAreCounted(t *testing.T) {
	dev := verbstest.OpenDevice(t, vroce.Config{Provider: "udp", Addr: "127.0.0.1:0"})
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(dev.LocalAddr()))
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write(make([]byte, vroce.MaxPacketSize+1000))
	require.NoError(t, err)
	_, err = c.Write(make([]byte, 64))
	require.NoError(t, err)
	// The device receives on its own goroutine, and in order: once the
	// control arrived, the datagram before it was dropped or not.
	verbstest.WaitFor(t, "the control datagram", func() bool { return dev.Stats().RxPackets > 0 })
	s := dev.Stats()
	assert.Equal(t, uint64(1), s.RxPackets, "the control, %+v", s)
	assert.Equal(t, uint64(1), s.RxProviderDrops)
}

package udp_test

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/internal/verbstest"
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
	deadline := time.Now().Add(5 * time.Second)
	for dev.Stats().RxPackets == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the device receives on its own goroutine
	}
	s := dev.Stats()
	assert.Equal(t, uint64(1), s.RxPackets, "the control, %+v", s)
	assert.Equal(t, uint64(1), s.RxProviderDrops)
}

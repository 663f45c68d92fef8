package rsock

import (
	"bytes"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
)

// A small write leaves at once inline and holds nothing until it is
// acknowledged: with the path cut, so that no ACK can come, it leaves
// no message in flight, where a write too large to go inline does
// (the control). Once the path heals, both arrive, in order.
func TestSmallWritesHoldNoBufferForTheirAck(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	lc := &ListenConfig{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.1:0", KeepAlive: -1}
	l := listen(t, lc, "127.0.0.1:7300")
	d := &Dialer{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.2:7300", KeepAlive: -1}
	c, s := pair(t, l, d)
	inflight := func() int {
		st := c.(*Conn).s
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.inflight.Len()
	}
	network.Partition(netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"))
	small, large := bytes.Repeat([]byte{1}, inlineMax), bytes.Repeat([]byte{2}, inlineMax+1)
	_, err := c.Write(small)
	require.NoError(t, err)
	assert.Zero(t, inflight(), "a small write waits for its ACK in a buffer")
	_, err = c.Write(large)
	require.NoError(t, err)
	assert.Equal(t, 1, inflight(), "the larger write, in flight until acknowledged")
	network.Heal()
	got := make([]byte, len(small)+len(large))
	_, err = io.ReadFull(s, got)
	require.NoError(t, err)
	require.Equal(t, append(small, large...), got)
	require.Eventually(t, func() bool { return inflight() == 0 }, 5*time.Second, time.Millisecond, "the larger write's buffer back once acknowledged")
	require.NoError(t, c.Close())
	require.NoError(t, s.Close())
	l.Close()
	settle(t)
}

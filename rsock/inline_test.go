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
	c, s, l, dialer := simCMPair(t, network, 7300)
	st := c.(*Conn).s
	inflight := func() int {
		st.mu.Lock()
		defer st.mu.Unlock()
		return st.inflight.Len()
	}
	network.Partition(netip.MustParseAddr("127.0.0.1"), dialer.Addr())
	small, large := bytes.Repeat([]byte{1}, st.st.inlineMax), bytes.Repeat([]byte{2}, st.st.inlineMax+1)
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

package rsock

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/providers/sim"
)

// TestTimeWaitAcknowledgesARepeatedFIN: the end that closes first keeps
// its QP in TIME_WAIT long enough to acknowledge the peer's FIN again
// when its ACKs are lost (to the original and to the tail-loss probe,
// so the peer's timeout sends it a third time), and the peer's close
// ends in order. With no TIME_WAIT, the peer's FIN goes unanswered.
func TestTimeWaitAcknowledgesARepeatedFIN(t *testing.T) {
	network := sim.NewNetwork(sim.Config{})
	defer network.Close()
	c, s, l, closer := simCMPair(t, network, 7200)

	// The positive control: data both ways, and c's FIN, arrive.
	_, err := c.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	_, err = s.Read(buf)
	require.ErrorIs(t, err, io.EOF)
	require.Eventually(t, func() bool { return stateOf(c) == stateFinWait2 }, 5*time.Second, time.Millisecond,
		"c's FIN acknowledged")

	// c's next packets are its ACKs of s's FIN; the first two are lost.
	network.DropNext(closer, 2)
	require.NoError(t, s.(*Conn).CloseWrite())
	require.Eventually(t, func() bool { st := stateOf(s); return st == stateTimeWait || st == statePeerGone },
		5*time.Second, time.Millisecond, "s's FIN acknowledged")
	q := s.(*Conn).s.qp.Stats()
	t.Logf("s's RTO %v: c's TIME_WAIT %v", q.RTO, timeWaitFor(q.RTO))
	assert.GreaterOrEqual(t, q.Retransmits, uint64(2), "s sent its FIN again, twice (%+v)", q)
	assert.Equal(t, uint64(2), network.Stats().Lost, "both ACKs were dropped")
	require.NoError(t, s.Close())
	l.Close()
	settle(t)
}

// stateOf is c's stream's state.
func stateOf(c net.Conn) streamState {
	s := c.(*Conn).s
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

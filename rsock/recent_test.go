package rsock

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecentServicesVouchForAWhile(t *testing.T) {
	r := recentServices{ttl: recentFor}
	a := netip.MustParseAddrPort("10.0.0.1:7000")
	t0 := time.Unix(1000, 0)
	assert.False(t, r.fresh(a, t0), "never reached")
	r.reached(a, t0)
	assert.True(t, r.fresh(a, t0.Add(recentFor-time.Millisecond)))
	assert.False(t, r.fresh(a, t0.Add(recentFor)), "stale")
	r.reached(a, t0)
	r.forget(a)
	assert.False(t, r.fresh(a, t0), "forgotten after a failed dial")

	// Bounded: a new service past maxRecent is not remembered while the
	// others are fresh, and takes a stale one's place.
	for i := range maxRecent {
		r.reached(netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), uint16(i+1)), t0)
	}
	late := netip.MustParseAddrPort("10.2.0.1:9")
	r.reached(late, t0.Add(time.Millisecond))
	assert.False(t, r.fresh(late, t0.Add(time.Millisecond)), "no room while the others are fresh")
	r.reached(late, t0.Add(recentFor))
	assert.True(t, r.fresh(late, t0.Add(recentFor)), "room once they are stale")
	assert.Len(t, r.seen, 1)
}

// A CM dial to a service that accepted one of this stack's dials lately
// skips the probe (an SIDR request the listener answers): three dials,
// one probe. The first dial probes: the positive control.
func TestCMDialsProbeAServiceTheyReachedOnce(t *testing.T) {
	t.Cleanup(func() { settle(t) })
	ln := listen(t, &ListenConfig{Mode: ModeCM}, "127.0.0.1:0")
	l := ln.(*Listener)
	raddr := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(l.addr.Port))
	d := &Dialer{Mode: ModeCM}
	st, err := d.clientStack(raddr) // the stack the dials share, held open
	require.NoError(t, err)
	t.Cleanup(func() { st.unref(false) })
	st.recent.mu.Lock()
	st.recent.ttl = time.Hour // the dials' pace is not what is tested
	st.recent.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		c, err := d.DialContext(ctx, "tcp", raddr.String())
		require.NoError(t, err, "dial %d", i)
		assert.Equal(t, "vroce", transport(c))
		s, err := ln.Accept()
		require.NoError(t, err)
		msg := fmt.Sprint("hello ", i)
		_, err = c.Write([]byte(msg))
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(s, got)
		require.NoError(t, err)
		assert.Equal(t, msg, string(got))
		c.Close()
		s.Close()
		assert.Equal(t, uint64(1), l.st.cm.Stats().Received.SIDRReq, "after dial %d", i)
	}
}

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

// A stack remembers services for recentFor, at most maxRecent of them
// (ttlmap's own tests cover the expiry and the bound).
func TestRecentServicesVouchForAWhile(t *testing.T) {
	r := newRecentServices()
	a := netip.MustParseAddrPort("10.0.0.1:7000")
	t0 := time.Unix(1000, 0)
	_, ok := r.Get(a, t0)
	assert.False(t, ok, "never reached")
	r.Put(a, struct{}{}, t0)
	_, ok = r.Get(a, t0.Add(recentFor-time.Millisecond))
	assert.True(t, ok)
	_, ok = r.Get(a, t0.Add(recentFor))
	assert.False(t, ok, "stale")
	r.Put(a, struct{}{}, t0)
	r.Delete(a)
	_, ok = r.Get(a, t0)
	assert.False(t, ok, "forgotten after a failed dial")
	assert.Equal(t, maxRecent, r.Max)
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
	st.recent.SetTTL(time.Hour) // the dials' pace is not what is tested
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

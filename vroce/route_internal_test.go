package vroce

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"vroce.dev/internal/ttlmap"
)

// The routing table's answer is reused for its TTL and asked again after;
// a failed lookup is not kept.
func TestRouteCacheKeepsAnswersForTheirTTL(t *testing.T) {
	asks := 0
	fail := false
	c := routeCache{kept: ttlmap.Map[netip.Addr, netip.Addr]{TTL: time.Second, Max: maxRoutes}, lookup: func(dst netip.Addr) (netip.Addr, error) {
		asks++
		if fail {
			return netip.Addr{}, errors.New("no route")
		}
		return netip.MustParseAddr("10.0.0.1"), nil
	}}
	dst := netip.MustParseAddr("10.0.0.2")
	t0 := time.Unix(1000, 0)
	for _, at := range []time.Duration{0, 10 * time.Millisecond, 999 * time.Millisecond} {
		src, err := c.source(dst, t0.Add(at))
		require.NoError(t, err)
		require.Equal(t, "10.0.0.1", src.String())
	}
	require.Equal(t, 1, asks, "within the TTL the kernel is asked once")

	fail = true
	_, err := c.source(dst, t0.Add(time.Second))
	require.Error(t, err, "after the TTL the kernel is asked again")
	_, err = c.source(dst, t0.Add(time.Second+time.Millisecond))
	require.Error(t, err, "a failure is not kept")
	require.Equal(t, 3, asks)
}

// The cache holds at most maxRoutes destinations; one more is answered
// but not kept, until old answers expire and make room.
func TestRouteCacheIsBounded(t *testing.T) {
	asks := 0
	c := routeCache{kept: ttlmap.Map[netip.Addr, netip.Addr]{TTL: time.Second, Max: maxRoutes}, lookup: func(netip.Addr) (netip.Addr, error) {
		asks++
		return netip.MustParseAddr("10.0.0.1"), nil
	}}
	t0 := time.Unix(1000, 0)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}) }
	for i := range maxRoutes + 1 {
		_, err := c.source(addr(i), t0)
		require.NoError(t, err)
	}
	require.Equal(t, maxRoutes, c.kept.Len())
	_, _ = c.source(addr(maxRoutes), t0)
	require.Equal(t, maxRoutes+2, asks, "the one without room is asked again")
	_, _ = c.source(addr(maxRoutes), t0.Add(time.Second))
	require.Equal(t, 1, c.kept.Len(), "expired answers make room")
}

// Through the kernel: loopback is reached from loopback.
func TestRouteSourceOfLoopback(t *testing.T) {
	src, err := RouteSource(netip.MustParseAddr("127.0.0.1"))
	require.NoError(t, err)
	require.True(t, src.IsLoopback(), "source %v", src)
}

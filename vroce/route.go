package vroce

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"vroce.dev/internal/ttlmap"
)

// RouteSource is the local address the routing table picks to reach dst:
// what a device on all addresses sends from, and so what its packets'
// ICRC covers. The kernel answers through a UDP socket connected to dst
// (a connect sends nothing), which costs a socket, its poller
// registration and half a dozen system calls; a CM dial asked twice per
// connection (the provider's device address, then the QP's flow), a
// tenth of a daemon's CPU under HTTP's Connection: close. Answers are
// kept for routeTTL, so a route changed meanwhile is seen that late. They
// are the process's: a program whose threads move between network
// namespaces opens its devices on an address, for which none is asked.
func RouteSource(dst netip.Addr) (netip.Addr, error) {
	return routes.source(dst.Unmap(), time.Now())
}

// routeTTL is how long an answer of the routing table is reused.
const routeTTL = time.Second

// maxRoutes bounds what routeCache keeps: a process reaching more
// destinations asks the kernel for those it has no room for.
const maxRoutes = 1024

// routes is the process's route cache.
var routes = routeCache{kept: ttlmap.Map[netip.Addr, netip.Addr]{TTL: routeTTL, Max: maxRoutes}, lookup: lookupRoute}

// routeCache keeps the routing table's answers for a while (not its
// failures: the next ask tries again). Safe for concurrent use.
type routeCache struct {
	kept   ttlmap.Map[netip.Addr, netip.Addr]
	lookup func(dst netip.Addr) (netip.Addr, error)
}

func (c *routeCache) source(dst netip.Addr, now time.Time) (netip.Addr, error) {
	if src, ok := c.kept.Get(dst, now); ok {
		return src, nil
	}
	src, err := c.lookup(dst)
	if err != nil {
		return netip.Addr{}, err
	}
	c.kept.Put(dst, src, now)
	return src, nil
}

// lookupRoute asks the kernel: the local address of a UDP socket
// connected to dst (any port: routes are by address).
func lookupRoute(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("vroce: no route to %v: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

package rsock

import (
	"net/netip"
	"time"

	"vroce.dev/internal/ttlmap"
)

// A CM dial probes the service first (a socket of its own, a round trip,
// and, for a host with nothing on the port, ECONNREFUSED in a round trip
// instead of the REQ's retries). A program that dials one service again
// and again (HTTP/1.0, "Connection: close", vroce-run's daemon under such
// a client) paid that on every connection: a fifth of the daemon's dialing
// CPU. A service that accepted a CM stream lately is taken to be there:
// the next CM dial to it within recentFor skips the probe. Only CM dials
// use it: a SOCKET dial's probe also decides whether the QP exchange may
// be written on the TCP connection, and a plain server that took that
// port since would read the exchange as its client's bytes.

// recentFor is how long an accepted CM connection vouches for its
// service. If the peer's device is gone within it, a dial waits out the
// REQ's retries (ErrUnreachable) instead of being refused at once.
const recentFor = time.Second

// maxRecent bounds what is remembered: a dialer of many services probes
// those it has no room for.
const maxRecent = 1024

// recentServices are the services reached lately: a service counts as
// there for recentFor after a CM stream to it started.
type recentServices = ttlmap.Map[netip.AddrPort, struct{}]

func newRecentServices() recentServices {
	return recentServices{TTL: recentFor, Max: maxRecent}
}

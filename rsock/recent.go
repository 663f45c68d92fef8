package rsock

import (
	"net/netip"
	"sync"
	"time"
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

// recentServices are the services reached lately, with when. Owned by
// its stack; safe for concurrent use.
type recentServices struct {
	mu   sync.Mutex
	seen map[netip.AddrPort]time.Time
	ttl  time.Duration // how long a reach vouches: recentFor
}

// fresh reports whether a reached lately, as of now.
func (r *recentServices) fresh(a netip.AddrPort, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[a]
	return ok && now.Sub(at) < r.ttl
}

// reached records that a accepted a connection at now.
func (r *recentServices) reached(a netip.AddrPort, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[netip.AddrPort]time.Time{}
	}
	if _, ok := r.seen[a]; !ok && len(r.seen) >= maxRecent {
		for k, at := range r.seen {
			if now.Sub(at) >= r.ttl {
				delete(r.seen, k)
			}
		}
		if len(r.seen) >= maxRecent {
			return
		}
	}
	r.seen[a] = now
}

// forget drops a: it failed to answer.
func (r *recentServices) forget(a netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, a)
}

package rsock

import (
	"context"
	"net/netip"
	"sync"

	"vroce.dev/vroce/cm"
)

// SOCKET dials to one service at once share one probe. A proxy in front
// of a busy service dials in bursts (10,000 streams through one proxy
// were set up at about 2,000 a second), and each dial's probe was a UDP
// socket made and closed, a MAD each way and the listener's answer: 15%
// of the dialing proxy's CPU while they were set up. Only a probe in
// flight is shared: its answer is as fresh for every dial that joined
// it. One that has ended vouches for nothing (recent.go says why a SOCKET
// dial must probe each time).

// probeFlights are a stack's probes in flight, by service.
type probeFlights struct {
	mu sync.Mutex // guards m and every flight's waiters
	m  map[netip.AddrPort]*probeFlight
}

// probeFlight is one probe and the dials waiting for its answer.
type probeFlight struct {
	done    chan struct{}  // closed once result is set
	result  cm.ProbeResult // the probe's answer
	waiters int            // dials that have not left it
	cancel  context.CancelFunc
}

// join returns the dial's share of the probe of service in flight,
// starting one with probe if there is none; the dial leaves it (result)
// when it has its answer or gives up. The probe runs until it is
// answered or every dial has left it.
func (fs *probeFlights) join(service netip.AddrPort, probe func(context.Context) cm.ProbeResult) *pendingProbe {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f := fs.m[service]; f != nil {
		f.waiters++
		return &pendingProbe{flights: fs, service: service, f: f}
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &probeFlight{done: make(chan struct{}), waiters: 1, cancel: cancel}
	if fs.m == nil {
		fs.m = map[netip.AddrPort]*probeFlight{}
	}
	fs.m[service] = f
	go func() {
		r := probe(ctx)
		fs.mu.Lock()
		if fs.m[service] == f {
			delete(fs.m, service) // the next dial probes afresh
		}
		f.result = r
		fs.mu.Unlock()
		close(f.done)
		cancel()
	}()
	return &pendingProbe{flights: fs, service: service, f: f}
}

// leave says a dial waits for f no more; the last to leave ends it.
func (fs *probeFlights) leave(service netip.AddrPort, f *probeFlight) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f.waiters--; f.waiters > 0 {
		return
	}
	if fs.m[service] == f {
		delete(fs.m, service)
	}
	f.cancel() // its answer, if it still comes, is nobody's
}

// pendingProbe is a dial's share of a probe in flight.
type pendingProbe struct {
	flights *probeFlights
	service netip.AddrPort
	f       *probeFlight
	left    bool
}

// answered is closed once the probe has its answer.
func (p *pendingProbe) answered() <-chan struct{} { return p.f.done }

// result leaves the probe and returns its answer: ProbeSilent if it has
// none yet.
func (p *pendingProbe) result() cm.ProbeResult {
	if !p.left {
		p.left = true
		p.flights.leave(p.service, p.f)
	}
	select {
	case <-p.f.done:
		return p.f.result
	default:
		return cm.ProbeSilent
	}
}

package afxdp

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"vroce.dev/vroce"
)

const (
	// holdMax is how many packets wait for one unresolved neighbour; more
	// are dropped, as the kernel's ARP queue drops them.
	holdMax = 64
	// neighTTL is how long a MAC is used before the kernel's table is read
	// again (in the background: the old MAC serves meanwhile).
	neighTTL = 5 * time.Second
	// resolveWait bounds one resolution; the transport resends what waited
	// in vain.
	resolveWait = 3 * time.Second
)

// neighbours maps destination IPs to the MAC of their next hop, from the
// kernel's route and neighbour tables. Senders only look up; one goroutine
// asks the kernel, so a sender never waits on ARP. The maps belong to
// whoever holds the provider's send lock: senders always do, and the
// resolver takes it to read or settle them.
type neighbours struct {
	p    *Provider
	macs map[netip.Addr]neighbour
	// waiting holds, per destination being resolved, the packets held for
	// it; a destination being refreshed has an entry with none.
	waiting map[netip.Addr][]vroce.Packet
	wake    chan struct{}
	quit    chan struct{}
	done    chan struct{}
}

type neighbour struct {
	mac [6]byte
	at  time.Time
}

func newNeighbours(p *Provider) *neighbours {
	n := &neighbours{
		p:       p,
		macs:    map[netip.Addr]neighbour{},
		waiting: map[netip.Addr][]vroce.Packet{},
		wake:    make(chan struct{}, 1),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	go n.run()
	return n
}

// lookup returns dst's next-hop MAC, or holds a copy of pk for it and
// starts resolving.
func (n *neighbours) lookup(to netip.AddrPort, pk *vroce.Packet, now time.Time) ([6]byte, bool) {
	dst := to.Addr()
	if e, ok := n.macs[dst]; ok {
		if _, busy := n.waiting[dst]; !busy && now.Sub(e.at) > neighTTL {
			n.waiting[dst] = nil
			n.signal()
		}
		return e.mac, true
	}
	held := n.waiting[dst]
	if len(held) >= holdMax {
		n.p.stats.unresolved.Add(1)
		return [6]byte{}, false
	}
	n.waiting[dst] = append(held, vroce.Packet{Data: pk.AppendTo(nil), Addr: to})
	n.signal()
	return [6]byte{}, false
}

func (n *neighbours) signal() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *neighbours) run() {
	defer close(n.done)
	for {
		select {
		case <-n.quit:
			return
		case <-n.wake:
		}
		for {
			dst, ok := n.next()
			if !ok {
				break
			}
			mac, err := n.resolve(dst)
			// Under the send lock, so that no packet sent after the MAC
			// is known overtakes the ones held for it.
			n.p.sendMu.Lock()
			held := n.settle(dst, mac, err == nil)
			if err != nil {
				n.p.stats.unresolved.Add(uint64(len(held)))
			} else if len(held) > 0 {
				n.p.sendLocked(held) // a closed provider drops them, as it should
			}
			n.p.sendMu.Unlock()
		}
	}
}

func (n *neighbours) next() (netip.Addr, bool) {
	n.p.sendMu.Lock()
	defer n.p.sendMu.Unlock()
	for dst := range n.waiting {
		return dst, true
	}
	return netip.Addr{}, false
}

// settle records the outcome for dst and hands back what waited for it.
func (n *neighbours) settle(dst netip.Addr, mac [6]byte, ok bool) []vroce.Packet {
	held := n.waiting[dst]
	delete(n.waiting, dst)
	if ok {
		n.macs[dst] = neighbour{mac: mac, at: time.Now()}
	} else {
		delete(n.macs, dst)
	}
	return held
}

var errClosed = errors.New("afxdp: closed")

// resolve asks the kernel for the next hop toward dst and its MAC, making
// the kernel resolve it (ARP or neighbour solicitation) when its table has
// no usable entry.
func (n *neighbours) resolve(dst netip.Addr) ([6]byte, error) {
	nl, ifindex := n.p.nl, n.p.ifindex
	hop, oif, err := nl.route(dst)
	if err != nil {
		return [6]byte{}, err
	}
	if oif != 0 && oif != ifindex {
		return [6]byte{}, fmt.Errorf("afxdp: the route to %v leaves by another interface", dst)
	}
	deadline := time.Now().Add(resolveWait)
	var asked time.Time
	for wait := 50 * time.Microsecond; ; wait = min(2*wait, 10*time.Millisecond) {
		mac, ok, err := nl.neighbour(ifindex, hop)
		if err != nil {
			return mac, err
		}
		if ok {
			return mac, nil
		}
		if time.Now().After(deadline) {
			return mac, fmt.Errorf("afxdp: %v did not resolve", hop)
		}
		if time.Since(asked) > time.Second {
			if err := nl.resolve(ifindex, hop); err != nil {
				return mac, fmt.Errorf("afxdp: resolving %v: %w", hop, err)
			}
			asked = time.Now()
		}
		select {
		case <-n.quit:
			return mac, errClosed
		case <-time.After(wait):
		}
	}
}

func (n *neighbours) close() {
	close(n.quit)
	<-n.done
}

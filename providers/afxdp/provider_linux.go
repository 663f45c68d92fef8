package afxdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"vroce.dev/vroce"
)

// Provider is a set of AF_XDP sockets, one per receive queue of one
// interface, serving one device.
type Provider struct {
	iface   string
	ifindex int
	mac     [6]byte
	local   netip.AddrPort
	mtu     int

	reserved *net.UDPConn // holds the UDP port in the kernel's tables
	nl       *rtnl
	watch    *linkWatch // in the epoll set: hears of the interface's deletion
	steer    *steering
	socks    []*xsk
	// Recv waits on an epoll set of every socket, itself waited on
	// through the runtime's poller so that Close wakes it.
	epoll *os.File
	rawEp syscall.RawConn

	closed  atomic.Bool
	rxMu    sync.Mutex // held by the receiving goroutine; Close waits for it
	rxNext  int        // the socket Recv looks at first, for fairness
	rxPkts  []vroce.Packet
	rxGot   int
	rxLooks int   // readiness checks in this wait: past the first, we were woken
	rxErr   error // a socket failed: every later Recv returns it
	rxReady func(uintptr) bool
	sendMu  sync.Mutex // one sender at a time on the TX ring
	neigh   *neighbours
	stats   struct {
		rx            []atomic.Uint64
		rxInvalid     atomic.Uint64
		rxBadChecksum atomic.Uint64
		tx            atomic.Uint64
		txNoFrame     atomic.Uint64
		unresolved    atomic.Uint64
	}
}

// Open attaches to the interface opts names and listens on addr
// ("host:port"; the host must be one of the interface's addresses, empty
// picks the first; port 0 picks a free one).
func Open(addr string, opts Options) (_ *Provider, err error) {
	name, err := ifaceName(opts)
	if err != nil {
		return nil, err
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("afxdp: interface %q: %w", name, err)
	}
	if len(ifi.HardwareAddr) != 6 {
		return nil, fmt.Errorf("afxdp: %s is not an Ethernet interface", name)
	}
	local, err := localAddr(ifi, addr)
	if err != nil {
		return nil, err
	}
	p := &Provider{iface: name, ifindex: ifi.Index, mac: [6]byte(ifi.HardwareAddr)}
	defer func() {
		if err != nil {
			p.release()
		}
	}()
	// The kernel keeps the port: no other program binds it, and a port of
	// 0 becomes a free one.
	p.reserved, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(local))
	if err != nil {
		return nil, fmt.Errorf("afxdp: reserving UDP port: %w", err)
	}
	p.local = netip.AddrPortFrom(local.Addr(), p.reserved.LocalAddr().(*net.UDPAddr).AddrPort().Port())
	ipHdr := ipv4Header
	if p.local.Addr().Is6() {
		ipHdr = ipv6Header
	}
	p.mtu = min(ifi.MTU, rxRoom-ethHeader) - ipHdr - udpHeader
	if p.nl, err = openRTNL(); err != nil {
		return nil, err
	}
	queues, _, err := p.nl.link(p.ifindex)
	if err != nil {
		return nil, err
	}
	queues = max(queues, 1)
	if p.steer, err = attachSteering(p.nl, p.ifindex, queues, name, p.local, opts.Generic); err != nil {
		return nil, err
	}
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("afxdp: epoll: %w", err)
	}
	unix.SetNonblock(epfd, true)
	p.epoll = os.NewFile(uintptr(epfd), "afxdp-epoll")
	if p.rawEp, err = p.epoll.SyscallConn(); err != nil {
		return nil, fmt.Errorf("afxdp: epoll: %w", err)
	}
	if p.watch, err = openLinkWatch(); err != nil {
		return nil, err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(p.watch.fd)}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, p.watch.fd, &ev); err != nil {
		return nil, fmt.Errorf("afxdp: epoll: %w", err)
	}
	for q := range queues {
		s, err := openXSK(p.ifindex, q)
		var be *bindError
		if q > 0 && errors.As(err, &be) && errors.Is(err, unix.EINVAL) {
			break // fewer queues are active than the device has
		}
		if err != nil {
			return nil, err
		}
		p.socks = append(p.socks, s)
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(s.fd)}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, s.fd, &ev); err != nil {
			return nil, fmt.Errorf("afxdp: epoll: %w", err)
		}
		if err := p.steer.register(q, s.fd); err != nil {
			return nil, fmt.Errorf("afxdp: registering queue %d's socket: %w", q, err)
		}
	}
	p.stats.rx = make([]atomic.Uint64, len(p.socks))
	p.rxReady = p.rxReadyCheck
	p.neigh = newNeighbours(p)
	return p, nil
}

// Recv implements vroce.Provider.
func (p *Provider) Recv(pkts []vroce.Packet) (int, error) {
	p.rxMu.Lock()
	defer p.rxMu.Unlock()
	p.rxPkts, p.rxGot = pkts, 0
	defer func() { p.rxPkts = nil }()
	for p.rxGot == 0 {
		if p.closed.Load() {
			return 0, net.ErrClosed
		}
		if p.rxErr != nil {
			return 0, p.rxErr
		}
		p.rxLooks = 0
		if err := p.rawEp.Read(p.rxReady); err != nil {
			if p.closed.Load() {
				return 0, net.ErrClosed
			}
			return 0, err
		}
	}
	return p.rxGot, nil
}

// rxReadyCheck is the poller's readiness check: it receives what is there.
// Open keeps it as the method value rxReady, made once, so that waiting
// allocates nothing.
func (p *Provider) rxReadyCheck(uintptr) bool {
	p.rxGot = p.receive(p.rxPkts)
	p.rxLooks++
	switch {
	case p.rxGot > 0:
	case p.rxLooks > 1:
		// Woken with nothing to read: the interface may be gone.
		p.rxErr = p.failure()
	case p.watch.deleted(p.ifindex):
		// The first look, before any wait: a deletion announced while no
		// Recv waited would never wake this one, since Go's poller forgets
		// readiness when a read begins (prepareRead) and this check reads
		// only the rings. One non-blocking read of the watch per Recv that
		// starts idle finds it.
		p.rxErr = fmt.Errorf("afxdp: %s: %w: %w", p.iface, vroce.ErrProviderFailed, unix.ENODEV)
	}
	return p.rxGot > 0 || p.rxErr != nil || p.closed.Load()
}

// failure reports the interface's deletion, or a socket's pending error,
// as a provider failure.
func (p *Provider) failure() error {
	if p.watch.deleted(p.ifindex) {
		return fmt.Errorf("afxdp: %s: %w: %w", p.iface, vroce.ErrProviderFailed, unix.ENODEV)
	}
	for _, s := range p.socks {
		if e, err := unix.GetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_ERROR); err == nil && e != 0 {
			return fmt.Errorf("afxdp: %s, queue %d: %w: %w", p.iface, s.queue, vroce.ErrProviderFailed, unix.Errno(e))
		}
	}
	return nil
}

// receive takes what the RX rings hold, up to len(pkts), checks each frame
// and lends its payload to the caller: frames go back to the fill ring on
// the next call, when the device is done with them (see vroce.Packet).
func (p *Provider) receive(pkts []vroce.Packet) int {
	for _, s := range p.socks {
		s.giveBack()
	}
	k := 0
	for range p.socks {
		s := p.socks[p.rxNext]
		q := p.rxNext
		p.rxNext = (p.rxNext + 1) % len(p.socks)
		n := min(s.rx.ready(uint32(len(pkts)-k)), uint32(len(pkts)-k))
		if n == 0 {
			continue
		}
		for i := range n {
			d := s.rx.xdpDesc(s.rx.local + i)
			frame := d.Addr &^ (frameSize - 1)
			dg, err := parseFrame(s.umem[d.Addr : d.Addr+uint64(d.Len)])
			if err == nil && dg.dst == p.local && len(dg.payload) <= vroce.MaxPacketSize {
				pkts[k].Data = dg.payload[:len(dg.payload):len(dg.payload)]
				pkts[k].Addr = dg.src
				k++
				s.lent = append(s.lent, frame)
				continue
			}
			p.stats.rxInvalid.Add(1)
			if err == errUDPChecksum || err == errIPChecksum {
				p.stats.rxBadChecksum.Add(1)
			}
			s.back = append(s.back, frame)
		}
		s.rx.local += n
		s.rx.publishConsumer()
		s.refill(s.back)
		s.back = s.back[:0]
		p.stats.rx[q].Add(uint64(n))
		if k == len(pkts) {
			break
		}
	}
	return k
}

// Send implements vroce.Provider. Packets to a next hop whose MAC the
// kernel has not resolved yet wait for it (a few per destination, as the
// kernel's own ARP queue does).
func (p *Provider) Send(pkts []vroce.Packet) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	return p.sendLocked(pkts)
}

// sendLocked is Send under sendMu.
func (p *Provider) sendLocked(pkts []vroce.Packet) error {
	if p.closed.Load() {
		return net.ErrClosed
	}
	s := p.socks[0]
	s.reclaim()
	now := time.Now()
	queued := s.tx.local
	var bad error // the first packet refused; the rest of the batch still goes
	for i := range pkts {
		pk := &pkts[i]
		dst := netip.AddrPortFrom(pk.Addr.Addr().Unmap(), pk.Addr.Port())
		if dst.Addr().Is4() != p.local.Addr().Is4() || pk.Len() > p.mtu {
			if bad == nil {
				bad = fmt.Errorf("afxdp: cannot send %d bytes to %v from %v (MTU %d)", pk.Len(), pk.Addr, p.local, p.mtu)
			}
			continue
		}
		mac, ok := p.neigh.lookup(dst, pk, now)
		if !ok {
			continue // held until resolved
		}
		if !p.frameFor(s) {
			p.stats.txNoFrame.Add(1)
			continue
		}
		addr := s.txFree[len(s.txFree)-1]
		s.txFree = s.txFree[:len(s.txFree)-1]
		l := path{srcMAC: p.mac, dstMAC: mac, src: p.local, dst: dst}
		frame := s.umem[addr : addr+frameSize]
		n := len(pk.AppendTo(frame[headerLen(dst.Addr().Is6()):][:0])) // whole: the MTU fits a frame
		d := s.tx.xdpDesc(s.tx.local)
		d.Addr, d.Len, d.Options = addr, uint32(writeHeaders(frame, &l, n)), 0
		s.tx.local++
	}
	p.stats.tx.Add(uint64(s.tx.local - queued))
	if err := p.flushTX(s); err != nil {
		return err
	}
	return bad
}

// frameFor makes sure a TX frame is free, pushing out what is queued and
// waiting a little for the kernel to complete frames if none is.
func (p *Provider) frameFor(s *xsk) bool {
	for try := 0; len(s.txFree) == 0; try++ {
		if try == 1000 {
			return false
		}
		if err := p.flushTX(s); err != nil {
			return false
		}
		s.reclaim()
		if len(s.txFree) == 0 {
			runtime.Gosched()
		}
	}
	return true
}

// flushTX publishes the TX ring and, where the kernel needs it (always in
// copy mode), kicks it until it has taken everything.
func (p *Provider) flushTX(s *xsk) error {
	s.tx.publishProducer()
	for try := 0; s.tx.consumer.Load() != s.tx.local; try++ {
		if !s.tx.needWakeup() || try == 1000 {
			return nil // the driver polls, or the link is stuck: next Send kicks again
		}
		if err := s.kick(); err != nil {
			return fmt.Errorf("afxdp: send: %w", err)
		}
		if try > 0 {
			runtime.Gosched()
		}
	}
	return nil
}

// LocalAddr implements vroce.Provider.
func (p *Provider) LocalAddr() netip.AddrPort { return p.local }

// MTU implements vroce.Provider: the largest UDP payload that fits both the
// link and a UMEM frame.
func (p *Provider) MTU() int { return p.mtu }

// BatchSize implements vroce.Provider.
func (p *Provider) BatchSize() int { return 64 }

// Stats reports the provider's counters.
func (p *Provider) Stats() Stats {
	st := Stats{
		Queues:        len(p.socks),
		Generic:       p.steer != nil && p.steer.generic,
		RxInvalid:     p.stats.rxInvalid.Load(),
		RxBadChecksum: p.stats.rxBadChecksum.Load(),
		TxPackets:     p.stats.tx.Load(),
		TxNoFrame:     p.stats.txNoFrame.Load(),
		Unresolved:    p.stats.unresolved.Load(),
	}
	for i := range p.stats.rx {
		v := p.stats.rx[i].Load()
		st.RxPerQueue = append(st.RxPerQueue, v)
		st.RxPackets += v
	}
	p.sendMu.Lock() // Close releases the sockets under it
	defer p.sendMu.Unlock()
	for _, s := range p.socks {
		if s.fd < 0 {
			continue
		}
		st.ZeroCopy = st.ZeroCopy || s.zeroCopy
		if ks, err := s.stats(); err == nil {
			st.KernelRxDropped += ks.Rx_dropped + ks.Rx_ring_full + ks.Rx_fill_ring_empty_descs
		}
	}
	return st
}

// Close implements vroce.Provider: it wakes Recv, detaches the XDP program
// and releases the sockets and their memory.
func (p *Provider) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	p.epoll.Close() // wakes a Recv blocked in the poller
	p.neigh.close()
	p.rxMu.Lock()
	p.sendMu.Lock()
	p.release()
	p.sendMu.Unlock()
	p.rxMu.Unlock()
	return nil
}

// release undoes Open, in reverse: first no packet is steered to the
// sockets, then the sockets go.
func (p *Provider) release() {
	if p.steer != nil {
		p.steer.close()
	}
	for _, s := range p.socks {
		s.close()
	}
	if p.epoll != nil {
		p.epoll.Close()
	}
	if p.nl != nil {
		p.nl.close()
	}
	if p.watch != nil {
		p.watch.close()
	}
	if p.reserved != nil {
		p.reserved.Close()
	}
}

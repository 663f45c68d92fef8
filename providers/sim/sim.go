package sim

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"vroce.dev/internal/clock"
	"vroce.dev/internal/minheap"
	"vroce.dev/vroce"
)

func init() {
	vroce.RegisterProvider("sim", func(cfg vroce.ProviderConfig) (vroce.Provider, error) {
		n, _ := cfg.Options.(*Network)
		if n == nil && cfg.Options != nil {
			return nil, fmt.Errorf("sim: ProviderOptions is %T, want *sim.Network", cfg.Options)
		}
		if n == nil {
			n = defaultNetwork()
		}
		var addr netip.AddrPort
		if cfg.Addr != "" {
			a, err := netip.ParseAddrPort(cfg.Addr)
			if err != nil {
				return nil, fmt.Errorf("sim: address %q: %w", cfg.Addr, err)
			}
			addr = a
		}
		return n.Attach(addr)
	})
}

var (
	defaultOnce sync.Once
	defaultNet  *Network
)

func defaultNetwork() *Network {
	defaultOnce.Do(func() { defaultNet = NewNetwork(Config{}) })
	return defaultNet
}

// Config sets a network's faults. Probabilities are fractions (0.01 is 1%)
// applied to each packet independently, drawn from a generator seeded
// with Seed, so a run's fault decisions repeat.
type Config struct {
	Seed      uint64
	Loss      float64
	Reorder   float64 // share of packets held back so later ones overtake
	Duplicate float64
	Corrupt   float64 // share of packets with one bit flipped
	Delay     time.Duration
	Jitter    time.Duration // uniform extra delay in [0, Jitter)
	// Rate limits each receiver's incoming link, in bytes per second;
	// packets beyond QueueBytes of backlog are dropped (a tail-drop
	// bottleneck queue). 0 is unlimited.
	Rate       float64
	QueueBytes int
	// MTU is the largest datagram the network carries; 0 means 4,200,
	// enough for a 4,096-byte path MTU.
	MTU int
	// RecvQueue is the packets an endpoint holds unread before it drops
	// arrivals, as a socket's receive buffer does; 0 means 8,192.
	RecvQueue int
}

// Stats count what the network did to packets.
type Stats struct {
	Sent, Delivered, Lost, Duplicated, Corrupted, Reordered, QueueDrops, Partitioned, Oversize uint64
	// RecvQueueDrops are arrivals an endpoint's full receive queue
	// dropped (Config.RecvQueue).
	RecvQueueDrops uint64
}

// Network is a simulated network. It is safe for concurrent use.
type Network struct {
	mu         sync.Mutex
	cfg        Config
	rng        *rand.Rand
	eps        map[netip.AddrPort]*Endpoint
	nextAuto   uint32
	cut        map[[2]netip.Addr]bool
	dropNext   map[netip.AddrPort]int // packets to drop from an address, before any other fault
	pending    minheap.Heap[delivery] // by sooner
	seq        uint64
	running    bool // the delivery goroutine is running
	clock      *clock.Clock
	epoch      time.Time
	armed      time.Time // the delivery the clock is set for
	closed     bool
	stats      Stats
	delivering sync.WaitGroup
}

// NewNetwork creates a network with the given faults.
func NewNetwork(cfg Config) *Network {
	n := &Network{eps: map[netip.AddrPort]*Endpoint{}, cut: map[[2]netip.Addr]bool{}, epoch: time.Now(), pending: minheap.New(sooner, nil)}
	clk, err := clock.New(n.epoch)
	if err != nil {
		panic("sim: no clock: " + err.Error()) // timerfd_create fails only when out of descriptors
	}
	n.clock = clk
	n.SetConfig(cfg)
	return n
}

// SetConfig changes the faults from now on and reseeds the generator.
func (n *Network) SetConfig(cfg Config) {
	if cfg.MTU == 0 {
		cfg.MTU = 4200
	}
	if cfg.QueueBytes == 0 {
		cfg.QueueBytes = 1 << 20
	}
	if cfg.RecvQueue == 0 {
		cfg.RecvQueue = defaultRecvQueue
	}
	n.mu.Lock()
	n.cfg = cfg
	n.rng = rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
	n.mu.Unlock()
}

// Stats returns the network's counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

// Partition drops every packet between addresses a and b, both ways, until
// Heal.
func (n *Network) Partition(a, b netip.Addr) {
	n.mu.Lock()
	n.cut[[2]netip.Addr{a, b}], n.cut[[2]netip.Addr{b, a}] = true, true
	n.mu.Unlock()
}

// DropNext drops the next count packets that from sends: a loss placed
// exactly, for tests.
func (n *Network) DropNext(from netip.AddrPort, count int) {
	n.mu.Lock()
	if n.dropNext == nil {
		n.dropNext = map[netip.AddrPort]int{}
	}
	n.dropNext[from] = count
	n.mu.Unlock()
}

// Heal ends every partition.
func (n *Network) Heal() {
	n.mu.Lock()
	clear(n.cut)
	n.mu.Unlock()
}

// Close detaches every endpoint and drops packets in flight.
func (n *Network) Close() {
	n.mu.Lock()
	n.closed = true
	eps := make([]*Endpoint, 0, len(n.eps))
	for _, ep := range n.eps {
		eps = append(eps, ep)
	}
	n.pending = minheap.New(sooner, nil)
	n.clock.Arm(1) // wake a delivery goroutine to see it closed
	n.mu.Unlock()
	for _, ep := range eps {
		ep.Close()
	}
	n.delivering.Wait()
	n.mu.Lock()
	n.clock.Close()
	n.mu.Unlock()
}

// Attach adds an endpoint at addr (an unused loopback address when addr is
// the zero value) and returns it as a vroce.Provider.
func (n *Network) Attach(addr netip.AddrPort) (*Endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, net.ErrClosed
	}
	if !addr.IsValid() {
		for {
			n.nextAuto++
			addr = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 77, byte(n.nextAuto >> 8), byte(n.nextAuto)}), 4791)
			if n.eps[addr] == nil {
				break
			}
		}
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if addr.Addr().IsUnspecified() {
		return nil, fmt.Errorf("sim: attach: %v needs a specific address", addr)
	}
	if addr.Port() == 0 { // an ephemeral port, as a socket gets
		for p := uint16(49152); ; p++ {
			if a := netip.AddrPortFrom(addr.Addr(), p); n.eps[a] == nil {
				addr = a
				break
			}
			if p == 65535 {
				return nil, fmt.Errorf("sim: attach: no free port on %v", addr.Addr())
			}
		}
	}
	if n.eps[addr] != nil {
		return nil, fmt.Errorf("sim: attach: address %v in use", addr)
	}
	ep := &Endpoint{net: n, addr: addr, ready: make(chan struct{}, 1), done: make(chan struct{})}
	n.eps[addr] = ep
	return ep, nil
}

type delivery struct {
	at   time.Time
	seq  uint64
	to   *Endpoint
	data *[]byte
	from netip.AddrPort
}

// sooner orders deliveries by time, then by the order they were sent.
func sooner(a, b delivery) bool {
	return a.at.Before(b.at) || (a.at.Equal(b.at) && a.seq < b.seq)
}

// send applies the network's faults to one packet from src.
func (n *Network) send(src *Endpoint, pkt vroce.Packet) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return net.ErrClosed
	}
	n.stats.Sent++
	dst := n.eps[netip.AddrPortFrom(pkt.Addr.Addr().Unmap(), pkt.Addr.Port())]
	c := &n.cfg
	switch {
	case dst == nil:
		n.stats.Lost++
		return nil
	case n.cut[[2]netip.Addr{src.addr.Addr(), dst.addr.Addr()}]:
		n.stats.Partitioned++
		return nil
	case pkt.Len() > c.MTU:
		n.stats.Oversize++
		return nil
	case n.dropNext[src.addr] > 0:
		n.dropNext[src.addr]--
		n.stats.Lost++
		return nil
	case c.Loss > 0 && n.rng.Float64() < c.Loss:
		n.stats.Lost++
		return nil
	}
	copies := 1
	if c.Duplicate > 0 && n.rng.Float64() < c.Duplicate {
		copies = 2
		n.stats.Duplicated++
	}
	now := time.Now()
	for i := 0; i < copies; i++ {
		data := getBuf(pkt.Len())
		*data = pkt.AppendTo((*data)[:0])
		if c.Corrupt > 0 && n.rng.Float64() < c.Corrupt {
			bit := n.rng.IntN(len(*data) * 8)
			(*data)[bit/8] ^= 1 << (bit % 8)
			n.stats.Corrupted++
		}
		delay := c.Delay
		if c.Jitter > 0 {
			delay += time.Duration(n.rng.Int64N(int64(c.Jitter)))
		}
		if c.Reorder > 0 && n.rng.Float64() < c.Reorder {
			delay += max(c.Delay, 50*time.Microsecond)
			n.stats.Reordered++
		}
		if c.Rate > 0 {
			start := now
			if dst.linkFree.After(start) {
				start = dst.linkFree
			}
			if start.Sub(now).Seconds()*c.Rate > float64(c.QueueBytes) {
				n.stats.QueueDrops++
				putBuf(data)
				continue
			}
			dst.linkFree = start.Add(time.Duration(float64(len(*data)) / c.Rate * 1e9))
			delay += dst.linkFree.Sub(now)
		}
		if delay <= 0 {
			dst.enqueue(data, src.addr)
			continue
		}
		n.seq++
		n.pending.Push(delivery{at: now.Add(delay), seq: n.seq, to: dst, data: data, from: src.addr})
		if !n.running {
			n.running = true
			n.delivering.Add(1)
			go n.deliverLoop()
		} else if next := n.pending.Min(); next.seq == n.seq && next.at.Before(n.armed) {
			n.armed = next.at
			n.clock.Arm(int64(next.at.Sub(n.epoch)))
		}
	}
	return nil
}

// deliverLoop hands delayed packets over on time; it runs only while
// packets are pending. Its clock is precise to microseconds, as the
// devices' are, or a 20 us delay would become a millisecond.
func (n *Network) deliverLoop() {
	defer n.delivering.Done()
	for {
		n.mu.Lock()
		now := time.Now()
		for n.pending.Len() > 0 && !n.pending.Min().at.After(now) {
			d := n.pending.Pop()
			d.to.enqueue(d.data, d.from)
		}
		if n.pending.Len() == 0 || n.closed {
			n.running = false
			n.mu.Unlock()
			return
		}
		n.armed = n.pending.Min().at
		n.clock.Arm(int64(n.armed.Sub(n.epoch)))
		n.mu.Unlock()
		n.clock.Wait()
	}
}

// Endpoint is one device's attachment to a Network; it implements
// vroce.Provider.
type Endpoint struct {
	net      *Network
	addr     netip.AddrPort
	linkFree time.Time // guarded by net.mu: when the incoming link is idle

	mu      sync.Mutex
	queue   []queued
	ready   chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	broken  atomic.Bool // Break: Recv fails for good
	dropped atomic.Uint64
	// interrupted: InterruptRecv asked the receive in progress, or the
	// next that finds nothing queued, to return empty.
	interrupted atomic.Bool
}

var (
	_ vroce.RecvInterrupter = (*Endpoint)(nil)
	_ vroce.DropCounter     = (*Endpoint)(nil)
)

// Dropped implements vroce.DropCounter: arrivals the endpoint's full (or
// closed) receive queue dropped.
func (ep *Endpoint) Dropped() uint64 { return ep.dropped.Load() }

// InterruptRecv implements vroce.RecvInterrupter.
func (ep *Endpoint) InterruptRecv() {
	ep.interrupted.Store(true)
	select {
	case ep.ready <- struct{}{}:
	default:
	}
}

type queued struct {
	data *[]byte
	from netip.AddrPort
}

// defaultRecvQueue is an endpoint's receive buffer, in packets, unless
// Config.RecvQueue says otherwise.
const defaultRecvQueue = 8192

// enqueue queues data for the endpoint, under n.mu (whose stats it
// counts in), or drops it when the endpoint's queue is full.
func (ep *Endpoint) enqueue(data *[]byte, from netip.AddrPort) {
	ep.mu.Lock()
	if ep.closed.Load() || len(ep.queue) >= ep.net.cfg.RecvQueue {
		ep.mu.Unlock()
		if !ep.closed.Load() {
			ep.net.stats.RecvQueueDrops++
		}
		ep.dropped.Add(1)
		putBuf(data)
		return
	}
	ep.net.stats.Delivered++
	ep.queue = append(ep.queue, queued{data, from})
	ep.mu.Unlock()
	select {
	case ep.ready <- struct{}{}:
	default:
	}
}

// Recv implements vroce.Provider.
func (ep *Endpoint) Recv(pkts []vroce.Packet) (int, error) {
	for {
		ep.mu.Lock()
		n := 0
		for n < len(pkts) && n < len(ep.queue) {
			q := ep.queue[n]
			pkts[n].Data = pkts[n].Data[:copy(pkts[n].Data[:cap(pkts[n].Data)], *q.data)]
			pkts[n].Addr = q.from
			putBuf(q.data)
			n++
		}
		// Compact in place: the queue keeps its array, so a steady flow
		// of packets allocates nothing.
		rest := copy(ep.queue, ep.queue[n:])
		clear(ep.queue[rest:])
		ep.queue = ep.queue[:rest]
		more := len(ep.queue) > 0
		ep.mu.Unlock()
		if more {
			select {
			case ep.ready <- struct{}{}:
			default:
			}
		}
		if n > 0 {
			return n, nil
		}
		if ep.closed.Load() {
			return 0, net.ErrClosed
		}
		if ep.broken.Load() {
			return 0, fmt.Errorf("sim: endpoint %v: %w", ep.addr, vroce.ErrProviderFailed)
		}
		if ep.interrupted.Swap(false) {
			return 0, nil
		}
		select {
		case <-ep.ready:
		case <-ep.done:
		}
	}
}

// Break fails the endpoint for good, as a NIC that died would: what is
// queued is still received, then Recv returns an error wrapping
// vroce.ErrProviderFailed (a blocked one wakes for it). For tests of how
// the layers above take a provider's failure.
func (ep *Endpoint) Break() {
	ep.broken.Store(true)
	select {
	case ep.ready <- struct{}{}:
	default:
	}
}

// Send implements vroce.Provider.
func (ep *Endpoint) Send(pkts []vroce.Packet) error {
	if ep.closed.Load() {
		return net.ErrClosed
	}
	for _, p := range pkts {
		if err := ep.net.send(ep, p); err != nil {
			return err
		}
	}
	return nil
}

// LocalAddr implements vroce.Provider.
func (ep *Endpoint) LocalAddr() netip.AddrPort { return ep.addr }

// MTU implements vroce.Provider.
func (ep *Endpoint) MTU() int {
	ep.net.mu.Lock()
	defer ep.net.mu.Unlock()
	return ep.net.cfg.MTU
}

// BatchSize implements vroce.Provider.
func (ep *Endpoint) BatchSize() int { return 32 }

// Close implements vroce.Provider: the address becomes free again.
func (ep *Endpoint) Close() error {
	if ep.closed.Swap(true) {
		return nil
	}
	close(ep.done)
	n := ep.net
	n.mu.Lock()
	if n.eps[ep.addr] == ep {
		delete(n.eps, ep.addr)
	}
	n.mu.Unlock()
	ep.mu.Lock()
	for _, q := range ep.queue {
		putBuf(q.data)
	}
	ep.queue = nil
	ep.mu.Unlock()
	return nil
}

// The pools hold packet buffers in two sizes, for IB path MTUs and for
// the extension ones; the pointer itself travels with the packet, so
// returning it allocates nothing.
const smallBuf = int(vroce.MTU4096) + 128

var (
	smallPool = sync.Pool{New: func() any { b := make([]byte, smallBuf); return &b }}
	largePool = sync.Pool{New: func() any { b := make([]byte, vroce.MaxPacketSize); return &b }}
)

func getBuf(n int) *[]byte {
	pool := &smallPool
	switch {
	case n > vroce.MaxPacketSize:
		b := make([]byte, n)
		return &b
	case n > smallBuf:
		pool = &largePool
	}
	b := pool.Get().(*[]byte)
	*b = (*b)[:n]
	return b
}

func putBuf(b *[]byte) {
	switch cap(*b) {
	case smallBuf:
		smallPool.Put(b)
	case vroce.MaxPacketSize:
		largePool.Put(b)
	}
}

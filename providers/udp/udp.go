package udp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"vroce.dev/vroce"
)

func init() {
	vroce.RegisterProviderWithTraits("udp", open, vroce.ProviderTraits{DeviceAddr: routeAddr, ProbesFromASocket: true})
}

// routeAddr is a device address for reaching peer: the address the route
// to it leaves from, any free port. Its ICRC checks are then exact and its
// MTU is that interface's. (A UDP connect sends nothing.)
func routeAddr(peer netip.AddrPort) (string, error) {
	src, err := vroce.RouteSource(peer.Addr())
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(src.String(), "0"), nil
}

// open opens a provider as Open asks: on cfg.Addr, else every address
// at DefaultPort.
func open(cfg vroce.ProviderConfig) (vroce.Provider, error) {
	addr := cfg.Addr
	if addr == "" {
		addr = fmt.Sprintf(":%d", DefaultPort)
	}
	opts, err := vroce.OptionsAs[Options]("udp", cfg.Options)
	if err != nil {
		return nil, err
	}
	if opts.BusyPoll == 0 {
		if opts.BusyPoll, err = vroce.BusyPollFromEnv(); err != nil {
			return nil, fmt.Errorf("udp: %w", err)
		}
	}
	return ListenWith(addr, opts)
}

// Options configures a UDP provider.
type Options struct {
	// BusyPoll, when positive, has a receive that finds nothing keep
	// trying for this long, yielding to other goroutines between tries,
	// before it sleeps in the runtime's poller: the receiving thread stays
	// awake, and a packet that comes in the meantime is taken without a
	// wake-up. It spends CPU for latency: on a two-core machine it took a
	// few microseconds off a loopback ping-pong and a third off the
	// small-message rate. $VROCE_BUSY_POLL (for example 50us) sets it for
	// programs that do not.
	BusyPoll time.Duration
}

// MaxBusyPoll bounds Options.BusyPoll: beyond it a sleeping receiver
// costs less than the spinning, and Close waits out a period in progress.
const MaxBusyPoll = time.Millisecond

// DefaultPort is RoCEv2's UDP port.
const DefaultPort = 4791

const (
	batchSize  = 64
	socketBuf  = 8 << 20
	ipv4Header = 20
	ipv6Header = 40
	udpHeader  = 8
)

// batchReader receives batches without allocating (recvmmsg on Linux).
type batchReader interface {
	recv(bufs, oobs [][]byte) (int, error)
	// each receives batch after batch into bufs, calling got with how
	// many datagrams arrived, until an error or until got says no more
	// (nil); got returns how many packets they made. After a batch that
	// did not fill bufs it asks the kernel for more at once only if that
	// was more than one packet (a busy socket), and otherwise waits for
	// the poller.
	each(bufs, oobs [][]byte, got func(datagrams int) (packets int, more bool)) error
	// keep says that bufs and oobs (the provider's GRO buffers) are
	// passed again and again, never changed: a receive into them need
	// not check where the reader's headers point.
	keep(bufs, oobs [][]byte)
	// stop ends an each in progress, as the socket closes.
	stop()
	size(i int) int
	control(i int) int
	from(i int) netip.AddrPort
}

// xnetReader receives through x/net's ReadBatch where recvmmsg cannot be
// called directly; it allocates an address per datagram.
type xnetReader struct {
	bc      batchConn
	msgs    []ipv4.Message
	sources []netip.AddrPort
}

func newXnetReader(bc batchConn, size int) *xnetReader {
	r := &xnetReader{bc: bc, msgs: make([]ipv4.Message, size), sources: make([]netip.AddrPort, size)}
	for i := range r.msgs {
		r.msgs[i].Buffers = make([][]byte, 1)
	}
	return r
}

func (r *xnetReader) recv(bufs, oobs [][]byte) (int, error) {
	ms := r.msgs[:min(len(bufs), len(r.msgs))]
	for i := range ms {
		ms[i].Buffers[0], ms[i].OOB = bufs[i], nil
		if oobs != nil {
			ms[i].OOB = oobs[i]
		}
	}
	got, err := r.bc.ReadBatch(ms, 0)
	if err != nil {
		return 0, err
	}
	for i := range ms[:got] {
		r.sources[i] = netip.AddrPort{}
		if ua, ok := ms[i].Addr.(*net.UDPAddr); ok {
			ap := ua.AddrPort()
			r.sources[i] = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		ms[i].Addr = nil
	}
	return got, nil
}

func (r *xnetReader) each(bufs, oobs [][]byte, got func(int) (int, bool)) error {
	for {
		n, err := r.recv(bufs, oobs)
		if err != nil {
			return err
		}
		if _, more := got(n); !more {
			return nil
		}
	}
}

func (r *xnetReader) stop()                    {} // each ReadBatch sees the socket closed
func (r *xnetReader) keep(bufs, oobs [][]byte) {} // ReadBatch sets every message up anyway

func (r *xnetReader) size(i int) int            { return r.msgs[i].N }
func (r *xnetReader) control(i int) int         { return r.msgs[i].NN }
func (r *xnetReader) from(i int) netip.AddrPort { return r.sources[i] }

// batchConn is what x/net's ipv4 and ipv6 packet conns share.
type batchConn interface {
	ReadBatch([]ipv4.Message, int) (int, error)
	WriteBatch([]ipv4.Message, int) (int, error)
}

// Provider is a UDP socket serving one device.
type Provider struct {
	conn  *net.UDPConn
	bc    batchConn
	local netip.AddrPort
	mtu   int
	v6    bool

	br    batchReader // owned by the one receiving goroutine
	views [][]byte
	// RecvEach's call in progress and its callbacks, made once (owned by
	// the receiving goroutine too).
	inEach           recvEachCall
	gotGRO, gotPlain func(int) (int, bool)
	// With UDP GRO, datagrams arrive coalesced into buffers of our own
	// and are lent to the caller a segment per packet; what does not fit
	// waits in pend for the next Recv.
	gro   bool
	rbufs [][]byte // groBuffers
	roob  [][]byte
	pend  []coalesced // what is left of the last batch
	batch []coalesced // pend's backing array, reused
	// dropped counts datagrams too large to be any packet (lend):
	// written by the receiving goroutine, read by Dropped.
	dropped atomic.Uint64
	// interrupted: InterruptRecv asked the receive in progress, or the
	// next, to return; it also set a read deadline in the past, which the
	// receiver clears as it takes the request.
	interrupted atomic.Bool

	sendMu  sync.Mutex
	bw      batchWriter
	gso     bool  // coalesce packets marked Coalesce, until the kernel refuses
	first   []int // per message: the index of its first packet
	gsoSent int   // coalesced datagrams sent (for tests)
}

// coalesced is a received run of datagrams of seg bytes each (the last
// may be shorter).
type coalesced struct {
	data []byte
	seg  int
	addr netip.AddrPort
}

const (
	// groBatch is how many coalesced datagrams one receive call takes.
	groBatch = 32
	// maxGSOSegments and maxGSOBytes bound one coalesced send: the
	// kernel's UDP_MAX_SEGMENTS, and what one IP datagram holds.
	maxGSOSegments = 64
	maxGSOBytes    = 65000
)

// Listen opens a provider on addr, "host:port".
func Listen(addr string) (*Provider, error) { return ListenWith(addr, Options{}) }

// ListenWith opens a provider on addr, "host:port", configured by opts.
func ListenWith(addr string, opts Options) (*Provider, error) {
	if opts.BusyPoll < 0 || opts.BusyPoll > MaxBusyPoll {
		return nil, fmt.Errorf("udp: busy polling for %v: want 0 to %v", opts.BusyPoll, MaxBusyPoll)
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	network := "udp4"
	if ua.IP != nil && ua.IP.To4() == nil {
		network = "udp6"
	} else if ua.IP == nil {
		network = "udp"
	}
	conn, err := net.ListenUDP(network, ua)
	if err != nil {
		return nil, fmt.Errorf("udp: %w", err)
	}
	local := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	p := &Provider{conn: conn, local: local, v6: local.Addr().Is6()}
	p.gotGRO, p.gotPlain = p.onGRO, p.onPlain
	if err := p.configure(); err != nil {
		conn.Close()
		return nil, err
	}
	if p.v6 {
		p.bc = ipv6.NewPacketConn(conn)
	} else {
		p.bc = ipv4.NewPacketConn(conn)
	}
	p.mtu = linkMTU(local.Addr()) - ipv4Header - udpHeader
	if p.v6 {
		p.mtu = linkMTU(local.Addr()) - ipv6Header - udpHeader
	}
	p.gso = gsoSupported
	p.first = make([]int, batchSize+1)
	p.bw = newBatchWriter(conn, batchSize, p.v6)
	if p.bw == nil {
		p.bw = newXnetWriter(p.bc, batchSize, p.v6)
	}
	p.br = newBatchReader(conn, max(batchSize, groBatch), opts.BusyPoll)
	if p.br == nil {
		p.br = newXnetReader(p.bc, max(batchSize, groBatch))
	}
	p.views = make([][]byte, batchSize)
	return p, nil
}

// groBuffers are the buffers coalesced datagrams arrive in, made at the
// first receive rather than at open: 2 MiB, whose allocation (and the
// collections it set off) was most of the time an open took (1.5 of
// 2.2 ms), paid by every device whether or not traffic ever came.
func (p *Provider) groBuffers() ([][]byte, [][]byte) {
	if p.rbufs == nil {
		p.rbufs = make([][]byte, groBatch)
		p.roob = make([][]byte, groBatch)
		p.batch = make([]coalesced, 0, groBatch)
		area := make([]byte, groBatch<<16)
		for i := range p.rbufs {
			p.rbufs[i] = area[i<<16 : (i+1)<<16 : (i+1)<<16]
			p.roob[i] = make([]byte, 64)
		}
		p.br.keep(p.rbufs, p.roob)
	}
	return p.rbufs, p.roob
}

// Recv implements vroce.Provider.
func (p *Provider) Recv(pkts []vroce.Packet) (int, error) {
	if p.takeInterrupt() {
		return 0, nil
	}
	if p.gro {
		if len(p.pend) == 0 {
			got, err := p.br.recv(p.groBuffers())
			if err != nil {
				return 0, p.recvError(err)
			}
			p.collect(got)
		}
		return p.lend(pkts), nil
	}
	views := p.viewsOf(pkts)
	got, err := p.br.recv(views, nil)
	if err != nil {
		return 0, p.recvError(err)
	}
	p.fill(pkts, views, got)
	return got, nil
}

// RecvEach implements vroce.BatchReceiver. After a batch of one packet
// (a request-reply exchange) that did not fill the buffers, the socket
// was empty, and the receiver parks in the runtime's poller without
// asking the kernel again, which the poller's edge-triggered wake-ups
// make safe. Recv cannot do that, because each receive call resets the
// poller's readiness first: it pays a recvmmsg finding nothing (about
// 1 us) per wake-up. After a larger batch more has most likely come
// while the device was busy, and asking is cheaper than a wake-up.
func (p *Provider) RecvEach(pkts []vroce.Packet, deliver func(n int) bool) error {
	if p.takeInterrupt() {
		return nil
	}
	if p.gro {
		if _, more := p.deliverPending(pkts, deliver); !more { // left by a Recv
			return nil
		}
	}
	c := &p.inEach
	c.pkts, c.deliver = pkts, deliver
	var err error
	if p.gro {
		bufs, oobs := p.groBuffers()
		err = p.br.each(bufs, oobs, p.gotGRO)
	} else {
		c.views = p.viewsOf(pkts)
		err = p.br.each(c.views, nil, p.gotPlain)
	}
	*c = recvEachCall{}
	return p.recvError(err)
}

// recvEachCall is the RecvEach call in progress, for the callbacks made
// once (gotGRO, gotPlain): a closure per call would allocate, and a CQ or
// Signal waiter calls RecvEach once per wait.
type recvEachCall struct {
	pkts    []vroce.Packet
	views   [][]byte
	deliver func(n int) bool
}

func (p *Provider) onGRO(got int) (int, bool) {
	p.collect(got)
	return p.deliverPending(p.inEach.pkts, p.inEach.deliver)
}

func (p *Provider) onPlain(got int) (int, bool) {
	c := &p.inEach
	p.fill(c.pkts, c.views, got)
	return got, c.deliver(got)
}

// InterruptRecv implements vroce.RecvInterrupter, through the socket's
// read deadline: a receive parked in the poller wakes at once.
func (p *Provider) InterruptRecv() {
	p.interrupted.Store(true)
	_ = p.conn.SetReadDeadline(longAgo)
}

// longAgo is a deadline that has always passed.
var longAgo = time.Unix(1, 0)

// takeInterrupt reports whether an interrupt is pending, and clears it
// and its deadline. An interrupt that lands between the two leaves its
// deadline behind: the next receive returns at once, empty, and clears
// it in turn.
func (p *Provider) takeInterrupt() bool {
	if !p.interrupted.Swap(false) {
		return false
	}
	_ = p.conn.SetReadDeadline(time.Time{})
	return true
}

// recvError is what a receive's error means: the deadline error an
// interrupt causes becomes a plain return; an error saying the socket can
// never receive again (its descriptor no longer a socket, or no longer
// open, and not through our Close) becomes one wrapping
// vroce.ErrProviderFailed; any other (a transient one, which the device
// counts and retries) passes on.
func (p *Provider) recvError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOTSOCK) || errors.Is(err, syscall.EBADF) {
		return fmt.Errorf("udp: %v: %w: %w", p.local, vroce.ErrProviderFailed, err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	p.interrupted.Store(false)
	_ = p.conn.SetReadDeadline(time.Time{})
	return nil
}

// deliverPending lends out what is in pend, as many packets at a time as
// pkts holds, until pend is empty or deliver wants no more; it returns
// how many it lent.
func (p *Provider) deliverPending(pkts []vroce.Packet, deliver func(n int) bool) (int, bool) {
	total := 0
	for len(p.pend) > 0 {
		if k := p.lend(pkts); k > 0 {
			total += k
			if !deliver(k) {
				return total, false
			}
		}
	}
	return total, true
}

// viewsOf is where datagrams for pkts are read to: each packet's whole
// buffer.
func (p *Provider) viewsOf(pkts []vroce.Packet) [][]byte {
	n := min(len(pkts), len(p.views))
	for i := range n {
		p.views[i] = pkts[i].Data[:cap(pkts[i].Data)]
	}
	return p.views[:n]
}

// fill makes the first got of pkts the datagrams read into views.
func (p *Provider) fill(pkts []vroce.Packet, views [][]byte, got int) {
	for i := range got {
		pkts[i].Data = views[i][:p.br.size(i)]
		pkts[i].Addr = p.br.from(i)
	}
}

// collect makes pend the got datagrams just received with UDP GRO into
// our buffers, each a run of segments.
func (p *Provider) collect(got int) {
	p.pend = p.batch[:0]
	for i := range got {
		n := p.br.size(i)
		seg := groSegment(p.roob[i][:p.br.control(i)])
		if seg <= 0 || seg > n {
			seg = n
		}
		p.pend = append(p.pend, coalesced{data: p.rbufs[i][:n], seg: seg, addr: p.br.from(i)})
	}
}

// lend fills pkts with segments from pend, lent rather than copied: the
// buffers are not read into again until pend is empty.
func (p *Provider) lend(pkts []vroce.Packet) int {
	k := 0
	for len(p.pend) > 0 && k < len(pkts) {
		c := &p.pend[0]
		n := min(c.seg, len(c.data))
		if n <= vroce.MaxPacketSize {
			pkts[k].Data = c.data[:n:n]
			pkts[k].Addr = c.addr
			k++
		} else {
			p.dropped.Add(1) // larger than any packet: not ours
		}
		c.data = c.data[n:]
		if len(c.data) == 0 {
			p.pend = p.pend[1:]
		}
	}
	return k
}

// Dropped implements vroce.DropCounter.
func (p *Provider) Dropped() uint64 { return p.dropped.Load() }

var (
	_ vroce.DropCounter     = (*Provider)(nil)
	_ vroce.BatchReceiver   = (*Provider)(nil)
	_ vroce.RecvInterrupter = (*Provider)(nil)
)

// Send implements vroce.Provider. Runs of packets marked Coalesce, to
// one address and of one size (the last may be shorter), leave as one
// segmented datagram (UDP GSO); the rest one datagram each; all in as few
// sendmmsg calls as the batch size allows.
func (p *Provider) Send(pkts []vroce.Packet) error {
	p.sendMu.Lock()
	defer p.sendMu.Unlock()
	for len(pkts) > 0 {
		m, i := 0, 0
		for i < len(pkts) && m < batchSize {
			j := p.run(pkts, i)
			p.first[m] = i
			segment := 0
			if j-i > 1 {
				segment = pkts[i].Len()
				p.gsoSent++
			}
			p.bw.set(m, pkts[i:j], segment)
			m, i = m+1, j
		}
		p.first[m] = i
		for off := 0; off < m; {
			sent, err := p.bw.send(off, m)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					p.bw.release(m)
					return err
				}
				if bad := off + max(sent, 0); bad < m && p.bw.segmented(bad) && gsoRefused(err) {
					// The route cannot segment: send singly from here on.
					p.gso = false
					i = p.first[bad]
					break
				}
				// A datagram the kernel refuses (no route, a full
				// buffer, an ICMP error reported late) is a lost
				// packet: the transport recovers it. Skip it.
				sent = max(sent, 1)
			}
			off += sent
		}
		p.bw.release(m)
		pkts = pkts[i:]
	}
	return nil
}

// run returns the end of the run of packets from i that may leave as one
// segmented datagram (i+1 for a packet that goes alone).
func (p *Provider) run(pkts []vroce.Packet, i int) int {
	if !p.gso || !pkts[i].Coalesce {
		return i + 1
	}
	size, total := pkts[i].Len(), pkts[i].Len()
	j := i + 1
	for j < len(pkts) && j-i < maxGSOSegments && pkts[j].Coalesce && pkts[j].Addr == pkts[i].Addr &&
		pkts[j].Len() <= size && total+pkts[j].Len() <= maxGSOBytes {
		n := pkts[j].Len()
		total += n
		j++
		if n < size {
			break // only the last segment may be short
		}
	}
	return j
}

// batchWriter sends batches of datagrams (sendmmsg on Linux) without
// allocating: set fills message i, send sends messages [from, n).
type batchWriter interface {
	// set makes message i the packets pkts, all to pkts[0].Addr; with
	// segment > 0 they leave as one datagram the kernel cuts into
	// segments of that size (UDP GSO).
	set(i int, pkts []vroce.Packet, segment int)
	// send sends messages from..n-1 and returns how many left; on an
	// error, how many left before the one that failed.
	send(from, n int) (int, error)
	segmented(i int) bool
	// release lets the first n messages' buffers go.
	release(n int)
}

// xnetWriter sends through x/net's WriteBatch where sendmmsg cannot be
// called directly.
type xnetWriter struct {
	bc     batchConn
	v6     bool
	msgs   []ipv4.Message
	addrs  []net.UDPAddr
	iovs   [][][]byte // per message: room for the three pieces of every segment
	gsoOOB [][]byte   // per message: its UDP_SEGMENT control message
}

func newXnetWriter(bc batchConn, size int, v6 bool) *xnetWriter {
	w := &xnetWriter{bc: bc, v6: v6, msgs: make([]ipv4.Message, size), addrs: make([]net.UDPAddr, size),
		iovs: make([][][]byte, size), gsoOOB: make([][]byte, size)}
	for i := range w.msgs {
		w.iovs[i] = make([][]byte, 0, 3*maxGSOSegments) // Data, Body, Tail
		w.addrs[i].IP = make(net.IP, 16)
		w.gsoOOB[i] = make([]byte, 64)
	}
	return w
}

func (w *xnetWriter) set(i int, pkts []vroce.Packet, segment int) {
	a := &w.addrs[i]
	ip := pkts[0].Addr.Addr()
	if w.v6 {
		b := ip.As16()
		a.IP = a.IP[:16]
		copy(a.IP, b[:])
	} else {
		b := ip.Unmap().As4()
		a.IP = a.IP[:4]
		copy(a.IP, b[:])
	}
	a.Port = int(pkts[0].Addr.Port())
	msg := &w.msgs[i]
	msg.Addr = a
	// The kernel gathers the segments, and the pieces of each, from an
	// iovec each: no copy here.
	iov := w.iovs[i][:0]
	for k := range pkts {
		iov = appendPieces(iov, &pkts[k])
	}
	msg.Buffers = iov
	msg.OOB = nil
	if segment > 0 {
		msg.OOB = gsoControl(w.gsoOOB[i], segment)
	}
}

// appendPieces appends the pieces of pk that hold bytes.
func appendPieces(iov [][]byte, pk *vroce.Packet) [][]byte {
	iov = append(iov, pk.Data)
	if len(pk.Body) > 0 {
		iov = append(iov, pk.Body)
	}
	if len(pk.Tail) > 0 {
		iov = append(iov, pk.Tail)
	}
	return iov
}

func (w *xnetWriter) send(from, n int) (int, error) { return w.bc.WriteBatch(w.msgs[from:n], 0) }

func (w *xnetWriter) segmented(i int) bool { return w.msgs[i].OOB != nil }

func (w *xnetWriter) release(n int) {
	for i := range w.msgs[:n] {
		clear(w.msgs[i].Buffers)
		w.msgs[i].Buffers, w.msgs[i].Addr, w.msgs[i].OOB = nil, nil, nil
	}
}

// LocalAddr implements vroce.Provider.
func (p *Provider) LocalAddr() netip.AddrPort { return p.local }

// MTU implements vroce.Provider.
func (p *Provider) MTU() int { return p.mtu }

// BatchSize implements vroce.Provider.
func (p *Provider) BatchSize() int { return batchSize }

// VerifiesUDPChecksum implements vroce.UDPChecksummer: the kernel sends
// every datagram with a checksum (or has the NIC add it) and drops one
// whose checksum is wrong. What it cannot verify is a datagram sent with
// none, a zero checksum: allowed on IPv4, and taken on IPv6 because
// rdma_rxe sends them (configure). No vRoCE sender does, so between two
// vRoCE devices every datagram is verified.
func (p *Provider) VerifiesUDPChecksum() bool { return true }

// Close implements vroce.Provider.
func (p *Provider) Close() error {
	// A receive loop that never waits in the poller (datagrams keep
	// coming) must hear of the close itself: the socket's Close waits
	// for it to return.
	p.br.stop()
	return p.conn.Close()
}

// linkMTU is the MTU of the interface holding addr; for an unspecified
// address, the smallest MTU of the interfaces that are up (loopback only if
// nothing else is), since a datagram may leave by any of them.
func linkMTU(addr netip.Addr) int {
	const fallback = 1500
	ifs, err := net.Interfaces()
	if err != nil {
		return fallback
	}
	best, loop := 0, 0
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		if !addr.IsUnspecified() {
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Unmap() == addr {
					return ifc.MTU
				}
			}
			if addr.IsLoopback() && ifc.Flags&net.FlagLoopback != 0 {
				loop = ifc.MTU
			}
			continue
		}
		if ifc.Flags&net.FlagLoopback != 0 {
			loop = ifc.MTU
		} else if best == 0 || ifc.MTU < best {
			best = ifc.MTU
		}
	}
	switch {
	case best > 0 && addr.IsUnspecified():
		return best
	case loop > 0:
		return loop
	}
	return fallback
}

// Conn is the provider's socket (for tests that inspect its options).
func (p *Provider) Conn() *net.UDPConn { return p.conn }

package udp

import (
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"vroce.dev/internal/nonblock"
	"vroce.dev/vroce"
)

// mmsgReader receives batches with recvmmsg directly, into structures it
// owns: x/net's ReadBatch allocates an address per datagram, this
// allocates nothing per call. It blocks through the runtime's poller.
type mmsgReader struct {
	rc    syscall.RawConn
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []unix.RawSockaddrInet6 // room for either family
	n     int                     // messages asked for, for read
	got   int
	errno syscall.Errno
	// How many headers from the first the kernel may have written since
	// prepare (their lengths: of the datagram, the source's, the control
	// data's; never where they point): a receive into the buffers the
	// headers point at sets up only those again (toPrepare). Setting up
	// all of them for every wait cost a ping-pong 1.8% of its CPU (perf,
	// send_lat).
	written int
	// kept are buffers the provider never changes (keep), and atKept says
	// every header points at them: toPrepare then need not look. Looking
	// touched a cache line per header, 32 each wait, and was the hottest
	// code of each in a one-CPU ping-pong's profile.
	kept, keptOOB [][]byte
	atKept        bool
	read          func(fd uintptr) bool // made once: a closure per call would allocate
	// each's call in progress, and its body, made once for the same
	// reason: a CQ or Signal waiter calls RecvEach once per wait.
	inEach   eachCall
	eachRead func(fd uintptr) bool
	// Busy polling (Options.BusyPoll): how long a receive keeps trying
	// before it parks, when it started trying, and the tries that found
	// nothing (for tests).
	busy       time.Duration
	busySince  time.Time
	spin       nonblock.Spin // for the busy poll begun at busySince
	emptyTries atomic.Int64
	stopped    atomic.Bool // the provider is closing: each returns
}

func newMmsgReader(c *net.UDPConn, size int, busy time.Duration) (*mmsgReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	m := &mmsgReader{rc: rc, hdrs: make([]unix.Mmsghdr, size), iovs: make([]unix.Iovec, size), names: make([]unix.RawSockaddrInet6, size), busy: busy}
	m.read = m.recvmmsg
	m.eachRead = m.readEach
	return m, nil
}

func (m *mmsgReader) recvmmsg(fd uintptr) bool {
	for {
		r, _, e := nonblock.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(m.n), unix.MSG_DONTWAIT, 0, 0)
		if e != unix.EAGAIN && e != unix.EWOULDBLOCK {
			m.got, m.errno = int(r), e
			m.written = m.n // an error's: whatever it may have touched
			if e == 0 {
				m.written = min(m.got+1, m.n) // and the one it stopped at
			}
			m.busySince = time.Time{}
			return true
		}
		if m.busy <= 0 {
			return false // park until readable
		}
		m.emptyTries.Add(1)
		now := time.Now()
		if m.busySince.IsZero() {
			m.busySince, m.spin = now, nonblock.StartSpin()
		} else if now.Sub(m.busySince) >= m.busy {
			m.busySince = time.Time{}
			return false
		}
		m.spin.Yield() // whoever is runnable goes first; then try again
	}
}

// recv fills up to len(bufs) datagrams (and their control data, if oobs
// is not nil) and returns how many arrived.
func (m *mmsgReader) recv(bufs, oobs [][]byte) (int, error) {
	m.prepare(bufs, oobs, len(bufs))
	if err := m.rc.Read(m.read); err != nil {
		return 0, err
	}
	if m.errno != 0 {
		return 0, m.errno
	}
	return m.got, nil
}

// each receives batches inside one poller wait: after a batch that did
// not fill bufs the socket was empty, so any datagram since raised a new
// edge, and after a lone packet it parks without a recvmmsg to find that
// out. (With busy polling it tries again, as recv would.)
func (m *mmsgReader) each(bufs, oobs [][]byte, got func(int) (int, bool)) error {
	e := &m.inEach
	e.bufs, e.oobs, e.got = bufs, oobs, got
	e.done = false // got asked for no more
	m.prepare(bufs, oobs, m.toPrepare(bufs, oobs))
	err := m.rc.Read(m.eachRead)
	done := e.done
	*e = eachCall{}
	if err != nil {
		return err
	}
	if m.stopped.Load() {
		return net.ErrClosed
	}
	if done {
		return nil
	}
	return m.errno
}

// eachCall is the state of the each call in progress, for eachRead.
type eachCall struct {
	bufs, oobs [][]byte
	got        func(int) (int, bool)
	done       bool
}

// readEach is each's body inside the poller's Read (m.eachRead).
func (m *mmsgReader) readEach(fd uintptr) bool {
	e := &m.inEach
	for {
		if m.stopped.Load() {
			return true
		}
		m.prepare(e.bufs, e.oobs, m.written)
		if !m.recvmmsg(fd) {
			return false
		}
		if m.errno != 0 {
			return true
		}
		packets, more := e.got(m.got)
		if !more {
			e.done = true
			return true
		}
		if m.got < m.n && packets <= 1 && m.busy <= 0 {
			return false
		}
	}
}

func (m *mmsgReader) stop() { m.stopped.Store(true) }

// keep implements batchReader.
func (m *mmsgReader) keep(bufs, oobs [][]byte) { m.kept, m.keptOOB, m.atKept = bufs, oobs, false }

// isKept says whether bufs and oobs are the kept buffers.
func (m *mmsgReader) isKept(bufs, oobs [][]byte) bool {
	return sameSlice(bufs, m.kept) && sameSlice(oobs, m.keptOOB)
}

// sameSlice says whether a and b are one slice of buffers.
func sameSlice(a, b [][]byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// prepare points the first k message headers at bufs and oobs, and
// readies a receive into as many as there are bufs. The headers after
// the first k must be set up for them already (toPrepare).
func (m *mmsgReader) prepare(bufs, oobs [][]byte, k int) {
	n := min(len(bufs), len(m.hdrs))
	m.atKept = len(m.kept) > 0 && m.isKept(bufs, oobs) && (k >= n || m.atKept)
	for i := range min(k, n) {
		m.iovs[i].Base = &bufs[i][0]
		m.iovs[i].SetLen(len(bufs[i]))
		h := &m.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&m.names[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov, h.Iovlen = &m.iovs[i], 1
		h.Control, h.Controllen = nil, 0
		if oobs != nil {
			h.Control = &oobs[i][0]
			h.SetControllen(len(oobs[i]))
		}
		m.hdrs[i].Len = 0
	}
	m.n, m.got, m.errno, m.written = n, 0, 0, 0
}

// toPrepare is how many headers, from the first, a receive into bufs and
// oobs must set up: those the kernel may have written since prepare if
// every header points at these buffers already (the provider's GRO
// buffers, the device's receive buffers), else all.
func (m *mmsgReader) toPrepare(bufs, oobs [][]byte) int {
	n := min(len(bufs), len(m.hdrs))
	if n != m.n {
		return n
	}
	if m.atKept && m.isKept(bufs, oobs) {
		return m.written
	}
	for i := range n {
		var control *byte
		if oobs != nil {
			control = &oobs[i][0]
		}
		if m.iovs[i].Base != &bufs[i][0] || uint64(m.iovs[i].Len) != uint64(len(bufs[i])) || m.hdrs[i].Hdr.Control != control {
			return n
		}
	}
	return m.written
}

// size is how many bytes datagram i holds.
func (m *mmsgReader) size(i int) int { return int(m.hdrs[i].Len) }

// control is the length of datagram i's control data.
func (m *mmsgReader) control(i int) int { return int(m.hdrs[i].Hdr.Controllen) }

// from is where datagram i came from, IPv4 unmapped.
func (m *mmsgReader) from(i int) netip.AddrPort {
	sa := &m.names[i]
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		p := (*[2]byte)(unsafe.Pointer(&sa4.Port))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), uint16(p[0])<<8|uint16(p[1]))
	case unix.AF_INET6:
		p := (*[2]byte)(unsafe.Pointer(&sa.Port))
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(p[0])<<8|uint16(p[1]))
	}
	return netip.AddrPort{}
}

func newBatchReader(c *net.UDPConn, size int, busy time.Duration) batchReader {
	m, err := newMmsgReader(c, size, busy)
	if err != nil {
		return nil
	}
	return m
}

// mmsgWriter sends batches with sendmmsg directly, from headers it owns
// and fills in place: x/net's WriteBatch marshals every header and address
// again on each call, which was a tenth of a ping-pong's user CPU.
type mmsgWriter struct {
	rc    syscall.RawConn
	v6    bool
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec            // piecesPerMessage per message; a header's Iovlen says how many it fills
	names []unix.RawSockaddrInet6 // room for either family
	oobs  [][]byte
	from  int // the messages to send, for write
	n     int
	sent  int
	errno syscall.Errno
	write func(fd uintptr) bool // made once: a closure per call would allocate
}

// piecesPerMessage is the iovecs one message may need: the three pieces
// (Data, Body, Tail) of each of its segments.
const piecesPerMessage = 3 * maxGSOSegments

func newBatchWriter(c *net.UDPConn, size int, v6 bool) batchWriter {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	w := &mmsgWriter{rc: rc, v6: v6, hdrs: make([]unix.Mmsghdr, size), iovs: make([]unix.Iovec, size*piecesPerMessage),
		names: make([]unix.RawSockaddrInet6, size), oobs: make([][]byte, size)}
	for i := range w.oobs {
		w.oobs[i] = make([]byte, unix.CmsgSpace(2))
	}
	w.write = w.sendmmsg
	return w
}

func (w *mmsgWriter) set(i int, pkts []vroce.Packet, segment int) {
	iov := w.iovs[i*piecesPerMessage : (i+1)*piecesPerMessage]
	k := 0
	for j := range pkts {
		pk := &pkts[j]
		k = setPiece(iov, k, pk.Data)
		k = setPiece(iov, k, pk.Body)
		k = setPiece(iov, k, pk.Tail)
	}
	h := &w.hdrs[i].Hdr
	h.Iov = &iov[0]
	h.SetIovlen(k)
	h.Name, h.Namelen = w.name(i, pkts[0].Addr)
	h.Control, h.Controllen = nil, 0
	if segment > 0 {
		c := gsoControl(w.oobs[i], segment)
		h.Control = &c[0]
		h.SetControllen(len(c))
	}
	w.hdrs[i].Len = 0
}

// setPiece points iov[k] at b, if b holds anything, and returns the next
// free index. A piece that begins where the one before it ends joins it:
// the engine lays a run of packets to coalesce end to end, and the kernel
// copies one piece much more cheaply than many (vroce's txBatch).
func setPiece(iov []unix.Iovec, k int, b []byte) int {
	if len(b) == 0 {
		return k
	}
	if k > 0 {
		last := &iov[k-1]
		if uintptr(unsafe.Pointer(last.Base))+uintptr(last.Len) == uintptr(unsafe.Pointer(&b[0])) {
			last.Len += uint64(len(b))
			return k
		}
	}
	iov[k].Base = &b[0]
	iov[k].SetLen(len(b))
	return k + 1
}

// name writes message i's destination in the socket's family (IPv4 as
// v4-mapped on an IPv6 socket).
func (w *mmsgWriter) name(i int, to netip.AddrPort) (*byte, uint32) {
	sa := &w.names[i]
	if !w.v6 && to.Addr().Unmap().Is4() {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		putPort(&sa4.Port, to.Port())
		sa4.Addr = to.Addr().Unmap().As4()
		return (*byte)(unsafe.Pointer(sa4)), unix.SizeofSockaddrInet4
	}
	// An IPv6 destination on an IPv4 socket lands here too, and the
	// kernel refuses it: a lost packet, as with x/net.
	sa.Family = unix.AF_INET6
	putPort(&sa.Port, to.Port())
	sa.Flowinfo, sa.Scope_id = 0, 0
	sa.Addr = to.Addr().As16()
	return (*byte)(unsafe.Pointer(sa)), unix.SizeofSockaddrInet6
}

// putPort stores port in network byte order.
func putPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

func (w *mmsgWriter) send(from, n int) (int, error) {
	w.from, w.n, w.sent, w.errno = from, n, 0, 0
	if err := w.rc.Write(w.write); err != nil {
		return 0, err
	}
	if w.errno != 0 {
		return w.sent, os.NewSyscallError("sendmmsg", w.errno)
	}
	return w.sent, nil
}

func (w *mmsgWriter) sendmmsg(fd uintptr) bool {
	for {
		var r uintptr
		var e syscall.Errno
		if h := &w.hdrs[w.from].Hdr; w.n-w.from == 1 && h.Iovlen == 1 && h.Control == nil {
			// One datagram in one piece, the request-reply case: sendto
			// costs the kernel less than sendmmsg, which copies in and
			// walks a header and an iovec array first (about 0.4 us a
			// send: BenchmarkPingPong64 at GOMAXPROCS=1).
			iov := &w.iovs[w.from*piecesPerMessage]
			_, _, e = nonblock.Syscall6(unix.SYS_SENDTO, fd, uintptr(unsafe.Pointer(iov.Base)), uintptr(iov.Len), 0, uintptr(unsafe.Pointer(h.Name)), uintptr(h.Namelen))
			if e == 0 {
				r = 1
			}
		} else {
			r, _, e = nonblock.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&w.hdrs[w.from])), uintptr(w.n-w.from), 0, 0, 0)
		}
		switch e {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until writable
		case 0:
			w.sent = int(r)
		}
		w.errno = e
		return true
	}
}

func (w *mmsgWriter) segmented(i int) bool { return w.hdrs[i].Hdr.Control != nil }

func (w *mmsgWriter) release(n int) {
	for i := range n {
		clear(w.iovs[i*piecesPerMessage : i*piecesPerMessage+int(w.hdrs[i].Hdr.Iovlen)])
	}
}

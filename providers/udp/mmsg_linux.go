package udp

import (
	"net"
	"net/netip"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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
	read  func(fd uintptr) bool // made once: a closure per call would allocate
	// Busy polling (Options.BusyPoll): how long a receive keeps trying
	// before it parks, when it started trying, and the tries that found
	// nothing (for tests).
	busy       time.Duration
	busySince  time.Time
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
	return m, nil
}

func (m *mmsgReader) recvmmsg(fd uintptr) bool {
	for {
		r, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(m.n), unix.MSG_DONTWAIT, 0, 0)
		if e != unix.EAGAIN && e != unix.EWOULDBLOCK {
			m.got, m.errno = int(r), e
			m.busySince = time.Time{}
			return true
		}
		if m.busy <= 0 {
			return false // park until readable
		}
		m.emptyTries.Add(1)
		now := time.Now()
		if m.busySince.IsZero() {
			m.busySince = now
		} else if now.Sub(m.busySince) >= m.busy {
			m.busySince = time.Time{}
			return false
		}
		runtime.Gosched() // whoever is runnable goes first; then try again
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
func (m *mmsgReader) each(bufs, oobs [][]byte, got func(int) int) error {
	dirty := len(bufs) // headers to set up again: those the kernel may have written
	read := func(fd uintptr) bool {
		for {
			if m.stopped.Load() {
				return true
			}
			m.prepare(bufs, oobs, dirty)
			if dirty = 0; !m.recvmmsg(fd) {
				return false
			}
			if m.errno != 0 {
				return true
			}
			dirty = m.got + 1 // and the one it stopped at
			if packets := got(m.got); m.got < m.n && packets <= 1 && m.busy <= 0 {
				return false
			}
		}
	}
	if err := m.rc.Read(read); err != nil {
		return err
	}
	if m.stopped.Load() {
		return net.ErrClosed
	}
	return m.errno
}

func (m *mmsgReader) stop() { m.stopped.Store(true) }

// prepare points the first k message headers at bufs and oobs, and
// readies a receive into as many as there are bufs.
func (m *mmsgReader) prepare(bufs, oobs [][]byte, k int) {
	n := min(len(bufs), len(m.hdrs))
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
	m.n, m.got, m.errno = n, 0, 0
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

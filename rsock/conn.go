package rsock

import (
	"io"
	"net"
	"os"
	"sync"
	"time"

	"vroce.dev/netconn"
)

// Conn is a stream over vRoCE: a net.Conn with CloseWrite, Transport
// ("vroce") and SetLinger.
type Conn struct {
	*netconn.Conn
	s *stream
}

func newConn(s *stream, network string, local, remote net.Addr) *Conn {
	return &Conn{Conn: netconn.New(s, network, local, remote, "vroce"), s: s}
}

// SetLinger sets what Close does, as TCPConn.SetLinger: negative (the
// default) closes in the background after sending what was written;
// zero discards unsent data and resets the connection.
func (c *Conn) SetLinger(sec int) error {
	c.s.SetLinger(sec)
	return nil
}

// TCPConn is a stream that fell back to TCP: the peer does not speak
// vRoCE. Transport reports "tcp".
type TCPConn struct {
	*net.TCPConn
	// prefix holds what the listener read while telling a plain TCP
	// client from a vRoCE one; the application reads it first.
	mu     sync.Mutex
	prefix []byte
	closed bool
	// rd mirrors the socket's read deadline for reads of the prefix,
	// which never reach the socket.
	rd netconn.Deadline
}

// Transport says what carries the connection.
func (c *TCPConn) Transport() string { return "tcp" }

// Buffered is how many bytes the listener read from the socket while it
// told a plain TCP client from a vRoCE one that Read has not yet
// returned: with none, the socket holds the whole stream, and a program
// may be handed it as it is (vroced does).
func (c *TCPConn) Buffered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.prefix)
}

// Read implements net.Conn.
func (c *TCPConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.prefix) == 0 {
		c.mu.Unlock()
		return c.TCPConn.Read(p)
	}
	defer c.mu.Unlock()
	err := error(nil)
	switch {
	case c.closed:
		err = net.ErrClosed
	case c.rd.Expired():
		err = os.ErrDeadlineExceeded
	}
	if err != nil {
		return 0, netconn.OpError("read", "tcp", c.LocalAddr(), c.RemoteAddr(), err)
	}
	n := copy(p, c.prefix)
	c.prefix = c.prefix[n:]
	return n, nil
}

// WriteTo writes what the connection reads to w, the prefix first: the
// embedded TCPConn's WriteTo would skip it.
func (c *TCPConn) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	prefix := c.prefix
	c.prefix = nil
	c.mu.Unlock()
	var n int64
	if len(prefix) > 0 {
		k, err := w.Write(prefix)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	k, err := c.TCPConn.WriteTo(w)
	return n + k, err
}

// SetDeadline implements net.Conn.
func (c *TCPConn) SetDeadline(t time.Time) error {
	c.rd.Set(t)
	return c.TCPConn.SetDeadline(t)
}

// SetReadDeadline implements net.Conn.
func (c *TCPConn) SetReadDeadline(t time.Time) error {
	c.rd.Set(t)
	return c.TCPConn.SetReadDeadline(t)
}

// Close implements net.Conn.
func (c *TCPConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return c.TCPConn.Close()
}

// Info is a stream's transport state, what a program asks a TCP socket
// with TCP_INFO (vroce-run's interposer answers it from here).
type Info struct {
	RTT         time.Duration // smoothed round-trip time
	MinRTT      time.Duration // the base round-trip time
	Retransmits uint64        // packets sent again
	Timeouts    uint64        // retransmission timer expiries
	CWnd        int           // congestion window, packets
	MTU         int           // path MTU: the payload of a packet
	TxPackets   uint64
	RxPackets   uint64
	BytesIn     uint64 // what the application has read
	BytesOut    uint64 // what it has written
	// How the retransmissions came about: loss episodes found from
	// SACKs, tail-loss probes, and timeouts undone because the original
	// packets had arrived after all.
	FastRetransmits  uint64
	TailProbes       uint64
	SpuriousTimeouts uint64
	// SendStallHolds counts loss deadlines held because a send of this
	// host's had not returned: the host stalled, not the path.
	SendStallHolds uint64
	// Why sending waited though the window was open: RNRWaits counts
	// messages the peer refused for want of a posted receive (its shared
	// receive queue ran dry; they are sent again after its RNR timer),
	// PeerBudgetStops the times this stream's QP held back because all
	// the QPs of its device to that peer had as much in flight as the
	// peer's receive buffer is assumed to hold.
	RNRWaits        uint64
	PeerBudgetStops uint64
}

// Info returns the stream's transport state now.
func (c *Conn) Info() Info {
	q := c.s.qp.Stats()
	c.s.mu.Lock()
	in, out := c.s.bytesIn, c.s.bytesOut
	c.s.mu.Unlock()
	return Info{RTT: q.SRTT, MinRTT: q.MinRTT, Retransmits: q.Retransmits, Timeouts: q.Timeouts,
		FastRetransmits: q.FastRetransmits, TailProbes: q.TailProbes, SpuriousTimeouts: q.SpuriousTimeouts,
		SendStallHolds: q.SendStallHolds, RNRWaits: q.RNRNAKsRecv, PeerBudgetStops: q.PeerBudgetStops,
		CWnd: q.CWnd, MTU: int(c.s.qp.Attr().PathMTU), TxPackets: q.TxPackets, RxPackets: q.RxPackets, BytesIn: in, BytesOut: out}
}

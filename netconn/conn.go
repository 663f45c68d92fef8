package netconn

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// ErrCanceled is what a Stream returns when the cancel channel it was
// given closes before it could make progress.
var ErrCanceled = errors.New("netconn: canceled")

// Stream is a transport's byte stream, as Conn drives it.
type Stream interface {
	// Read blocks until it can return data, io.EOF or an error, or
	// until cancel closes (then ErrCanceled, having read nothing).
	Read(p []byte, cancel <-chan struct{}) (int, error)
	// Write blocks until all of p is accepted, or returns how much was
	// with an error; cancel as for Read.
	Write(p []byte, cancel <-chan struct{}) (int, error)
	// CloseWrite ends the stream's sending half: the peer reads io.EOF
	// once it has read everything sent before.
	CloseWrite() error
	// Close ends both halves; calls blocked in Read and Write return.
	Close() error
}

// ReadInterrupter is a Stream whose Read may block elsewhere than on its
// cancel channel (an rsock reader receiving for its device). The Conn
// calls InterruptRead when the read deadline passes, so that the Read
// sees it at once; a spurious call must be harmless.
type ReadInterrupter interface {
	InterruptRead()
}

// WriteInterrupter is ReadInterrupter's counterpart for Write: the Conn
// calls InterruptWrite when the write deadline passes.
type WriteInterrupter interface {
	InterruptWrite()
}

// StreamReaderFrom is a Stream that can send what a reader yields without
// a buffer of the caller's in between: Conn.ReadFrom uses it.
type StreamReaderFrom interface {
	// CopyFrom sends what r yields until io.EOF (a nil error), a
	// failure of r or of the stream, or until cancel closes (then
	// ErrCanceled); it returns how many bytes it accepted.
	CopyFrom(r io.Reader, cancel <-chan struct{}) (int64, error)
}

// StreamWriterTo is a Stream that can write what it receives to a writer
// without a buffer of the caller's in between: Conn.WriteTo uses it.
type StreamWriterTo interface {
	// CopyTo writes what arrives to w until the peer's end (a nil
	// error), a failure, or until cancel closes (then ErrCanceled).
	CopyTo(w io.Writer, cancel <-chan struct{}) (int64, error)
}

// Conn is a net.Conn over a Stream.
type Conn struct {
	s         Stream
	net       string
	local     net.Addr
	remote    net.Addr
	transport string
	rd, wd    Deadline
	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// New wraps s. network names it in errors ("tcp", "tcp4", "tcp6");
// transport is what Transport reports.
func New(s Stream, network string, local, remote net.Addr, transport string) *Conn {
	c := &Conn{s: s, net: network, local: local, remote: remote, transport: transport}
	if ri, ok := s.(ReadInterrupter); ok {
		c.rd.onExpire = ri.InterruptRead
	}
	if wi, ok := s.(WriteInterrupter); ok {
		c.wd.onExpire = wi.InterruptWrite
	}
	return c
}

// Transport says what carries the connection.
func (c *Conn) Transport() string { return c.transport }

// Stream returns the stream the connection wraps.
func (c *Conn) Stream() Stream { return c.s }

func (c *Conn) opError(op string, err error) error { return OpError(op, c.net, c.local, c.remote, err) }

// OpError is err as the net package reports it from a connection between
// local and remote: Read, Write and Close name both ends (Source the
// local, Addr the remote); the deadline setters ("set") name only the
// local end, as Addr.
func OpError(op, network string, local, remote net.Addr, err error) *net.OpError {
	if op == "set" {
		return &net.OpError{Op: op, Net: network, Addr: local, Err: err}
	}
	return &net.OpError{Op: op, Net: network, Source: local, Addr: remote, Err: err}
}

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, c.opError("read", net.ErrClosed)
	}
	if c.rd.Expired() {
		return 0, c.opError("read", os.ErrDeadlineExceeded)
	}
	n, err := c.s.Read(p, c.rd.Done())
	return n, c.ioError("read", err)
}

// Write implements net.Conn.
func (c *Conn) Write(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, c.opError("write", net.ErrClosed)
	}
	if c.wd.Expired() {
		return 0, c.opError("write", os.ErrDeadlineExceeded)
	}
	n, err := c.s.Write(p, c.wd.Done())
	return n, c.ioError("write", err)
}

// ReadFrom implements io.ReaderFrom, so that io.Copy into the connection
// copies once when the stream can (StreamReaderFrom). Errors are
// *net.OpError with Op "readfrom", as *net.TCPConn's.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	rf, ok := c.s.(StreamReaderFrom)
	if !ok {
		n, err := io.Copy(writerOnly{c}, r)
		return n, err
	}
	if c.closed.Load() {
		return 0, c.opError("readfrom", net.ErrClosed)
	}
	if c.wd.Expired() {
		return 0, c.opError("readfrom", os.ErrDeadlineExceeded)
	}
	n, err := rf.CopyFrom(r, c.wd.Done())
	return n, c.ioError("readfrom", err)
}

// WriteTo implements io.WriterTo, so that io.Copy from the connection
// copies once when the stream can (StreamWriterTo). It returns a nil
// error at the peer's end; others are *net.OpError with Op "writeto".
func (c *Conn) WriteTo(w io.Writer) (int64, error) {
	wt, ok := c.s.(StreamWriterTo)
	if !ok {
		return io.Copy(w, readerOnly{c})
	}
	if c.closed.Load() {
		return 0, c.opError("writeto", net.ErrClosed)
	}
	if c.rd.Expired() {
		return 0, c.opError("writeto", os.ErrDeadlineExceeded)
	}
	n, err := wt.CopyTo(w, c.rd.Done())
	return n, c.ioError("writeto", err)
}

// writerOnly and readerOnly hide a Conn's ReadFrom and WriteTo from
// io.Copy, which would otherwise call them again.
type writerOnly struct{ io.Writer }
type readerOnly struct{ io.Reader }

func (c *Conn) ioError(op string, err error) error {
	switch {
	case err == nil || err == io.EOF:
		return err
	case c.closed.Load():
		return c.opError(op, net.ErrClosed)
	case errors.Is(err, ErrCanceled):
		return c.opError(op, os.ErrDeadlineExceeded)
	}
	return c.opError(op, err)
}

// CloseWrite shuts down the sending half.
func (c *Conn) CloseWrite() error {
	if c.closed.Load() {
		return c.opError("close", net.ErrClosed)
	}
	if err := c.s.CloseWrite(); err != nil {
		return c.opError("close", err)
	}
	return nil
}

// Close implements net.Conn; a second Close fails with net.ErrClosed.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closed.Store(true)
		c.rd.Stop()
		c.wd.Stop()
		if err := c.s.Close(); err != nil {
			c.closeErr = c.opError("close", err)
		}
	})
	if !first {
		return c.opError("close", net.ErrClosed)
	}
	return c.closeErr
}

// LocalAddr implements net.Conn.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// SetDeadline implements net.Conn.
func (c *Conn) SetDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.rd.Set(t)
	c.wd.Set(t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.rd.Set(t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	if c.closed.Load() {
		return c.opError("set", net.ErrClosed)
	}
	c.wd.Set(t)
	return nil
}

package netconn

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/net/nettest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pipe is an in-memory Stream: one direction of a byte queue with room
// for cap bytes, and its twin for the other direction.
type pipe struct {
	mu     sync.Mutex
	buf    []byte
	cap    int
	eof    bool // the writer closed
	closed bool // the reader closed
	readyR chan struct{}
	readyW chan struct{}
}

type memStream struct{ in, out *pipe }

func newPipe(n int) *pipe {
	return &pipe{cap: n, readyR: make(chan struct{}, 1), readyW: make(chan struct{}, 1)}
}

func kick(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func memPair(n int) (*memStream, *memStream) {
	ab, ba := newPipe(n), newPipe(n)
	return &memStream{in: ba, out: ab}, &memStream{in: ab, out: ba}
}

func (s *memStream) Read(p []byte, cancel <-chan struct{}) (int, error) {
	q := s.in
	for {
		q.mu.Lock()
		switch {
		case q.closed:
			q.mu.Unlock()
			return 0, net.ErrClosed
		case len(q.buf) > 0:
			n := copy(p, q.buf)
			q.buf = q.buf[n:]
			if len(q.buf) > 0 {
				kick(q.readyR)
			}
			q.mu.Unlock()
			kick(q.readyW)
			return n, nil
		case q.eof:
			q.mu.Unlock()
			kick(q.readyR)
			return 0, io.EOF
		}
		q.mu.Unlock()
		select {
		case <-q.readyR:
		case <-cancel:
			return 0, ErrCanceled
		}
	}
}

func (s *memStream) Write(p []byte, cancel <-chan struct{}) (int, error) {
	q := s.out
	n := 0
	for {
		q.mu.Lock()
		switch {
		case q.eof:
			q.mu.Unlock()
			return n, net.ErrClosed
		case q.closed:
			q.mu.Unlock()
			return n, errors.New("connection reset")
		}
		c := min(len(p)-n, q.cap-len(q.buf))
		q.buf = append(q.buf, p[n:n+c]...)
		n += c
		room := len(q.buf) < q.cap
		q.mu.Unlock()
		if c > 0 {
			kick(q.readyR)
		}
		if n == len(p) {
			if room {
				kick(q.readyW)
			}
			return n, nil
		}
		select {
		case <-q.readyW:
		case <-cancel:
			return n, ErrCanceled
		}
	}
}

func (s *memStream) CloseWrite() error {
	s.out.mu.Lock()
	s.out.eof = true
	s.out.mu.Unlock()
	kick(s.out.readyR)
	kick(s.out.readyW)
	return nil
}

func (s *memStream) Close() error {
	s.CloseWrite()
	s.in.mu.Lock()
	s.in.closed = true
	s.in.mu.Unlock()
	kick(s.in.readyR)
	kick(s.in.readyW)
	return nil
}

var addrA, addrB = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}

func makePipe() (c1, c2 net.Conn, stop func(), err error) {
	a, b := memPair(1 << 12)
	c1, c2 = New(a, "tcp", addrA, addrB, "mem"), New(b, "tcp", addrB, addrA, "mem")
	return c1, c2, func() { c1.Close(); c2.Close() }, nil
}

// TestConnPassesNettest: the façade over a plain in-memory stream has
// the semantics x/net's conformance suite checks of every net.Conn.
func TestConnPassesNettest(t *testing.T) { nettest.TestConn(t, makePipe) }

func TestErrorsAreNetErrors(t *testing.T) {
	c1, c2, stop, _ := makePipe()
	defer stop()
	c1.SetReadDeadline(time.Now().Add(-time.Second))
	_, err := c1.Read(make([]byte, 1))
	var op *net.OpError
	if !errors.As(err, &op) || op.Op != "read" || op.Net != "tcp" || op.Source != addrA || op.Addr != addrB || !op.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("timeout error %#v", err)
	}
	// The timed-out conn still works.
	c1.SetReadDeadline(time.Time{})
	go c2.Write([]byte("x"))
	if n, err := c1.Read(make([]byte, 1)); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	c2.(*Conn).CloseWrite()
	if _, err := c1.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after CloseWrite: %v, want bare io.EOF", err)
	}
	c1.Close()
	if _, err := c1.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v", err)
	}
	if err := c1.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second close: %v", err)
	}
	if c1.(*Conn).Transport() != "mem" {
		t.Fatal("transport")
	}
}

// deafStream's Read and Write never look at their cancel channel: only
// InterruptRead and InterruptWrite end them, as a reader waiting for
// data and a writer waiting for credits end when they receive for their
// device.
type deafStream struct {
	memStream
	readInterrupt, writeInterrupt chan struct{}
}

// waitInterrupt returns once interrupt is kicked, with ErrCanceled if
// cancel had closed by then, as the deadline's expiry does before it
// interrupts.
func waitInterrupt(interrupt chan struct{}, cancel <-chan struct{}) (int, error) {
	select {
	case <-interrupt:
	case <-time.After(10 * time.Second):
		return 0, errors.New("the deadline passed without an interrupt")
	}
	select {
	case <-cancel:
		return 0, ErrCanceled
	default:
		return 0, errors.New("interrupted before the deadline passed")
	}
}

func (s *deafStream) Read(p []byte, cancel <-chan struct{}) (int, error) {
	return waitInterrupt(s.readInterrupt, cancel)
}

func (s *deafStream) Write(p []byte, cancel <-chan struct{}) (int, error) {
	return waitInterrupt(s.writeInterrupt, cancel)
}

func (s *deafStream) InterruptRead()  { kick(s.readInterrupt) }
func (s *deafStream) InterruptWrite() { kick(s.writeInterrupt) }

// A deadline passing interrupts a Stream that is a ReadInterrupter or a
// WriteInterrupter, each on its own side.
func TestDeadlineInterrupts(t *testing.T) {
	for _, side := range []struct {
		name string
		set  func(*Conn, time.Time) error
		call func(*Conn) (int, error)
	}{
		{"read", (*Conn).SetReadDeadline, func(c *Conn) (int, error) { return c.Read(make([]byte, 1)) }},
		{"write", (*Conn).SetWriteDeadline, func(c *Conn) (int, error) { return c.Write(make([]byte, 1)) }},
	} {
		t.Run(side.name, func(t *testing.T) {
			a, _ := memPair(16)
			s := &deafStream{memStream: *a, readInterrupt: make(chan struct{}, 1), writeInterrupt: make(chan struct{}, 1)}
			c := New(s, "tcp", addrA, addrB, "mem")
			defer c.Close()
			side.set(c, time.Now().Add(20*time.Millisecond))
			if _, err := side.call(c); !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("%s past its deadline: %v", side.name, err)
			}
		})
	}
}

// A Conn over a Stream without CopyFrom and CopyTo still is an
// io.ReaderFrom and io.WriterTo, through a buffer.
func TestCopyWithoutStreamSupport(t *testing.T) {
	c1, c2, stop, _ := makePipe()
	defer stop()
	msg := make([]byte, 100000)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	sent := make(chan error, 1)
	go func() {
		n, err := c1.(io.ReaderFrom).ReadFrom(bytes.NewReader(msg))
		if err == nil && n != int64(len(msg)) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = c1.(*Conn).CloseWrite()
		}
		sent <- err
	}()
	var got bytes.Buffer
	n, err := c2.(io.WriterTo).WriteTo(&got)
	if err != nil || n != int64(len(msg)) || !bytes.Equal(got.Bytes(), msg) {
		t.Fatalf("WriteTo: %d bytes, %v; equal %v", n, err, bytes.Equal(got.Bytes(), msg))
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
}

// The deadline setters fail on a closed connection as *net.TCPConn's do:
// Op "set", no Source, the local address as Addr. Read, Write and Close
// name both ends.
func TestSetErrorsNameTheLocalEndAsGosNetDoes(t *testing.T) {
	c1, _, stop, _ := makePipe()
	defer stop()
	c1.Close()
	for name, set := range map[string]func(time.Time) error{
		"SetDeadline": c1.SetDeadline, "SetReadDeadline": c1.SetReadDeadline, "SetWriteDeadline": c1.SetWriteDeadline,
	} {
		var op *net.OpError
		err := set(time.Now())
		require.ErrorAs(t, err, &op, name)
		assert.Equal(t, &net.OpError{Op: "set", Net: "tcp", Addr: addrA, Err: net.ErrClosed}, op, name)
	}
	_, err := c1.Read(make([]byte, 1))
	assert.Equal(t, &net.OpError{Op: "read", Net: "tcp", Source: addrA, Addr: addrB, Err: net.ErrClosed}, err)

	// The same rules as the kernel's own TCP connections.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	tc, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	tc.Close()
	var op *net.OpError
	require.ErrorAs(t, tc.SetDeadline(time.Now()), &op)
	assert.Equal(t, "set", op.Op)
	assert.Nil(t, op.Source)
	assert.Equal(t, tc.LocalAddr(), op.Addr)
}

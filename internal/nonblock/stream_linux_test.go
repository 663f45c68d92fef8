//go:build linux

package nonblock

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tcpPair is a connected pair of TCP conns on loopback.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		accepted <- c
	}()
	a, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	b := <-accepted
	require.NotNil(t, b)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// streamPair is a connected pair of TCP conns on loopback and a Stream of
// each.
func streamPair(t *testing.T) (a, b *net.TCPConn, sa, sb *Stream) {
	a, b = tcpPair(t)
	var err error
	sa, err = NewStream(a)
	require.NoError(t, err)
	sb, err = NewStream(b)
	require.NoError(t, err)
	return a, b, sa, sb
}

// Many buffers, far more than the socket holds, arrive whole and in
// order through WriteBuffers and Read (the writer waits for room in the
// poller); then the writer's close reads as io.EOF.
func TestStreamCarriesBuffersInOrder(t *testing.T) {
	a, _, w, r := streamPair(t)

	var want bytes.Buffer
	var bufs [][]byte
	for i := range 200 { // 200 buffers, 100 more than one writev takes
		p := bytes.Repeat([]byte{byte(i)}, 1000+i*97)
		want.Write(p)
		bufs = append(bufs, p)
	}
	wrote := make(chan error, 1)
	go func() {
		n, err := w.WriteBuffers(bufs)
		if err == nil && n != int64(want.Len()) {
			err = errors.New("short write")
		}
		if err == nil {
			_, err = w.Write([]byte("end"))
		}
		a.CloseWrite()
		wrote <- err
	}()
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, <-wrote)
	want.WriteString("end")
	require.True(t, bytes.Equal(want.Bytes(), got), "got %d bytes, want %d", len(got), want.Len())
}

// A Read waits in the poller: the conn's deadline ends it with the
// net package's timeout, and its Close ends it too (whether the Read is
// already waiting or only about to: both must end in net.ErrClosed).
func TestStreamReadHonoursDeadlineAndClose(t *testing.T) {
	a, _ := tcpPair(t)
	s, err := NewStream(a)
	require.NoError(t, err)
	require.NoError(t, a.SetReadDeadline(time.Now().Add(20*time.Millisecond)))
	_, err = s.Read(make([]byte, 10))
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)

	require.NoError(t, a.SetReadDeadline(time.Time{}))
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 10))
		done <- err
	}()
	require.NoError(t, a.Close())
	require.ErrorIs(t, <-done, net.ErrClosed)
}

// A write to a peer that has reset fails with the kernel's errno, and
// the write that fails claims nothing written.
func TestStreamWriteToAResetPeerFails(t *testing.T) {
	_, b, s, _ := streamPair(t)
	require.NoError(t, b.SetLinger(0))
	require.NoError(t, b.Close()) // a reset
	var n int
	var werr error
	for range 100 { // the reset arrives at once on loopback; a few writes see it
		if n, werr = s.Write(make([]byte, 1<<16)); werr != nil {
			break
		}
	}
	require.Error(t, werr)
	assert.True(t, errors.Is(werr, syscall.ECONNRESET) || errors.Is(werr, syscall.EPIPE), "got %v", werr)
	assert.Zero(t, n)
}

// Reading and writing allocate nothing per call.
func TestStreamDoesNotAllocate(t *testing.T) {
	_, _, w, r := streamPair(t)
	out, in := make([]byte, 512), make([]byte, 512)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := w.Write(out); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, in); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

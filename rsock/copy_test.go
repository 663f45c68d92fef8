package rsock

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingReader hides everything but Read, and counts the calls: a copy
// through CopyFrom reads in buffers of the peer's size.
type countingReader struct {
	r     io.Reader
	calls int
}

func (c *countingReader) Read(p []byte) (int, error) { c.calls++; return c.r.Read(p) }

// streamPair connects an rsock stream on loopback; both ends are closed,
// and the stacks drained, when the test ends.
func streamPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	l, err := (&ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	client, server = pair(t, l, &Dialer{})
	t.Cleanup(func() {
		client.Close()
		server.Close()
		l.Close()
		settle(t)
	})
	return client, server
}

// io.Copy through a stream's ReadFrom and WriteTo, with TCP sockets on
// the far sides as rsock-proxy has them, moves every byte in order.
func TestCopyThroughTheStream(t *testing.T) {
	c, s := streamPair(t)
	require.Equal(t, "vroce", transport(c))
	_, ok := c.(io.ReaderFrom)
	require.True(t, ok, "an rsock Conn is an io.ReaderFrom")
	_, ok = s.(io.WriterTo)
	require.True(t, ok, "an rsock Conn is an io.WriterTo")

	msg := make([]byte, 4<<20+123)
	rand.Read(msg)
	want := sha256.Sum256(msg)

	// Client side: bytes from a reader are sent through ReadFrom.
	src := &countingReader{r: bytes.NewReader(msg)}
	sent := make(chan error, 1)
	go func() {
		n, err := c.(io.ReaderFrom).ReadFrom(src)
		if err == nil && n != int64(len(msg)) {
			err = errors.New("short ReadFrom")
		}
		if err == nil {
			err = c.(*Conn).CloseWrite()
		}
		sent <- err
	}()

	// Server side: WriteTo into a TCP socket, read back on its far end.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer tl.Close()
	far := make(chan []byte, 1)
	go func() {
		fc, err := tl.Accept()
		if err != nil {
			far <- nil
			return
		}
		defer fc.Close()
		b, _ := io.ReadAll(fc)
		far <- b
	}()
	tc, err := net.Dial("tcp", tl.Addr().String())
	require.NoError(t, err)
	n, err := s.(io.WriterTo).WriteTo(tc)
	require.NoError(t, err, "WriteTo ends with the peer's FIN, without an error")
	assert.Equal(t, int64(len(msg)), n)
	tc.Close()
	require.NoError(t, <-sent)
	got := <-far
	assert.Equal(t, want, sha256.Sum256(got), "%d bytes of %d arrived", len(got), len(msg))
	assert.Less(t, src.calls, len(msg)/4096, "ReadFrom read in buffers of the peer's size")

}

// A read deadline ends a WriteTo waiting for data, as it ends a Read, and
// the connection still works after it.
func TestWriteToDeadline(t *testing.T) {
	c, s := streamPair(t)
	var sink bytes.Buffer
	require.NoError(t, s.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
	_, err := s.(io.WriterTo).WriteTo(&sink)
	var op *net.OpError
	require.ErrorAs(t, err, &op)
	assert.Equal(t, "writeto", op.Op)
	assert.ErrorIs(t, err, os.ErrDeadlineExceeded)

	require.NoError(t, s.SetReadDeadline(time.Time{}))
	_, err = c.Write([]byte("after the deadline"))
	require.NoError(t, err)
	require.NoError(t, c.(*Conn).CloseWrite())
	_, err = s.(io.WriterTo).WriteTo(&sink)
	require.NoError(t, err)
	assert.Equal(t, "after the deadline", sink.String())
}

// A writer that fails ends WriteTo with its error; the bytes it took are
// counted.
func TestWriteToWriterFails(t *testing.T) {
	c, s := streamPair(t)
	_, err := c.Write([]byte("0123456789"))
	require.NoError(t, err)
	broken := errors.New("disk full")
	n, err := s.(io.WriterTo).WriteTo(failAfter{4, broken})
	assert.ErrorIs(t, err, broken)
	assert.Equal(t, int64(4), n)

}

// failAfter takes n bytes, then fails.
type failAfter struct {
	n   int
	err error
}

func (f failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return f.n, f.err
	}
	return len(p), nil
}

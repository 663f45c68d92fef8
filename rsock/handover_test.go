package rsock

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"vroce.dev/internal/testkit/verbstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A TCP listener a program opened is served as Listen serves its own
// port: vRoCE clients get streams, plain TCP clients the TCP connection;
// closing the rsock listener closes it.
func TestServeAnExistingTCPListener(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	l, err := (&ListenConfig{}).Serve(ln)
	require.NoError(t, err)
	assert.Equal(t, ln.Addr().String(), l.Addr().String())
	served := echoServer(t, l)

	c, err := Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(1, 200<<10)))
	c.Close()

	plain, err := net.Dial("tcp", l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, roundTrip(plain, payload(2, 10<<10)), "a plain TCP client on the same listener")
	plain.Close()

	require.NoError(t, l.Close())
	served.Wait()
	_, err = ln.Accept()
	assert.ErrorIs(t, err, net.ErrClosed, "the rsock listener owned ln")
	_, err = (&ListenConfig{Mode: ModeCM}).Serve(ln)
	assert.Error(t, err, "a TCP listener is served in socket mode only")
	settle(t)
}

// A listener Serve cannot take (its UDP twin is in use) stays the
// caller's, open; $RSOCK_MODE does not keep Serve or DialOver from the
// socket mode they work in.
func TestServeLeavesTheListenerToTheCallerOnError(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer ln.Close()
	twin, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: ln.Addr().(*net.TCPAddr).Port})
	require.NoError(t, err)
	_, err = (&ListenConfig{}).Serve(ln)
	require.Error(t, err, "the device's UDP port is taken")
	twin.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
	}()
	c, err := ln.Accept()
	require.NoError(t, err, "ln is still open and the caller's")
	c.Close()

	t.Setenv("RSOCK_MODE", ModeCM)
	l, err := (&ListenConfig{}).Serve(ln)
	require.NoError(t, err)
	tc, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := (&Dialer{}).DialOver(ctx, tc)
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(s))
	s.Close()
	l.Close()
	settle(t)
}

// A TCP connection a program established becomes a stream when the
// service speaks vRoCE, and stays the TCP connection, untouched, when it
// does not (or fails, without fallback).
func TestDialOverAnEstablishedTCPConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	served := echoServer(t, l)
	tc, err := net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	c, err := (&Dialer{}).DialOver(ctx, tc)
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	assert.Equal(t, tc.RemoteAddr().String(), c.RemoteAddr().String())
	require.NoError(t, roundTrip(c, payload(3, 200<<10)))
	c.Close()

	plainLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer plainLn.Close()
	got := make(chan []byte, 2)
	go func() {
		for {
			s, err := plainLn.Accept()
			if err != nil {
				return
			}
			b, _ := io.ReadAll(s)
			got <- b
			s.Close()
		}
	}()
	tc, err = net.DialTCP("tcp", nil, plainLn.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	c, err = (&Dialer{}).DialOver(ctx, tc)
	require.NoError(t, err)
	assert.Equal(t, "tcp", transport(c))
	_, err = c.Write([]byte("plain"))
	require.NoError(t, err)
	c.(interface{ CloseWrite() error }).CloseWrite()
	assert.Equal(t, []byte("plain"), <-got, "the plain server got the bytes over the connection handed in")
	c.Close()

	tc, err = net.DialTCP("tcp", nil, plainLn.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	_, err = (&Dialer{NoFallback: true}).DialOver(ctx, tc)
	assert.True(t, errors.Is(err, ErrNotVRoCE), "%v", err)
	assert.Empty(t, <-got, "without fallback the plain server gets nothing")

	tc, err = net.DialTCP("tcp", nil, l.Addr().(*net.TCPAddr))
	require.NoError(t, err)
	_, err = (&Dialer{Mode: ModeCM}).DialOver(ctx, tc)
	assert.Error(t, err, "a stream over a TCP connection is made in socket mode only")
	l.Close()
	served.Wait()
	settle(t)
}

// DialOverConnect sends its probe before it connects, as Dial does with
// the SYN: the listener has heard it by the time the connection arrives,
// so it waits for the exchange as long as a probed host may need, rather
// than the 200 ms it gives a client that did not probe.
func TestDialOverConnectProbesBeforeItConnects(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := listen(t, &ListenConfig{}, "127.0.0.1:0")
	served := echoServer(t, l)
	laddr := l.Addr().(*net.TCPAddr)
	var probedFirst bool
	c, err := (&Dialer{}).DialOverConnect(ctx, laddr.AddrPort(), func() (*net.TCPConn, error) {
		probedFirst = verbstest.Eventually(func() bool { return l.(*Listener).st.cm.ProbedRecently(laddr.AddrPort().Addr()) }, 5*time.Second)
		return net.DialTCP("tcp", nil, laddr)
	})
	require.NoError(t, err)
	assert.True(t, probedFirst, "the listener had not been probed when the connection was made")
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(4, 64<<10)))
	c.Close()
	l.Close()
	served.Wait()
	settle(t)
}

// unlistenedSocket is a TCP socket not listening, as a program's is when
// it calls listen: bound to a free loopback port if bind is set, else
// with no port yet.
func unlistenedSocket(t *testing.T, bind bool) *net.TCPListener {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	f := os.NewFile(uintptr(fd), "unlistened")
	defer f.Close()
	if bind {
		require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	}
	ln, err := net.FileListener(f)
	require.NoError(t, err)
	return ln.(*net.TCPListener)
}

// A socket handed over bound but not listening listens only once the
// vRoCE service can answer: where the device cannot be opened it is left
// not listening (a connect is refused), and where it can, the first
// client that finds the port open gets a stream.
func TestServeListensOnlyOnceTheServiceAnswers(t *testing.T) {
	ln := unlistenedSocket(t, true)
	defer ln.Close()
	addr := ln.Addr().(*net.TCPAddr)
	twin, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr.IP, Port: addr.Port})
	require.NoError(t, err)
	_, err = (&ListenConfig{}).Serve(ln)
	require.Error(t, err, "the device's UDP port is taken")
	_, err = net.DialTCP("tcp", nil, addr)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "Serve failed: the socket must not listen")
	twin.Close()

	l, err := (&ListenConfig{}).Serve(ln)
	require.NoError(t, err)
	served := echoServer(t, l)
	c, err := (&Dialer{NoFallback: true, Timeout: 10 * time.Second}).Dial("tcp", addr.String())
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(5, 64<<10)))
	c.Close()
	plain, err := net.Dial("tcp", addr.String())
	require.NoError(t, err)
	require.NoError(t, roundTrip(plain, payload(6, 10<<10)), "a plain TCP client on the same port")
	plain.Close()
	l.Close()
	served.Wait()
	settle(t)
}

// A socket with no port yet is given one by listening first (nobody can
// know it before Serve returns), and the device opens on that port: the
// listener's address is the one the kernel chose, and a dialer that may
// not fall back gets a stream there.
func TestServeAnUnboundSocketListensFirstForItsPort(t *testing.T) {
	ln := unlistenedSocket(t, false)
	defer ln.Close()
	l, err := (&ListenConfig{}).Serve(ln)
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NotZero(t, port, "the port listen gave the socket")
	served := echoServer(t, l)
	c, err := (&Dialer{NoFallback: true, Timeout: 10 * time.Second}).Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(8, 64<<10)))
	c.Close()
	l.Close()
	served.Wait()
	settle(t)
}

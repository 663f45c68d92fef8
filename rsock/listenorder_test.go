package rsock

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"vroce.dev/vroce"
)

// gatedOpens holds each open of the "udp-gated" provider (the udp
// provider, opened once the test says so) until the test receives from
// it and sends back.
var gatedOpens = make(chan chan struct{})

func init() {
	vroce.RegisterProviderWithTraits("udp-gated", func(cfg vroce.ProviderConfig) (vroce.Provider, error) {
		release := make(chan struct{})
		gatedOpens <- release
		<-release
		return vroce.OpenProvider("udp", cfg)
	}, vroce.ProviderTraits{ProbesFromASocket: true})
}

// Listen on a port given opens the TCP port only once its vRoCE device
// is open and its service listening: while the device opens, a connect
// is refused (not taken, to be told there is no vRoCE service there);
// once Listen returns, a dialer that may not fall back gets a stream.
func TestListenOpensTheTCPPortAfterItsService(t *testing.T) {
	addr := freeTCPAddr(t, "127.0.0.1")

	type result struct {
		l   net.Listener
		err error
	}
	listened := make(chan result, 1)
	go func() {
		l, err := (&ListenConfig{Provider: "udp-gated"}).Listen(context.Background(), "tcp", addr.String())
		listened <- result{l, err}
	}()
	release := <-gatedOpens // the device is opening
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // a failure below must not leave Listen waiting
	_, err := net.DialTCP("tcp", nil, addr)
	require.ErrorIs(t, err, syscall.ECONNREFUSED, "the TCP port listened before its device was open")
	open()
	r := <-listened
	require.NoError(t, r.err)
	served := echoServer(t, r.l)

	c, err := (&Dialer{NoFallback: true, Timeout: 10 * time.Second}).Dial("tcp", addr.String())
	require.NoError(t, err)
	assert.Equal(t, "vroce", transport(c))
	require.NoError(t, roundTrip(c, payload(7, 64<<10)))
	c.Close()
	r.l.Close()
	served.Wait()
	settle(t)
}

// A port another program listens on fails Listen before the vRoCE
// device opens at all: no probe to the port's UDP twin is answered as
// if a vRoCE service were there. (The positive control, the same port
// free, is TestListenOpensTheTCPPortAfterItsService, whose device
// opens.)
func TestListenOnATakenPortOpensNoDevice(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	type result struct {
		l   net.Listener
		err error
	}
	listened := make(chan result, 1)
	go func() {
		l, err := (&ListenConfig{Provider: "udp-gated"}).Listen(context.Background(), "tcp", taken.Addr().String())
		listened <- result{l, err}
	}()
	select {
	case r := <-listened:
		require.ErrorIs(t, r.err, syscall.EADDRINUSE)
		var op *net.OpError
		require.ErrorAs(t, r.err, &op)
		assert.Equal(t, "listen", op.Op)
	case release := <-gatedOpens:
		close(release)
		if r := <-listened; r.l != nil {
			r.l.Close()
		}
		t.Fatal("the device opened for a TCP port another program holds")
	}
}

// A port given with no host listens on every address, IPv4 and IPv6 on
// one socket as net.Listen's, and serves plain TCP clients of both.
func TestListenOnEveryAddressTakesBothFamilies(t *testing.T) {
	port := freeTCPAddr(t, "").Port

	l, err := Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	require.NoError(t, err)
	served := echoServer(t, l)
	for _, addr := range []string{"127.0.0.1", "::1"} {
		c, err := net.Dial("tcp", net.JoinHostPort(addr, strconv.Itoa(port)))
		if addr == "::1" && errors.Is(err, syscall.EADDRNOTAVAIL) {
			continue // no IPv6 loopback on this host
		}
		require.NoError(t, err, addr)
		require.NoError(t, roundTrip(c, payload(3, 1<<10)), addr)
		c.Close()
	}
	l.Close()
	served.Wait()
	settle(t)
}

// ListenConfig.KeepAlive reaches a plain TCP client's connection on a
// port the listener bound itself, as net.ListenConfig's does: off when
// negative, on by default.
func TestListenKeepAliveReachesPlainTCPClients(t *testing.T) {
	for _, c := range []struct {
		keepAlive time.Duration
		want      int
	}{{-1, 0}, {0, 1}} {
		addr := freeTCPAddr(t, "127.0.0.1").String()

		l, err := (&ListenConfig{KeepAlive: c.keepAlive}).Listen(context.Background(), "tcp", addr)
		require.NoError(t, err)
		client, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = client.Write([]byte("GET / HTTP/1.0\r\n\r\n")) // not the vRoCE exchange: a plain client
		require.NoError(t, err)
		sc, err := l.Accept()
		require.NoError(t, err)
		tc, ok := sc.(*TCPConn)
		require.True(t, ok, "a plain TCP client's connection is a *TCPConn, not %T", sc)
		rc, err := tc.SyscallConn()
		require.NoError(t, err)
		var on int
		require.NoError(t, rc.Control(func(fd uintptr) {
			on, err = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		}))
		require.NoError(t, err)
		assert.Equal(t, c.want, on, "SO_KEEPALIVE with KeepAlive %v", c.keepAlive)
		sc.Close()
		client.Close()
		l.Close()
	}
	settle(t)
}

// freeTCPAddr is a TCP address on host with a port nothing listens on
// (one the system gave a moment ago).
func freeTCPAddr(t *testing.T, host string) *net.TCPAddr {
	t.Helper()
	free, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	require.NoError(t, err)
	defer free.Close()
	return free.Addr().(*net.TCPAddr)
}

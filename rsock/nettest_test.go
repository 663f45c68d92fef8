package rsock

import (
	"context"
	"net"
	"testing"

	"golang.org/x/net/nettest"
)

// makePipe returns a nettest.MakePipe that connects through a listener
// made by listen, dialing with dial.
func makePipe(t *testing.T, listen func() (net.Listener, error), dial func(addr string) (net.Conn, error), wantClient, wantServer string) nettest.MakePipe {
	return func() (c1, c2 net.Conn, stop func(), err error) {
		l, err := listen()
		if err != nil {
			return nil, nil, nil, err
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			accepted <- c
		}()
		c1, err = dial(l.Addr().String())
		if err != nil {
			l.Close()
			return nil, nil, nil, err
		}
		c2 = <-accepted
		if transport(c1) != wantClient || transport(c2) != wantServer {
			t.Errorf("transports %s and %s, want %s and %s", transport(c1), transport(c2), wantClient, wantServer)
		}
		return c1, c2, func() { c1.Close(); c2.Close(); l.Close() }, nil
	}
}

func rsockListen(mode string) func() (net.Listener, error) {
	return func() (net.Listener, error) {
		return (&ListenConfig{Mode: mode}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	}
}

func rsockDial(mode string) func(string) (net.Conn, error) {
	return func(addr string) (net.Conn, error) { return (&Dialer{Mode: mode}).Dial("tcp", addr) }
}

func TestNettestVRoCESocketMode(t *testing.T) {
	nettest.TestConn(t, makePipe(t, rsockListen(ModeSocket), rsockDial(ModeSocket), "vroce", "vroce"))
	settle(t)
}

func TestNettestVRoCECMMode(t *testing.T) {
	nettest.TestConn(t, makePipe(t, rsockListen(ModeCM), rsockDial(ModeCM), "vroce", "vroce"))
	settle(t)
}

// An rsock dialer reaching a plain TCP server carries on over TCP.
func TestNettestFallbackDialer(t *testing.T) {
	plain := func() (net.Listener, error) { return net.Listen("tcp", "127.0.0.1:0") }
	nettest.TestConn(t, makePipe(t, plain, rsockDial(ModeSocket), "tcp", "?"))
	settle(t)
}

// A plain TCP client reaching an rsock listener is served over TCP.
func TestNettestFallbackListener(t *testing.T) {
	plain := func(addr string) (net.Conn, error) { return net.Dial("tcp", addr) }
	nettest.TestConn(t, makePipe(t, rsockListen(ModeSocket), plain, "?", "tcp"))
	settle(t)
}

package rsock

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"vroce.dev/providers/sim"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv("RSOCK_TEST_WRITER"); addr != "" {
		writeForever(addr) // the child of TestPeerProcessKilledMidTransfer
	}
	goleak.VerifyTestMain(m)
}

// writeForever dials addr and writes until it is killed.
func writeForever(addr string) {
	c, err := Dial("tcp", addr)
	if err != nil {
		os.Exit(2)
	}
	buf := make([]byte, 64<<10)
	for {
		if _, err := c.Write(buf); err != nil {
			os.Exit(3)
		}
	}
}

// settle waits for every stream of the test to finish closing in the
// background and its device to close.
func settle(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := Drain(ctx); err != nil {
		t.Fatalf("%d stacks still open: %v", liveStacks.Load(), err)
	}
}

func transport(c net.Conn) string {
	if t, ok := c.(interface{ Transport() string }); ok {
		return t.Transport()
	}
	return "?"
}

// haveIPv6Loopback reports whether a socket can listen on ::1.
func haveIPv6Loopback() bool {
	l, err := net.Listen("tcp", "[::1]:0")
	if err == nil {
		l.Close()
	}
	return err == nil
}

// simCMPair connects a stream over network in RDMA_CM mode, keepalive
// off, and returns both ends, the listener (on 127.0.0.1:port) and the
// dialer's device address (127.0.0.2:port), which sim's DropNext and
// Partition name.
func simCMPair(t *testing.T, network *sim.Network, port int) (client, server net.Conn, l net.Listener, dialer netip.AddrPort) {
	t.Helper()
	dialer = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), uint16(port))
	lc := &ListenConfig{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: "127.0.0.1:0", KeepAlive: -1}
	l = listen(t, lc, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)).String())
	d := &Dialer{Mode: ModeCM, Provider: "sim", ProviderOptions: network, DeviceAddr: dialer.String(), KeepAlive: -1}
	client, server = pair(t, l, d)
	return client, server, l, dialer
}

// pair dials l and returns both ends.
func pair(t testing.TB, l net.Listener, d *Dialer) (client, server net.Conn) {
	t.Helper()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	client, err := d.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	return client, server
}

// TestStreamEcho: a stream each way in both connection modes, over IPv4
// and IPv6.
func TestStreamEcho(t *testing.T) {
	for _, test := range []struct{ mode, at string }{
		{ModeSocket, "127.0.0.1:0"}, {ModeCM, "127.0.0.1:0"}, {ModeSocket, "[::1]:0"}, {ModeCM, "[::1]:0"},
	} {
		mode := test.mode
		t.Run(mode+" "+test.at, func(t *testing.T) {
			if test.at == "[::1]:0" && !haveIPv6Loopback() {
				t.Skip("this machine has no IPv6 loopback address")
			}
			l, err := (&ListenConfig{Mode: mode}).Listen(context.Background(), "tcp", test.at)
			if err != nil {
				t.Fatal(err)
			}
			c, s := pair(t, l, &Dialer{Mode: mode})
			if transport(c) != "vroce" || transport(s) != "vroce" {
				t.Fatalf("transports %s and %s", transport(c), transport(s))
			}
			msg := bytes.Repeat([]byte("vroce stream "), 20000) // 260 KB: several buffers
			go func() {
				c.Write(msg)
				c.(*Conn).CloseWrite()
			}()
			got, err := io.ReadAll(s)
			if err != nil || !bytes.Equal(got, msg) {
				t.Fatalf("read %d bytes, %v", len(got), err)
			}
			if _, err := s.Write([]byte("bye")); err != nil {
				t.Fatal(err)
			}
			s.Close()
			b, err := io.ReadAll(c)
			if err != nil || string(b) != "bye" {
				t.Fatalf("client read %q %v", b, err)
			}
			c.Close()
			l.Close()
			settle(t)
		})
	}
}

func TestDialClosedPortIsRefused(t *testing.T) {
	addr := freeTCPAddr(t, "127.0.0.1").String()
	for _, mode := range []string{ModeSocket, ModeCM} {
		_, err := (&Dialer{Mode: mode}).Dial("tcp", addr)
		var op *net.OpError
		if !errors.As(err, &op) || op.Op != "dial" || !isRefused(err) {
			t.Fatalf("%s: %v, want a dial OpError with ECONNREFUSED", mode, err)
		}
	}
	settle(t)
}

func isRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
